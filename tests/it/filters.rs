//! A route's filter: the events it takes are forwarded once each; the
//! others are answered, recorded and never forwarded, and their duplicates
//! are answered as duplicates — on a sync route and an async one.

use http::StatusCode;

use crate::support::*;

const FILTER: &str = r#"filter = { "json:/type" = ["invoice.*", "charge.succeeded"] }"#;
const TYPES: [&str; 3] = ["invoice.paid", "charge.succeeded", "customer.created"];

fn body(i: usize) -> String {
    format!(
        r#"{{"id":"evt_{i}","type":"{}","amount":4200}}"#,
        TYPES[i % 3]
    )
}

async fn a_filter_forwards_only_what_it_takes(
    backend: Backend,
    delivery: &str,
    accept: StatusCode,
) {
    let upstream = Upstream::start().await;
    let extra = format!("{delivery}\n{FILTER}");
    let text = config_text(&upstream.url("/hook"), &backend, &extra, "");
    let gateway = TestGateway::start(&with_admin(&text, true)).await;
    // 30 events, each delivered 3 times at once.
    let answers = deliver_concurrently(&[gateway.url("/hook")], 30, 3, body).await;
    let passing: Vec<String> = (0..30)
        .filter(|i| i % 3 != 2)
        .map(|i| format!("evt_{i}"))
        .collect();
    assert!(
        upstream
            .all_reached(&passing, std::time::Duration::from_secs(30))
            .await
    );
    for (i, answers) in &answers {
        let key = format!("evt_{i}");
        let first = answers.iter().filter(|a| !a.replayed()).count();
        assert_eq!(
            first, 1,
            "{key}: one first answer, the others replayed: {answers:?}"
        );
        if i % 3 == 2 {
            assert_eq!(
                upstream.count(&key),
                0,
                "{key} is filtered: never forwarded"
            );
            for answer in answers {
                assert_eq!(answer.status, accept, "{key}");
                assert_eq!(
                    answer.json(),
                    serde_json::json!({ "filtered": true }),
                    "{key}"
                );
            }
            let record = gateway
                .record("hook", &key)
                .await
                .expect("a filtered event is recorded");
            assert_eq!(record.state.as_str(), "completed");
        } else {
            assert_eq!(upstream.count(&key), 1, "{key} passes: forwarded once");
            assert!(
                answers.iter().all(|a| a.status == accept),
                "{key}: {answers:?}"
            );
        }
    }
    let metrics = scrape(&gateway.admin_url("/metrics")).await;
    let labels = [("route", "hook"), ("outcome", "filtered")];
    let filtered = sample(&metrics, "hookgate_requests_total", &labels);
    assert_eq!(filtered, Some(10.0));
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_route_filters_on_memory() {
    a_filter_forwards_only_what_it_takes(Backend::Memory, "", StatusCode::OK).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_route_filters_on_redis() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    a_filter_forwards_only_what_it_takes(Backend::Redis(redis.url()), "", StatusCode::OK).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_route_filters_on_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::Embedded(dir.path().join("h.db"));
    a_filter_forwards_only_what_it_takes(backend, "delivery = \"async\"", StatusCode::ACCEPTED)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_route_filters_on_postgres() {
    let database = TestDatabase::create().await;
    let backend = Backend::Postgres(database.url());
    a_filter_forwards_only_what_it_takes(backend, "delivery = \"async\"", StatusCode::ACCEPTED)
        .await;
}

/// A reload's new filter judges the events that arrive after it; an event
/// judged before keeps its answer (a duplicate of a filtered event is still
/// answered as one, never forwarded later).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reloaded_filter_applies_to_new_events() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let admin_port = free_port();
    let filter = |pattern: &str| format!(r#"filter = {{ "json:/type" = "{pattern}" }}"#);
    let text = |pattern: &str| {
        let text = config_text(
            &upstream.url("/hook"),
            &Backend::Memory,
            &filter(pattern),
            "",
        );
        with_admin_on(&text, admin_port)
    };
    let (path, port) = write_config(dir.path(), &text("invoice.*"));
    let gateway = GatewayProcess::start(&path, port).await;
    let sender = Sender::new();
    let deliver = |id: &str, kind: &str| {
        let body = format!(r#"{{"id":"{id}","type":"{kind}"}}"#);
        let (sender, url) = (sender.clone(), gateway.url("/hook"));
        async move { sender.deliver(&url, &body).await }
    };
    assert!(!deliver("evt_i1", "invoice.paid").await.replayed());
    let filtered = deliver("evt_c1", "customer.created").await;
    assert_eq!(filtered.json(), serde_json::json!({ "filtered": true }));

    std::fs::write(
        &path,
        std::fs::read_to_string(&path)
            .unwrap()
            .replace(&filter("invoice.*"), &filter("customer.*")),
    )
    .unwrap();
    let reloaded = request(
        http::Method::POST,
        &format!("http://127.0.0.1:{admin_port}/admin/reload"),
        Some(ADMIN_TOKEN),
    )
    .await;
    assert_eq!(reloaded.status, StatusCode::OK, "{:?}", reloaded.body);

    let again = deliver("evt_c1", "customer.created").await;
    assert!(again.replayed(), "judged before the reload: a duplicate");
    assert_eq!(again.json(), serde_json::json!({ "filtered": true }));
    assert!(!deliver("evt_c2", "customer.created").await.replayed());
    let now_filtered = deliver("evt_i2", "invoice.paid").await;
    assert_eq!(now_filtered.json(), serde_json::json!({ "filtered": true }));
    assert_eq!(
        (
            upstream.count("evt_i1"),
            upstream.count("evt_c1"),
            upstream.count("evt_c2"),
            upstream.count("evt_i2")
        ),
        (1, 0, 1, 0)
    );
}
