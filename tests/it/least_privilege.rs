//! Redis with least privilege: the ACL user docs/operations/stores.md documents —
//! read from that file, so the documentation and the test cannot drift —
//! created on a real `redis-server` and on every node of a real cluster,
//! and every kind of work a gateway does run through it. An ACL that lets
//! `PING` through but not the deliveries shows in `/readyz`'s body.

use std::time::Duration;

use http::{Method, StatusCode};

use crate::support::*;

const PASSWORD: &str = "acl-test-password";

/// The `ACL SETUSER hookgate …` line of docs/operations/stores.md, its arguments
/// after `ACL SETUSER`, the password filled in.
fn documented_acl() -> Vec<String> {
    documented("ACL SETUSER hookgate ")
}

/// The line of docs/operations/stores.md that starts with `start`, its arguments
/// after `ACL SETUSER`, the password filled in.
fn documented(start: &str) -> Vec<String> {
    let docs = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/operations/stores.md"
    ))
    .unwrap();
    let line = docs
        .lines()
        .find(|line| line.starts_with(start))
        .unwrap_or_else(|| panic!("docs/operations/stores.md documents {start:?}"));
    line.split_whitespace()
        .skip(2)
        .map(|word| word.replace(">CHANGE-ME", &format!(">{PASSWORD}")))
        .collect()
}

/// Run `ACL SETUSER` with `rules` on the Redis at `port`.
async fn set_user(port: u16, rules: &[String]) {
    let client = ::redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let mut command = ::redis::cmd("ACL");
    command.arg("SETUSER").arg(rules);
    let _: () = command.query_async(&mut connection).await.unwrap();
}

/// A config with a sync route `/hook` and an async route `/queue` on
/// `store` (a `[store]` body), key prefix `hookgate:` as the ACL expects.
fn config(upstream: &Upstream, store: &str) -> String {
    let text = config_text(&upstream.url("/hook"), &Backend::Memory, "", "")
        .replace("backend = \"memory\"", store);
    let text = with_prefix(&text);
    let queue = format!(
        "[[routes]]\nname = \"queue\"\npath = \"/queue\"\nupstream = \"{}\"\nkey = [\"json:/id\"]\n\
         delivery = \"async\"\nprocessing_ttl = \"2s\"\nretry_backoff = {{ initial = \"50ms\", max = \"100ms\" }}\n\
         [routes.verify]\nscheme = \"hmac\"\nsecrets = [\"${{TEST_SECRET}}\"]\nheader = \"X-Signature\"\nprefix = \"sha256=\"\n",
        upstream.url("/queue")
    );
    with_admin(&format!("{text}\n{queue}"), true)
}

/// `key_prefix = "hookgate:"` in place of the test's random one.
fn with_prefix(text: &str) -> String {
    let start = text.find("key_prefix = \"").expect("a key prefix") + "key_prefix = \"".len();
    let end = start + text[start..].find('"').unwrap();
    format!("{}hookgate:{}", &text[..start], &text[end..])
}

