//! Ordered delivery through a gateway's deaths (docs/guide/ordering.md, "Ordered
//! delivery"), the real binary on the embedded store: an event in flight
//! at a SIGKILL is delivered again once its lease lapses (the crash
//! window), its entity's next event still waits for it, and nothing waits
//! longer than a lease.

use std::time::Duration;

use http::StatusCode;

use crate::ordering::{embedded, entity_event, ordered_route};
use crate::support::*;

/// A gateway SIGKILLed twice while its entity's first event is in flight.
/// The second event of the entity is accepted while the first is in flight
/// and no pass meets it (`max_in_flight = 1`, full), so after the first
/// restart the first event — its lease lapsed — is due after it: the pass
/// that leases the first event again for the second one's row walks on
/// (`max_in_flight = 2` now) and meets the first event itself. It must not
/// park what it just leased: parked, the first event would wait a day
/// after the second kill, and its entity behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entity_goes_on_after_its_first_event_outlives_two_gateways() {
    // The first event's first two calls hang: each gateway dies during one.
    let upstream = Upstream::with(|seen| Plan {
        delay: match (seen.key().as_str(), seen.nth) {
            ("evt_first", 1 | 2) => Duration::from_secs(30),
            _ => Duration::ZERO,
        },
        ..ok_plan(seen)
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    // One text (its key prefix is drawn once), with the room each life has.
    let text = ordered_route(&upstream, &embedded(&dir), "processing_ttl = \"1s\"");
    let route =
        |room: usize| text.replace("max_in_flight = 32", &format!("max_in_flight = {room}"));
    let (path, port) = write_config(dir.path(), &route(1));
    let mut gateway = GatewayProcess::start(&path, port).await;
    let url = gateway.url("/hook");
    let send = |id: &str| {
        let (url, body) = (url.clone(), entity_event(id, "sub", 1));
        async move { Sender::new().deliver(&url, &body).await.status }
    };
    assert_eq!(send("evt_first").await, StatusCode::ACCEPTED);
    for call in 1..=2 {
        let calling = || async { upstream.count("evt_first") == call };
        assert!(
            eventually(Duration::from_secs(15), calling).await,
            "call {call} of the first event: {}",
            gateway.logs()
        );
        if call == 1 {
            assert_eq!(send("evt_second").await, StatusCode::ACCEPTED);
        }
        gateway.stop("KILL");
        // Its lease (1 s, renewed while the call ran) lapses before the next
        // gateway's first pass: sooner, that pass would find the first event
        // still held and only park the second (the test would pass, weaker).
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        let text = route(2).replace("127.0.0.1:0", &format!("127.0.0.1:{port}"));
        std::fs::write(&path, text).unwrap();
        gateway = GatewayProcess::start(&path, port).await;
    }
    let both = ["evt_first".to_owned(), "evt_second".to_owned()];
    assert!(
        upstream.all_reached(&both, Duration::from_secs(15)).await,
        "the entity goes on: {:?}\n{}",
        upstream.counts(),
        gateway.logs()
    );
    assert_eq!(upstream.count("evt_first"), 3);
    assert_eq!(upstream.count("evt_second"), 1, "after the first, once");
    gateway.stop("TERM");
}
