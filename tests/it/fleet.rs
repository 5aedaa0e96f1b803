//! Fleets: several gateway processes on one Redis Cluster, a master failing
//! over mid-stream, a gateway killed mid-call. Real processes, loopback only.

use std::time::Duration;

use http::StatusCode;
use rand::seq::SliceRandom;

use crate::support::*;

fn cluster_config(
    upstream: &str,
    cluster: &RedisCluster,
    route_extra: &str,
    store_extra: &str,
) -> String {
    config_text(upstream, &Backend::Memory, route_extra, store_extra)
        .replace("backend = \"memory\"", &cluster.toml())
}

/// 120 events × 4 deliveries, spread at random over three gateway processes,
/// concurrently: every event reaches the upstream exactly once. With the
/// default packed claim, the first delivery's claim is one `SET`, its
/// duplicates meeting it as a string, opened by the claim script.
#[tokio::test]
async fn three_gateways_on_one_cluster_forward_each_event_once() {
    three_gateways_forward_each_event_once("").await;
}

/// The same with the hashed claim (`packed_claims = false`).
#[tokio::test]
async fn three_gateways_with_hashed_claims_forward_each_event_once() {
    three_gateways_forward_each_event_once("packed_claims = false").await;
}

async fn three_gateways_forward_each_event_once(store_extra: &str) {
    let Some(cluster) = shared_cluster().await else {
        return;
    };
    let upstream = Upstream::with(|seen| Plan {
        delay: Duration::from_millis(rand::random::<u64>() % 15),
        ..ok_plan(seen)
    })
    .await;
    let text = cluster_config(&upstream.url("/"), cluster, "", store_extra);
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut gateways = Vec::new();
    for dir in &dirs {
        let (path, port) = write_config(dir.path(), &text);
        gateways.push(GatewayProcess::start(&path, port).await);
    }
    let urls: Vec<String> = gateways.iter().map(|g| g.url("/hook")).collect();

    let mut deliveries: Vec<String> = (0..120)
        .flat_map(|i| std::iter::repeat_n(format!("evt_fleet_{i}"), 4))
        .collect();
    deliveries.shuffle(&mut rand::thread_rng());
    let sender = Sender::new();
    let mut tasks = Vec::new();
    for (n, id) in deliveries.into_iter().enumerate() {
        let (sender, url) = (sender.clone(), urls[n % urls.len()].clone());
        tasks.push(tokio::spawn(async move {
            sender.deliver_until_settled(&url, &event(&id)).await
        }));
    }
    for task in tasks {
        let answer = task.await.unwrap();
        if answer.status != StatusCode::OK {
            let logs: Vec<String> = gateways
                .iter_mut()
                .flat_map(|g| g.logs().lines().map(str::to_owned).collect::<Vec<_>>())
                .filter(|line| {
                    line.contains("WARN") || line.contains("\"warn") || line.contains("ERROR")
                })
                .collect();
            panic!("{answer:?}\n{}", logs.join("\n"));
        }
    }
    let counts = upstream.counts();
    assert_eq!(counts.len(), 120);
    assert!(counts.values().all(|&n| n == 1), "{counts:?}");
}

/// Kill the master that owns a busy key while deliveries stream; its replica
/// takes over, and the killed node comes back as a replica (as an operator or
/// orchestrator would bring it back). Returns (events lost, events the
/// upstream saw more than once).
async fn failover_run(min_replicas_acked: u32) -> (usize, usize) {
    let _heavy = heavy().await;
    let cluster = std::sync::Arc::new(
        RedisCluster::start()
            .await
            .expect("redis-server is installed"),
    );
    let upstream = Upstream::start().await;
    let store = format!("min_replicas_acked = {min_replicas_acked}");
    let text = cluster_config(
        &upstream.url("/"),
        &cluster,
        "processing_ttl = \"2s\"\nretention = \"1h\"",
        &store,
    )
    .replace("timeout = \"300ms\"", "timeout = \"1s\"");
    let a = TestGateway::start(&text).await;
    let b = TestGateway::start(&text).await;
    let urls = vec![a.url("/hook"), b.url("/hook")];
    let prefix = format!("evt_failover_{min_replicas_acked}");
    // A master: each holds a share of the route's keys (64 shards).
    let victim = cluster.masters().await[0];

    let disruption = {
        let cluster = std::sync::Arc::clone(&cluster);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(600)).await;
            cluster.kill(victim).await;
            tokio::time::sleep(Duration::from_secs(3)).await;
            cluster.restart(victim).await;
        })
    };
    let settled = deliver_paced(&urls, 100, &prefix).await;
    disruption.await.unwrap();
    assert_eq!(settled.len(), 100, "every event settled with a 2xx");
    let counts = upstream.counts();
    let lost = (0..100)
        .filter(|i| !counts.contains_key(&format!("{prefix}_{i}")))
        .count();
    let doubled = counts.values().filter(|&&n| n > 1).count();
    a.shutdown().await;
    b.shutdown().await;
    (lost, doubled)
}

