//! Finding the events an incident touched: `GET /admin/events` and
//! `hookgate events list` filtered by time of last change (`since`,
//! `until`), last upstream status, last error class and the stored
//! request's content (`q`), on every backend, paged with a cursor, each
//! match once.

use std::collections::BTreeSet;
use std::time::Duration;

use http::{Method, StatusCode};

use crate::support::*;

/// Ids of every page of `GET /admin/events?{query}`, `limit` a page.
async fn walk(gateway: &TestGateway, query: &str, limit: usize) -> Vec<String> {
    let mut ids = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/admin/events?{query}&limit={limit}");
        if let Some(cursor) = &cursor {
            path += &format!("&cursor={cursor}");
        }
        let page = get(&gateway.admin_url(&path), Some(ADMIN_TOKEN)).await;
        assert_eq!(page.status, StatusCode::OK, "{path}: {:?}", page.body);
        let page = page.json();
        for event in page["events"].as_array().unwrap() {
            ids.push(event["key"].as_str().unwrap().to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return ids,
        }
    }
}

/// Keys of `hookgate events list ARGS --all --json`.
fn cli_list(gateway: &TestGateway, args: &[&str]) -> Vec<String> {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .args([
            "events",
            "list",
            "--all",
            "--json",
            "--admin",
            &gateway.admin_url(""),
        ])
        .args(args)
        .env("HOOKGATE_ADMIN_TOKEN", ADMIN_TOKEN)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let listed: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    (listed.as_array().unwrap().iter())
        .map(|event| event["key"].as_str().unwrap().to_owned())
        .collect()
}

fn set(ids: &[String]) -> BTreeSet<String> {
    let unique: BTreeSet<String> = ids.iter().cloned().collect();
    assert_eq!(unique.len(), ids.len(), "each match once: {ids:?}");
    unique
}

fn named(prefix: &str, statuses: &[&str]) -> BTreeSet<String> {
    (statuses.iter())
        .flat_map(|status| (0..4).map(move |i| format!("evt_{prefix}_{status}_{i}")))
        .collect()
}

/// Two batches of events, 300 ms apart, each with 4 answered 200, 4
/// refused 503 and 4 refused 500 (one attempt each: the refused are dead).
async fn filters_find_what_an_incident_touched(backend: Backend) {
    let upstream = Upstream::with(|seen| {
        let key = seen.key();
        let status = if key.contains("_503_") {
            StatusCode::SERVICE_UNAVAILABLE
        } else if key.contains("_500_") {
            StatusCode::INTERNAL_SERVER_ERROR
        } else {
            StatusCode::OK
        };
        Plan {
            status,
            ..ok_plan(seen)
        }
    })
    .await;
    let text = config_text(&upstream.url("/hook"), &backend, "max_attempts = 1", "");
    let gateway = TestGateway::start(&with_admin(&text, true)).await;
    let url = gateway.url("/hook");
    let sender = Sender::new();
    let clock = hookgate::clock::unix_ms;
    let mut between = 0;
    for batch in ["a", "b"] {
        for status in ["ok", "503", "500"] {
            for i in 0..4 {
                let id = format!("evt_{batch}_{status}_{i}");
                let customer = format!("cus_{}", i % 2);
                let body = format!(
                    r#"{{"id":"{id}","type":"charge.failed","data":{{"object":{{"customer":"{customer}","n":{i}}}}}}}"#
                );
                sender.deliver_to_upstream(&url, &body).await;
            }
        }
        if batch == "a" {
            tokio::time::sleep(Duration::from_millis(150)).await;
            between = clock();
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    }
    // A walk's window is fixed: as an absolute time (a duration ago would
    // move with each page).
    let at = hookgate::clock::rfc3339(between);

    let dead_503 = walk(&gateway, "state=dead&status=503", 3).await;
    assert_eq!(
        set(&dead_503),
        &named("a", &["503"]) | &named("b", &["503"])
    );
    let refused = walk(&gateway, "error=refused", 5).await;
    assert_eq!(
        set(&refused),
        &named("a", &["503", "500"]) | &named("b", &["503", "500"])
    );
    // The window: after the first batch, and up to it.
    let later = walk(&gateway, &format!("since={at}"), 4).await;
    assert_eq!(set(&later), named("b", &["ok", "503", "500"]));
    let earlier = walk(&gateway, &format!("until={at}&status=500"), 2).await;
    assert_eq!(set(&earlier), named("a", &["500"]));
    // Content: the stored request (failed and dead events keep it; the
    // completed keep none). Every `q` must hold.
    let odd = |prefix| {
        (["503", "500"].iter())
            .flat_map(move |status| [1, 3].map(|i| format!("evt_{prefix}_{status}_{i}")))
            .collect::<BTreeSet<String>>()
    };
    let customer = walk(&gateway, "q=json:/data/object/customer%3Dcus_1", 3).await;
    assert_eq!(set(&customer), &odd("a") | &odd("b"));
    let both = walk(
        &gateway,
        "q=json:/data/object/customer%3Dcus_1&q=json:/data/object/n%3D3&status=500",
        50,
    )
    .await;
    assert_eq!(
        set(&both),
        ["evt_a_500_3", "evt_b_500_3"].map(String::from).into()
    );
    let header = walk(&gateway, "q=header:Content-Type%3Dapplication/json", 50).await;
    assert_eq!(
        set(&header),
        &named("a", &["503", "500"]) | &named("b", &["503", "500"])
    );
    // Filters beside the route and a state that has none of them.
    let none = walk(&gateway, "route=hook&state=completed&status=503", 10).await;
    assert!(none.is_empty(), "{none:?}");

    // The CLI: the same filter, every page as one array.
    let since = format!("{}ms", clock() - between);
    let args = ["--status", "503", "--since", &since, "--limit", "3"];
    assert_eq!(set(&cli_list(&gateway, &args)), named("b", &["503"]));
    let args = [
        "--q",
        "json:/data/object/customer=cus_0",
        "--q",
        "json:/data/object/n=2",
    ];
    let expected =
        ["a", "b"].map(|batch| ["503", "500"].map(|status| format!("evt_{batch}_{status}_2")));
    assert_eq!(
        set(&cli_list(&gateway, &args)),
        expected.concat().into_iter().collect()
    );

    for bad in [
        "status=abc",
        "status=42",
        "error=nope",
        "since=yesterday",
        "until=2026-12-02",
        "q=json:/data",
        "q=nowhere%3D1",
    ] {
        let answer = get(
            &gateway.admin_url(&format!("/admin/events?{bad}")),
            Some(ADMIN_TOKEN),
        )
        .await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{bad}");
        assert_eq!(answer.code(), "bad_request", "{bad}");
    }
    let rfc3339 = request(
        Method::GET,
        &gateway.admin_url("/admin/events?since=2020-01-01T00:00:00.000Z&status=503"),
        Some(ADMIN_TOKEN),
    )
    .await;
    assert_eq!(rfc3339.json()["events"].as_array().unwrap().len(), 8);
    gateway.shutdown().await;
}

crate::on_backends!(filters_find_what_an_incident_touched);
