//! `order_by` and what goes with it: an async route's, each destination's
//! by default, and every mistake a located error.

use std::time::Duration;

use super::*;
use crate::key::KeySource;
use crate::order::OnBlocked;

/// The route `stripe` on `backend`, with `extra` settings.
fn route(backend: &str, extra: &str) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:8080"
[store]
backend = "{backend}"
[[routes]]
name = "stripe"
path = "/webhooks/stripe"
upstream = "http://billing:3000/"
key = ["json:/id"]
{extra}
[routes.verify]
scheme = "hmac"
secrets = ["${{SECRET}}"]
header = "X-Signature"
"#
    )
}

const ORDERED: &str = r#"delivery = "async"
order_by = "json:/data/object/id"
stale_by = "json:/created"
reorder_window = "2s"
on_blocked = "skip""#;

#[test]
fn an_async_route_orders_by_its_entity() {
    let config = parse(&route("memory", ORDERED)).unwrap();
    let order = config.live.routes[0].order().expect("ordered");
    assert_eq!(order.by, KeySource::parse("json:/data/object/id").unwrap());
    assert_eq!(
        order.stale_by,
        Some(KeySource::parse("json:/created").unwrap())
    );
    assert_eq!(order.reorder_window, Duration::from_secs(2));
    assert_eq!(order.on_blocked, OnBlocked::Skip);

    let plain = parse(&route(
        "memory",
        "delivery = \"async\"\norder_by = \"json:/x\"",
    ))
    .unwrap();
    let order = plain.live.routes[0].order().expect("ordered");
    assert_eq!(
        (
            order.stale_by.as_ref(),
            order.reorder_window,
            order.on_blocked
        ),
        (None, Duration::ZERO, OnBlocked::Wait),
        "the defaults"
    );
    let unordered = parse(&route("memory", "delivery = \"async\"")).unwrap();
    assert!(unordered.live.routes[0].order().is_none());
    // `check` says so.
    let summary = config.summary();
    assert!(
        summary.contains(
            "ordered by json:/data/object/id, stale by json:/created, reorder window 2s, dead events skipped"
        ),
        "{summary}"
    );
}

#[test]
fn ordering_mistakes_are_located() {
    let found = problems(&route("memory", "order_by = \"json:/x\"")).join("\n");
    assert!(
        found.contains("routes[0].order_by: only for delivery = \"async\""),
        "{found}"
    );
    let found = problems(&route(
        "memory",
        "delivery = \"async\"\nstale_by = \"json:/t\"",
    ))
    .join("\n");
    assert!(
        found.contains("routes[0].stale_by: only with order_by"),
        "{found}"
    );
    let found = problems(&route(
        "memory",
        "delivery = \"async\"\norder_by = \"jsn:/x\"",
    ))
    .join("\n");
    assert!(found.contains("routes[0].order_by:"), "{found}");
    let found = problems(&route(
        "memory",
        "delivery = \"async\"\norder_by = \"body-sha256\"",
    ))
    .join("\n");
    assert!(
        found.contains("body-sha256 is different for every event"),
        "{found}"
    );
    let blocked = ORDERED.replace("\"skip\"", "\"drop\"");
    let found = problems(&route("memory", &blocked)).join("\n");
    assert!(found.contains("routes[0].on_blocked"), "{found}");
    let hybrid = format!("{ORDERED}\nrespond_within = \"1s\"");
    let found = problems(&route("memory", &hybrid)).join("\n");
    assert!(
        found.contains("routes[0].respond_within: not with order_by"),
        "{found}"
    );
}

#[test]
fn a_cluster_store_orders_only_in_one_shard_per_scope() {
    let cluster = |shards: u16| {
        route(
            &format!(
                "redis-cluster\"\nnodes = [\"redis://127.0.0.1:7000\"]\nshards = {shards}\nx = \""
            ),
            ORDERED,
        )
        .replace("x = \"\"\n", "")
    };
    let found = problems(&cluster(16)).join("\n");
    assert!(
        found.contains("routes[0].order_by: a cluster store keeps an entity's events in one hash slot only when each scope is one shard"),
        "{found}"
    );
    assert!(parse(&cluster(1)).is_ok(), "{:?}", problems(&cluster(1)));
    let redis = route("redis\"\nurl = \"redis://127.0.0.1:6379", ORDERED);
    assert!(parse(&redis).is_ok(), "{:?}", problems(&redis));
}