/// With `min_replicas_acked = 1` a master failover neither loses nor
/// doubles an event; without it, the window is measured and reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_master_failover_loses_and_doubles_nothing_with_wait() {
    if RedisServer::start_check().is_none() {
        return;
    }
    let (lost, doubled) = failover_run(1).await;
    assert_eq!(lost, 0, "no event lost");
    assert_eq!(
        doubled, 0,
        "no event forwarded twice with min_replicas_acked = 1"
    );

    let (lost, doubled) = failover_run(0).await;
    assert_eq!(lost, 0, "no event lost");
    eprintln!("failover without min_replicas_acked: {doubled} of 100 events forwarded twice");
}

/// SIGKILL a gateway while its upstream calls run: its claims expire after
/// `processing_ttl`, the senders' retries complete through the survivor, and
/// no event is lost. The claims are packed (the default): they lapse with
/// their lease and are taken over.
#[tokio::test]
async fn a_killed_gateways_claims_expire_and_the_survivor_finishes() {
    a_killed_gateway_and_the_survivor("").await;
}

/// The same with hashed claims (`packed_claims = false`).
#[tokio::test]
async fn a_killed_gateways_hashed_claims_expire_and_the_survivor_finishes() {
    a_killed_gateway_and_the_survivor("packed_claims = false").await;
}

async fn a_killed_gateway_and_the_survivor(store_extra: &str) {
    let Some(cluster) = shared_cluster().await else {
        return;
    };
    let upstream = Upstream::with(|seen| Plan {
        delay: if seen.nth == 1 {
            Duration::from_millis(800)
        } else {
            Duration::ZERO
        },
        ..ok_plan(seen)
    })
    .await;
    let text = cluster_config(
        &upstream.url("/"),
        cluster,
        "processing_ttl = \"1s\"\nretention = \"1h\"",
        store_extra,
    );
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (path_a, port_a) = write_config(dir_a.path(), &text);
    let (path_b, port_b) = write_config(dir_b.path(), &text);
    let mut a = GatewayProcess::start(&path_a, port_a).await;
    let b = GatewayProcess::start(&path_b, port_b).await;
    let urls = vec![a.url("/hook"), b.url("/hook")];

    let stream = tokio::spawn({
        let urls = urls.clone();
        async move { deliver_paced(&urls, 40, "evt_sigkill").await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    a.stop("KILL");
    let settled = stream.await.unwrap();
    assert_eq!(
        settled.len(),
        40,
        "every event settled through the survivor"
    );
    let counts = upstream.counts();
    for i in 0..40 {
        assert!(
            counts.contains_key(&format!("evt_sigkill_{i}")),
            "evt_sigkill_{i} was lost"
        );
    }
    drop(b);
}

/// On a cluster, a route's key layout does not depend on `replay_guard`:
/// turning the guard on by SIGHUP leaves every record where it was, so a
/// duplicate of an event completed before the reload is still a replay.
#[tokio::test]
async fn toggling_the_replay_guard_on_a_cluster_keeps_records_found() {
    let Some(cluster) = shared_cluster().await else {
        return;
    };
    let upstream = Upstream::start().await;
    let text = cluster_config(&upstream.url("/"), cluster, "replay_guard = \"off\"", "");
    let gateway = TestGateway::start(&text).await;
    let sender = Sender::new();
    let url = gateway.url("/hook");
    assert_eq!(
        sender.deliver(&url, &event("evt_toggle")).await.status,
        StatusCode::OK
    );
    let guarded = text.replace("replay_guard = \"off\"", "replay_guard = \"body\"");
    assert!(gateway.reloader.apply(&parse_config(&guarded)).is_empty());
    let again = sender.deliver(&url, &event("evt_toggle")).await;
    assert!(again.replayed(), "{again:?}");
    assert_eq!(upstream.count("evt_toggle"), 1);
    gateway.shutdown().await;
}
