//! Asynchronous delivery (docs/guide/async-delivery.md, "Asynchronous delivery") through running gateways: the sender is
//! answered once its event is stored, workers deliver it with backoff, a
//! fleet delivers each event once, and a killed gateway loses nothing.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use http::{Method, StatusCode};

use crate::support::*;

/// Route lines for an async route with quick retries.
const ASYNC: &str = r#"delivery = "async"
processing_ttl = "2s"
retry_backoff = { initial = "50ms", max = "200ms" }"#;

/// Deliver each of `ids` `copies` times at once to each of `urls`, each
/// sender retrying a 503 as webhook senders do.
async fn storm(urls: &[String], ids: &[String], copies: usize) -> Vec<Answer> {
    let mut sends = Vec::new();
    for id in ids {
        for url in urls {
            for _ in 0..copies {
                let (url, body) = (url.clone(), event(id));
                sends.push(tokio::spawn(async move {
                    Sender::new().deliver_until_settled(&url, &body).await
                }));
            }
        }
    }
    let mut answers = Vec::new();
    for send in sends {
        answers.push(send.await.unwrap());
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sender_is_answered_before_a_slow_upstream_and_each_event_is_delivered_once() {
    let upstream = Upstream::with(|seen| Plan {
        delay: Duration::from_secs(3),
        ..ok_plan(seen)
    })
    .await;
    let text = config_text(
        &upstream.url("/hook"),
        &Backend::Memory,
        &format!("{ASYNC}\nmax_in_flight = 64"),
        "",
    );
    let gateway = TestGateway::start(&text).await;
    let ids: Vec<String> = (0..40).map(|i| format!("evt_async_{i}")).collect();

    let started = Instant::now();
    let answers = storm(&[gateway.url("/hook")], &ids, 3).await;
    let answered_in = started.elapsed();
    assert!(
        answered_in < Duration::from_secs(3),
        "120 answers took {answered_in:?}: they waited for the 3 s upstream"
    );
    for answer in &answers {
        assert_eq!(answer.status, StatusCode::ACCEPTED, "{:?}", answer.json());
        assert_eq!(answer.json()["accepted"], true);
    }
    let fresh = answers.iter().filter(|answer| !answer.replayed()).count();
    assert_eq!(
        fresh, 40,
        "one fresh acceptance per event, the rest replayed"
    );

    assert!(upstream.all_reached(&ids, Duration::from_secs(10)).await);
    assert!(
        eventually(Duration::from_secs(10), || async {
            let mut done = true;
            for id in &ids {
                let record = gateway.record("hook", id).await.unwrap();
                done &= record.state.as_str() == "completed";
            }
            done
        })
        .await
    );
    for id in &ids {
        assert_eq!(upstream.count(id), 1, "{id} delivered once");
    }
    let seen = upstream.seen();
    assert!(
        seen.iter().all(|s| s.key().starts_with("evt_async_")),
        "the event's own key"
    );
    // A duplicate of a completed event is still the accept answer.
    let again = Sender::new()
        .deliver(&gateway.url("/hook"), &event(&ids[0]))
        .await;
    assert_eq!(again.status, StatusCode::ACCEPTED);
    assert!(again.replayed());
    // Another body under the same key is not the same event.
    let other = format!(r#"{{"id":"{}","type":"order.refunded"}}"#, ids[1]);
    let mismatch = Sender::new().deliver(&gateway.url("/hook"), &other).await;
    assert_eq!(mismatch.code(), "payload_mismatch");
    gateway.shutdown().await;
}

/// A permanently failing upstream: the attempts come with backoff, the
/// event is dead after `max_attempts`; pointing the route at a working
/// upstream (reload) and a redrive delivers them all.
#[tokio::test]
async fn failing_attempts_back_off_until_dead_then_a_reload_and_a_redrive_deliver() {
    let broken = Upstream::with(|seen| Plan {
        status: StatusCode::SERVICE_UNAVAILABLE,
        ..ok_plan(seen)
    })
    .await;
    let working = Upstream::start().await;
    let route = format!("{ASYNC}\nmax_attempts = 4");
    let text = with_admin(
        &config_text(&broken.url("/hook"), &Backend::Memory, &route, ""),
        true,
    );
    let gateway = TestGateway::start(&text).await;
    let ids: Vec<String> = (0..5).map(|i| format!("evt_fail_{i}")).collect();
    accept_all(&gateway.url("/hook"), &ids).await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            let mut dead = true;
            for id in &ids {
                dead &= gateway.record("hook", id).await.unwrap().state.as_str() == "dead";
            }
            dead
        })
        .await,
        "dead after max_attempts"
    );
    // The waits follow the backoff: full jitter below 50 ms, 100 ms, 200 ms
    // (the cap), plus up to a worker poll (250 ms) to be noticed and slack
    // for a loaded machine.
    let seen = broken.seen();
    for id in &ids {
        let times: Vec<Instant> = seen
            .iter()
            .filter(|s| s.key() == *id)
            .map(|s| s.at)
            .collect();
        for (n, pair) in times.windows(2).enumerate() {
            let gap = pair[1] - pair[0];
            let ceiling = Duration::from_millis([50, 100, 200][n.min(2)]);
            assert!(
                gap <= ceiling + Duration::from_millis(1500),
                "{id}: wait {n} was {gap:?}, over its backoff ceiling {ceiling:?}"
            );
        }
    }
    for id in &ids {
        assert_eq!(broken.count(id), 4, "{id}: exactly max_attempts attempts");
        let record = gateway.record("hook", id).await.unwrap();
        assert_eq!(record.attempts, 4);
        assert_eq!(record.last_error.unwrap().status, Some(503));
    }
    let metrics = scrape(&gateway.admin_url("/metrics")).await;
    assert_eq!(
        sample(
            &metrics,
            "hookgate_delivery_attempts_total",
            &[("route", "hook"), ("result", "retrying")]
        ),
        Some(15.0)
    );
    assert_eq!(
        sample(
            &metrics,
            "hookgate_dead_letters_total",
            &[("route", "hook")]
        ),
        Some(5.0)
    );

    let ready = get(&gateway.admin_url("/readyz"), None).await.json();
    assert_eq!(ready["async"]["workers"], "running");
    assert_eq!(ready["async"]["routes"]["hook"]["queued"], 0);
    assert_eq!(
        sample(
            &metrics,
            "hookgate_queue_depth",
            &[("route", "hook"), ("state", "queued")]
        ),
        Some(0.0)
    );

    // Fix the route (as SIGHUP does), then redrive.
    let fixed = text.replace(&broken.url("/hook"), &working.url("/hook"));
    assert!(gateway.reloader.apply(&parse_config(&fixed)).is_empty());
    let redrive = request(
        Method::POST,
        &gateway.admin_url("/admin/routes/hook/dead-letters/redeliver?rate=100"),
        Some(ADMIN_TOKEN),
    )
    .await;
    assert_eq!(redrive.json()["completed"], 5, "{:?}", redrive.json());
    for id in &ids {
        assert_eq!(working.count(id), 1);
        assert_eq!(
            gateway.record("hook", id).await.unwrap().state.as_str(),
            "completed"
        );
    }
    gateway.shutdown().await;
}

