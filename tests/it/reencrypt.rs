//! Rotating `[store.encryption]` keys (docs/operations/deploying.md, "Rotating
//! [store.encryption] keys"), as an operator does it, on every backend:
//! records kept in clear from before encryption and records sealed under
//! the old key, the new key put first and reloaded, `hookgate store
//! reencrypt` run by the real binary while the gateway serves — then the
//! store's bytes name only the new key, the old key is dropped, and every
//! record still opens whole. Run again, it rewrites nothing.

use std::path::Path;
use std::process::Output;

use http::StatusCode;

use crate::at_rest::{
    config, event_of, holds, kept_bytes, upstream, with_keys, without_keys, ANSWER, CUSTOMER,
    KEY_A, KEY_B,
};
use crate::support::*;

/// The id a marker shows for `key` (`hookgate check` prints the same).
fn id_of(key: &str) -> String {
    let keys = hookgate::store::Keys::parse(&[key.to_owned()]).unwrap();
    format!("key={}", keys.ids()[0])
}

fn hookgate(args: &[&str], config: &Path) -> Output {
    hookgate_command()
        .args(args)
        .arg("--config")
        .arg(config)
        .env("TEST_SECRET", SECRET)
        .output()
        .unwrap()
}

async fn rotated_and_resealed(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (key_a, key_b) = (dir.path().join("a.key"), dir.path().join("b.key"));
    std::fs::write(&key_a, KEY_A).unwrap();
    std::fs::write(&key_b, KEY_B).unwrap();
    let upstream = upstream().await;
    let sealed_a = config(&upstream, &backend, &[&key_a]);
    let reload = |gateway: &TestGateway, text: &str| {
        assert!(gateway.reloader.apply(&parse_config(text)).is_empty());
    };

    // Kept in clear before encryption was on, then sealed under key A: a
    // completed event and a dead one (its request and the upstream's
    // excerpt kept) of each.
    let gateway = TestGateway::start(&without_keys(&sealed_a)).await;
    let (sender, url) = (Sender::new(), gateway.url("/hook"));
    let deliver = |id: &'static str| {
        let (sender, url) = (&sender, &url);
        async move { sender.deliver(url, &event_of(id)).await.status }
    };
    assert_eq!(deliver("evt_clear").await, StatusCode::OK);
    assert_eq!(
        deliver("evt_clear_fail").await,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert!(
        holds(&kept_bytes(&backend).await, CUSTOMER),
        "in clear so far"
    );
    reload(&gateway, &sealed_a);
    assert_eq!(deliver("evt_a").await, StatusCode::OK);
    assert_eq!(deliver("evt_a_fail").await, StatusCode::SERVICE_UNAVAILABLE);

    // The new key first, the fleet reloaded: new records are sealed under
    // it, old ones still open under A.
    let rotated = with_keys(&sealed_a, &[&key_b, &key_a]);
    reload(&gateway, &rotated);
    assert_eq!(deliver("evt_b").await, StatusCode::OK);
    let file = dir.path().join("gateway.toml");
    std::fs::write(&file, &rotated).unwrap();

    // Re-encrypted while the gateway serves (an embedded file included).
    let run = hookgate(&["store", "reencrypt", "--rate", "1000/s"], &file);
    assert!(run.status.success(), "{}", said(&run));
    let out = said(&run);
    assert!(out.contains("resealed 4"), "{out}");
    assert!(out.contains("done: every record is sealed"), "{out}");
    let kept = kept_bytes(&backend).await;
    assert!(!holds(&kept, &id_of(KEY_A)), "nothing is left under key A");
    assert!(holds(&kept, &id_of(KEY_B)));
    for secret in [CUSTOMER, ANSWER] {
        assert!(!holds(&kept, secret), "{secret} is kept in clear");
    }

    // Key A dropped: every record opens whole, and nothing was forwarded
    // again.
    reload(&gateway, &with_keys(&sealed_a, &[&key_b]));
    for id in ["evt_clear", "evt_a", "evt_b"] {
        let record = gateway.record("hook", id).await.unwrap();
        let answer = record.response.expect("recorded");
        assert!(
            String::from_utf8_lossy(&answer.body).contains(ANSWER),
            "{id}"
        );
        let replay = sender.deliver(&url, &event_of(id)).await;
        assert!(replay.replayed(), "{id}");
        assert_eq!(upstream.count(id), 1, "{id}");
    }
    for id in ["evt_clear_fail", "evt_a_fail"] {
        let record = gateway.record("hook", id).await.unwrap();
        let request = record.request.expect("kept");
        assert!(
            String::from_utf8_lossy(&request.body).contains(CUSTOMER),
            "{id}"
        );
        let excerpt = record.history[0].body.as_deref().unwrap_or_default();
        assert!(excerpt.contains(ANSWER), "{id}: {excerpt:?}");
    }

    // Run again, it finds everything current and rewrites nothing.
    let again = hookgate(&["store", "reencrypt"], &file);
    assert!(again.status.success(), "{}", said(&again));
    let out = said(&again);
    assert!(
        out.contains("pass 1: read 5  resealed 0  current 5"),
        "{out}"
    );
    assert_eq!(out.matches("pass 1: ").count(), 1, "said once: {out}");

    if let Backend::Embedded(_) = backend {
        // `hookgate backup` carries the ciphertext as it is.
        let copy = dir.path().join("backup.db");
        let backup = hookgate(&["backup", "--to", copy.to_str().unwrap()], &file);
        assert!(backup.status.success(), "{}", said(&backup));
        let bytes = std::fs::read(&copy).unwrap();
        assert!(holds(&bytes, "evt_a_fail") && holds(&bytes, &id_of(KEY_B)));
        assert!(!holds(&bytes, CUSTOMER) && !holds(&bytes, ANSWER));
    }
    gateway.shutdown().await;
}

crate::on_backends!(rotated_and_resealed: [embedded, redis, postgres]);

/// Without keys in its config there is nothing to seal under: a clear
/// error, and the store is untouched.
#[tokio::test]
async fn reencrypt_without_keys_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start().await;
    let backend = Backend::Embedded(dir.path().join("hookgate.db"));
    let text = config_text(&upstream.url("/hook"), &backend, "", "");
    let gateway = TestGateway::start(&text).await;
    gateway.shutdown().await;
    let file = dir.path().join("gateway.toml");
    std::fs::write(&file, &text).unwrap();
    let run = hookgate(&["store", "reencrypt"], &file);
    assert!(!run.status.success());
    assert!(
        said(&run).contains("no [store.encryption] keys"),
        "{}",
        said(&run)
    );
}