/// Everything a gateway does, through `gateway`: sync deliveries and a
/// replay, a failure kept with its request, listings, an async event
/// accepted and delivered, pause and resume, `/readyz`.
async fn exercise(gateway: &TestGateway, upstream: &Upstream, failing: &str) {
    let ready = get(&gateway.admin_url("/readyz"), None).await;
    assert_eq!(ready.status, StatusCode::OK, "{:?}", ready.json());
    assert_eq!(ready.json()["store"], "ok", "{:?}", ready.json());
    let sender = Sender::new();
    let first = sender
        .deliver(&gateway.url("/hook"), &event("evt_lp_1"))
        .await;
    assert_eq!(first.status, StatusCode::OK, "{:?}", first.json());
    let again = sender
        .deliver(&gateway.url("/hook"), &event("evt_lp_1"))
        .await;
    assert!(again.replayed());
    assert_eq!(upstream.count("evt_lp_1"), 1);

    let failed = sender.deliver(&gateway.url("/hook"), &event(failing)).await;
    assert_eq!(failed.status, StatusCode::SERVICE_UNAVAILABLE);
    let shown = get(
        &gateway.admin_url(&format!("/admin/routes/hook/keys/{failing}")),
        Some(ADMIN_TOKEN),
    )
    .await;
    assert_eq!(shown.json()["state"], "failed", "{:?}", shown.json());
    let listed = get(
        &gateway.admin_url("/admin/events?route=hook&state=failed"),
        Some(ADMIN_TOKEN),
    )
    .await;
    assert_eq!(
        listed.json()["events"][0]["key"],
        failing,
        "{:?}",
        listed.json()
    );

    let accepted = sender
        .deliver(&gateway.url("/queue"), &event("evt_lp_q"))
        .await;
    assert_eq!(
        accepted.status,
        StatusCode::ACCEPTED,
        "{:?}",
        accepted.json()
    );
    assert!(
        upstream
            .all_reached(&["evt_lp_q".to_owned()], Duration::from_secs(10))
            .await
    );

    let paused = gateway.control("hook", "pause", "by=acl-test").await;
    assert_eq!(paused.status, StatusCode::OK, "{:?}", paused.json());
    let refused = sender
        .deliver(&gateway.url("/hook"), &event("evt_lp_2"))
        .await;
    assert_eq!(refused.code(), "route_paused");
    let resumed = gateway.control("hook", "resume", "by=acl-test").await;
    assert_eq!(resumed.status, StatusCode::OK);
    let forgotten = request(
        Method::DELETE,
        &gateway.admin_url("/admin/routes/hook/keys/evt_lp_1"),
        Some(ADMIN_TOKEN),
    )
    .await;
    assert_eq!(forgotten.status, StatusCode::OK, "{:?}", forgotten.json());
    let metrics = scrape(&gateway.admin_url("/metrics")).await;
    assert!(
        !metrics.contains("hookgate_store_errors_total{"),
        "no store operation was refused:\n{}",
        metrics
            .lines()
            .filter(|line| line.starts_with("hookgate_store_errors_total"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// An upstream that fails `evt_lp_fail*` and answers everything else.
async fn upstream() -> Upstream {
    Upstream::with(|seen| Plan {
        status: if seen.key().starts_with("evt_lp_fail") {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::OK
        },
        ..ok_plan(seen)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_acl_runs_every_delivery_on_redis() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    set_user(redis.port, &documented_acl()).await;
    let upstream = upstream().await;
    let url = format!("redis://hookgate:{PASSWORD}@127.0.0.1:{}/0", redis.port);
    let store = format!("backend = \"redis\"\nurl = \"{url}\"");
    let gateway = TestGateway::start(&config(&upstream, &store)).await;
    assert!(
        gateway.replay_cache_live().await,
        "the ACL lets the replay cache subscribe"
    );
    exercise(&gateway, &upstream, "evt_lp_fail").await;
    gateway.shutdown().await;

    // The ACL documented before, without TIME: PING passes, deliveries
    // cannot run a script. Readiness's body says so instead of "ok".
    let mut rules: Vec<String> = documented_acl()
        .into_iter()
        .filter(|rule| rule != "+time")
        .collect();
    rules.insert(1, "reset".to_owned());
    set_user(redis.port, &rules).await;
    let gateway = TestGateway::start(&config(&upstream, &store)).await;
    let ready = get(&gateway.admin_url("/readyz"), None).await;
    assert_eq!(
        ready.status,
        StatusCode::OK,
        "a shared store's trouble is not this instance's"
    );
    let why = ready.json()["store"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(why.contains("can't run this command"), "{why}");
    let refused = Sender::new()
        .deliver(&gateway.url("/hook"), &event("evt_lp_noperm"))
        .await;
    assert_eq!(refused.code(), "store_unavailable");
    assert_eq!(upstream.count("evt_lp_noperm"), 0);
    gateway.shutdown().await;
}

/// The same with the hashed claim (`packed_claims = false`; the default
/// packed claim's plain `SET … NX GET PX` and `TIME`, and the scripts
/// opening packed records, are what the test above runs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_acl_runs_hashed_claims_on_redis() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    set_user(redis.port, &documented_acl()).await;
    let upstream = upstream().await;
    let url = format!("redis://hookgate:{PASSWORD}@127.0.0.1:{}/0", redis.port);
    let store = format!("backend = \"redis\"\nurl = \"{url}\"\npacked_claims = false");
    let gateway = TestGateway::start(&config(&upstream, &store)).await;
    exercise(&gateway, &upstream, "evt_lp_fail").await;
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_acl_runs_every_delivery_on_a_redis_cluster() {
    let Some(cluster) = shared_cluster().await else {
        return;
    };
    for port in &cluster.ports {
        set_user(*port, &documented_acl()).await;
    }
    let upstream = upstream().await;
    let nodes: Vec<String> = cluster
        .ports
        .iter()
        .map(|port| format!("\"redis://hookgate:{PASSWORD}@127.0.0.1:{port}\""))
        .collect();
    let store = format!(
        "backend = \"redis-cluster\"\nnodes = [{}]",
        nodes.join(", ")
    );
    let gateway = TestGateway::start(&config(&upstream, &store)).await;
    // The shared cluster outlives the test: a failing key of this run only.
    let failing = format!("evt_lp_fail_{}", rand::random::<u32>());
    exercise(&gateway, &upstream, &failing).await;
    gateway.shutdown().await;
}

/// The `ACL SETUSER hookgate-sentinel …` line of docs/operations/stores.md: the
/// sentinels' user.
fn documented_sentinel_acl() -> Vec<String> {
    documented("ACL SETUSER hookgate-sentinel ")
}

/// `redis-sentinel`: the documented user on every data server, and the
/// sentinels' documented user on every sentinel; the gateway finds the
/// primary as the one and writes there as the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_acls_run_every_delivery_through_sentinels() {
    let Some(set) = RedisSentinels::start().await else {
        return;
    };
    for port in &set.servers {
        set_user(*port, &documented_acl()).await;
    }
    for port in &set.sentinels {
        set_user(*port, &documented_sentinel_acl()).await;
    }
    let upstream = upstream().await;
    let sentinels: Vec<String> = (set.sentinels.iter())
        .map(|port| format!("\"redis://hookgate-sentinel:{PASSWORD}@127.0.0.1:{port}\""))
        .collect();
    let store = format!(
        "backend = \"redis-sentinel\"\nsentinels = [{}]\nmaster = \"{MASTER}\"\n\
         url = \"redis://hookgate:{PASSWORD}@primary/0\"",
        sentinels.join(", ")
    );
    let gateway = TestGateway::start(&config(&upstream, &store)).await;
    assert!(
        gateway.replay_cache_live().await,
        "the ACL lets the replay cache subscribe on the primary"
    );
    exercise(&gateway, &upstream, "evt_lp_fail").await;
    gateway.shutdown().await;

    // Without the sentinels' user the primary is never found: 503, nothing
    // forwarded.
    let anonymous = store.replace(&format!("hookgate-sentinel:{PASSWORD}@"), "nobody:wrong@");
    let gateway = TestGateway::start(&config(&upstream, &anonymous)).await;
    let refused = Sender::new()
        .deliver(&gateway.url("/hook"), &event("evt_lp_nosentinel"))
        .await;
    assert_eq!(refused.code(), "store_unavailable");
    assert_eq!(upstream.count("evt_lp_nosentinel"), 0);
    gateway.shutdown().await;
}