/// Two gateways on one store, every event sent to both at once: each is
/// delivered once.
async fn a_fleet_delivers_each_event_once(backend: Backend) {
    let upstream = Upstream::with(|seen| Plan {
        delay: Duration::from_millis(50),
        ..ok_plan(seen)
    })
    .await;
    let text = config_text(&upstream.url("/hook"), &backend, ASYNC, "");
    // Both gateways share the key prefix, so they share the events.
    let first = TestGateway::start(&text).await;
    let second = TestGateway::start(&text).await;
    let ids: Vec<String> = (0..60).map(|i| format!("evt_fleet_{i}")).collect();
    let answers = storm(&[first.url("/hook"), second.url("/hook")], &ids, 2).await;
    for answer in &answers {
        assert_eq!(answer.status, StatusCode::ACCEPTED, "{:?}", answer.json());
    }
    assert!(upstream.all_reached(&ids, Duration::from_secs(20)).await);
    // Both gateways' workers look again: a second delivery would show.
    first.worker_passes(3).await;
    second.worker_passes(3).await;
    for id in &ids {
        assert_eq!(upstream.count(id), 1, "{id}");
    }
    first.shutdown().await;
    second.shutdown().await;
}

crate::on_backends!(a_fleet_delivers_each_event_once: [redis, cluster, postgres]);

