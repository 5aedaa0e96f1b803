//! One busy route over the whole Redis Cluster (docs/operations.md,
//! "Redis settings that must hold" and "Sizing"): with the scope sharded
//! over 64 slots, the scripts one route runs fall on every master of a real
//! 3-master cluster in near-equal shares (counted by `INFO commandstats`,
//! not timed).

use std::collections::HashMap;

use http::StatusCode;

use crate::support::*;

async fn deliver_once(urls: &[String], ids: &[String]) -> HashMap<String, StatusCode> {
    let sender = Sender::new();
    let tasks: Vec<_> = (ids.iter().enumerate())
        .map(|(i, id)| {
            let (sender, url, id) = (sender.clone(), urls[i % urls.len()].clone(), id.clone());
            tokio::spawn(async move {
                let answer = sender.deliver(&url, &event(&id)).await;
                (id, answer.status)
            })
        })
        .collect();
    let mut answered = HashMap::new();
    for task in tasks {
        let (id, status) = task.await.unwrap();
        answered.insert(id, status);
    }
    answered
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_route_spreads_over_every_master() {
    let Some(cluster) = RedisCluster::start().await else {
        return;
    };
    let upstream = Upstream::start().await;
    let text = config_text(
        &upstream.url("/"),
        &Backend::RedisCluster(cluster.toml()),
        "",
        "timeout = \"1s\"",
    );
    let a = TestGateway::start(&text).await;
    let b = TestGateway::start(&text).await;
    let urls = vec![a.url("/hook"), b.url("/hook")];

    // The load of one route, per master.
    let masters = cluster.masters().await;
    assert_eq!(masters.len(), 3);
    let mut before = Vec::new();
    for port in &masters {
        before.push(cluster.script_calls(*port).await);
    }
    let ids: Vec<String> = (0..900).map(|i| format!("evt_spread_{i}")).collect();
    for chunk in ids.chunks(60) {
        let answered = deliver_once(&urls, chunk).await;
        assert!(
            answered.values().all(|s| *s == StatusCode::OK),
            "{answered:?}"
        );
    }
    let mut calls = Vec::new();
    for (port, before) in masters.iter().zip(&before) {
        calls.push(cluster.script_calls(*port).await - before);
    }
    let mean = calls.iter().sum::<u64>() as f64 / calls.len() as f64;
    eprintln!("script calls per master for 900 events of one route: {calls:?}");
    for n in &calls {
        let off = (*n as f64 - mean).abs() / mean;
        assert!(off < 0.25, "one master ran {n} of {calls:?}");
    }

    for id in &ids {
        assert_eq!(upstream.count(id), 1, "{id}");
    }
    a.shutdown().await;
    b.shutdown().await;
}