/// The hybrid route: a fast upstream's answer is the sender's, a slow one's
/// sender gets 202 and the upstream exactly one call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn respond_within_answers_synchronously_when_it_can() {
    let slow = Arc::new(AtomicBool::new(false));
    let switch = Arc::clone(&slow);
    let upstream = Upstream::with(move |seen| Plan {
        delay: if switch.load(Ordering::SeqCst) {
            Duration::from_millis(2500)
        } else {
            Duration::ZERO
        },
        ..ok_plan(seen)
    })
    .await;
    let route = format!("{ASYNC}\nrespond_within = \"1s\"");
    let text = config_text(&upstream.url("/hook"), &Backend::Memory, &route, "");
    let gateway = TestGateway::start(&text).await;
    let url = gateway.url("/hook");

    let fast = Sender::new().deliver(&url, &event("evt_fast")).await;
    assert_eq!(fast.status, StatusCode::OK, "the upstream's own answer");
    assert_eq!(fast.json()["processed"], "evt_fast");
    assert_eq!(upstream.count("evt_fast"), 1);

    slow.store(true, Ordering::SeqCst);
    let accepted = Sender::new().deliver(&url, &event("evt_slow")).await;
    assert_eq!(accepted.status, StatusCode::ACCEPTED);
    assert!(
        eventually(Duration::from_secs(5), || async {
            gateway
                .record("hook", "evt_slow")
                .await
                .unwrap()
                .state
                .as_str()
                == "completed"
        })
        .await
    );
    gateway.worker_passes(3).await;
    assert_eq!(
        upstream.count("evt_slow"),
        1,
        "the running call was the only one"
    );
    gateway.shutdown().await;
}

/// Accepted while the upstream is down, then the gateway is SIGKILLed:
/// after a restart (and the upstream's return) every event is delivered
/// once.
async fn accepted_events_survive_a_sigkill(backend: Backend) {
    let upstream = Upstream::start().await;
    let down = format!("http://127.0.0.1:{}/hook", free_port());
    let dir = tempfile::tempdir().unwrap();
    let admin_port = free_port();
    let text = with_admin_on(&config_text(&down, &backend, ASYNC, ""), admin_port);
    let (path, port) = write_config(dir.path(), &text);
    let mut gateway = GatewayProcess::start(&path, port).await;
    let ids: Vec<String> = (0..20).map(|i| format!("evt_kill_{i}")).collect();
    accept_all(&gateway.url("/hook"), &ids).await;
    gateway.stop("KILL");

    let text = text.replace(&down, &upstream.url("/hook"));
    std::fs::write(
        &path,
        text.replace("127.0.0.1:0", &format!("127.0.0.1:{port}")),
    )
    .unwrap();
    let mut gateway = GatewayProcess::start(&path, port).await;
    assert!(
        upstream.all_reached(&ids, Duration::from_secs(15)).await,
        "{}",
        gateway.logs()
    );
    worker_passes_at(&format!("http://127.0.0.1:{admin_port}/metrics"), 3).await;
    let seen: HashSet<String> = upstream.seen().iter().map(|s| s.key()).collect();
    assert_eq!(seen.len(), 20);
    for id in &ids {
        assert_eq!(upstream.count(id), 1, "{id}");
    }
    gateway.stop("TERM");
}

crate::on_backends!(accepted_events_survive_a_sigkill: [embedded, redis]);

/// The model's counterexample, against the real binary: an event whose
/// every attempt dies with its gateway (a poison event) is leased again
/// after each lapse — and parked once its leases pass `max_attempts`,
/// instead of being called forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_event_that_kills_its_gateway_is_parked_after_max_attempts() {
    // The upstream never answers in time: the gateway is killed mid-call.
    let upstream = Upstream::with(|seen| Plan {
        delay: Duration::from_secs(30),
        ..ok_plan(seen)
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::Embedded(dir.path().join("poison.db"));
    let route = format!("{ASYNC}\nmax_attempts = 2");
    let admin_port = free_port();
    let text = with_admin_on(
        &config_text(&upstream.url("/hook"), &backend, &route, ""),
        admin_port,
    );
    let (path, port) = write_config(dir.path(), &text);
    let mut gateway = GatewayProcess::start(&path, port).await;
    let answer = Sender::new()
        .deliver(&gateway.url("/hook"), &event("evt_poison"))
        .await;
    assert_eq!(answer.status, StatusCode::ACCEPTED);
    for attempt in 1..=2 {
        assert!(
            eventually(Duration::from_secs(15), || ready(
                upstream.count("evt_poison") == attempt
            ))
            .await,
            "attempt {attempt} reached the upstream: {}",
            gateway.logs()
        );
        gateway.stop("KILL");
        gateway = GatewayProcess::start(&path, port).await;
    }
    // The third lease is past max_attempts: parked, not called.
    let record_url = format!("http://127.0.0.1:{admin_port}/admin/routes/hook/keys/evt_poison");
    assert!(
        eventually(Duration::from_secs(15), || async {
            get(&record_url, Some(ADMIN_TOKEN)).await.json()["state"] == "dead"
        })
        .await,
        "{}",
        gateway.logs()
    );
    worker_passes_at(&format!("http://127.0.0.1:{admin_port}/metrics"), 3).await;
    assert_eq!(upstream.count("evt_poison"), 2, "never called a third time");
    gateway.stop("TERM");
}

/// SIGTERM: the workers stop leasing, the deliveries already running finish
/// within `shutdown_grace` and are recorded; the events not yet leased stay
/// queued for the next start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_running_deliveries_and_leaves_the_rest_queued() {
    let upstream = Upstream::with(|seen| Plan {
        delay: Duration::from_millis(800),
        ..ok_plan(seen)
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::Embedded(dir.path().join("term.db"));
    let route = format!("{ASYNC}\nmax_in_flight = 2");
    let admin_port = free_port();
    let text = with_admin_on(
        &config_text(&upstream.url("/hook"), &backend, &route, ""),
        admin_port,
    );
    let (path, port) = write_config(dir.path(), &text);
    let mut gateway = GatewayProcess::start(&path, port).await;
    let ids: Vec<String> = (0..6).map(|i| format!("evt_term_{i}")).collect();
    accept_all(&gateway.url("/hook"), &ids).await;
    assert!(eventually(Duration::from_secs(5), || ready(upstream.total() == 2)).await);
    let status = gateway.stop("TERM");
    assert!(status.success(), "clean exit: {}", gateway.logs());
    assert_eq!(upstream.total(), 2, "nothing new leased after SIGTERM");

    // The next start delivers the rest, and nothing twice.
    let gateway = GatewayProcess::start(&path, port).await;
    assert!(upstream.all_reached(&ids, Duration::from_secs(15)).await);
    worker_passes_at(&format!("http://127.0.0.1:{admin_port}/metrics"), 3).await;
    for id in &ids {
        assert_eq!(upstream.count(id), 1, "{id}");
    }
    drop(gateway);
}

/// Each async route's `page_after` is on `/metrics` for the paging alert
/// to compare with (deploy/prometheus/alerts.yml,
/// `HookgateAsyncEventOverdue`); 15 minutes unless the route says.
#[tokio::test]
async fn page_after_is_exported_per_route() {
    let upstream = Upstream::start().await;
    for (extra, seconds) in [("page_after = \"2m\"", 120.0), ("", 900.0)] {
        let route = format!("{ASYNC}\n{extra}");
        let text = config_text(&upstream.url("/hook"), &Backend::Memory, &route, "");
        let gateway = TestGateway::start(&with_admin(&text, true)).await;
        let metrics = scrape(&gateway.admin_url("/metrics")).await;
        let labels = [("route", "hook"), ("destination", "")];
        assert_eq!(
            sample(&metrics, "hookgate_route_page_after_seconds", &labels),
            Some(seconds),
            "{extra}: {metrics}"
        );
        gateway.shutdown().await;
    }
    // Longer than max_age, it would page after the event is parked.
    let route = format!("{ASYNC}\npage_after = \"4d\"");
    let text = config_text(&upstream.url("/hook"), &Backend::Memory, &route, "");
    let refused = hookgate::config::Config::parse(&text, std::path::Path::new("t.toml"), &|name| {
        (name == "TEST_SECRET").then(|| SECRET.to_owned())
    });
    let Err(problems) = refused else {
        panic!("page_after past max_age was taken");
    };
    let problems = problems.to_string();
    assert!(problems.contains("routes[0].page_after"), "{problems}");
}
