//! Data at rest (docs/guide/stores.md, "Data at rest"): with `[store.encryption]`, what a
//! record keeps of a sender's request and of the upstream's answer is
//! sealed on every backend — the store's own bytes (the SQLite file and its
//! WAL, every Redis value, a `pg_dump` of the PostgreSQL database) never
//! hold it — and it is read back whole. A record no configured key opens
//! is never forwarded again nor answered as garbage: 503
//! `record_unreadable` to a sender, 500 to an operator, counted; with its
//! key listed again it opens. A ciphertext changed or moved to another
//! record in the store does not open at all. (Rotation with `store
//! reencrypt`: `reencrypt.rs`.)

use http::{Method, StatusCode};

use crate::support::*;

/// In the stored request's body, the upstream's answer and one of its
/// headers: what must never reach the store in clear.
pub(crate) const CUSTOMER: &str = "ada.lovelace@example.com";
pub(crate) const ANSWER: &str = "cus_answer_kept_sealed";
pub(crate) const ANSWER_HEADER: &str = "x-upstream-secret";

pub(crate) const KEY_A: &str = "8b5c5f5e0a8f8d2c1e3b4a6d7c9e0f1a2b3c4d5e6f708192a3b4c5d6e7f80910";
pub(crate) const KEY_B: &str = "Xq4PbjXz2jHlP0n8hnJ8b0lC0d8Q6oTqYx8zZyJ1m3k=";

/// An upstream that answers `ANSWER` (and a header of it), and refuses
/// every event whose id holds `fail`.
pub(crate) async fn upstream() -> Upstream {
    Upstream::with(|seen| {
        let refused = seen.key().contains("fail");
        let mut plan = ok_plan(seen);
        plan.status = if refused {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::OK
        };
        plan.body = format!(r#"{{"customer":"{ANSWER}"}}"#);
        plan.headers.push((ANSWER_HEADER, ANSWER.to_owned()));
        plan
    })
    .await
}

pub(crate) fn event_of(id: &str) -> String {
    format!(r#"{{"id":"{id}","type":"customer.updated","email":"{CUSTOMER}"}}"#)
}

/// The config: `backend`, events dead after one attempt, the keys' files.
pub(crate) fn config(upstream: &Upstream, backend: &Backend, keys: &[&std::path::Path]) -> String {
    let store = format!("[store.encryption]\n{}", keys_line(keys));
    let text = config_text(&upstream.url("/hook"), backend, "max_attempts = 1", &store);
    with_admin(&text, true)
}

pub(crate) fn keys_line(keys: &[&std::path::Path]) -> String {
    let keys: Vec<String> = (keys.iter())
        .map(|path| format!("\"${{file:{}}}\"", path.display()))
        .collect();
    format!("keys = [{}]", keys.join(", "))
}

/// `text` (a [`config`]) with other keys: what a reload reads.
pub(crate) fn with_keys(text: &str, keys: &[&std::path::Path]) -> String {
    let line = text
        .lines()
        .find(|line| line.starts_with("keys = ["))
        .unwrap();
    text.replace(line, &keys_line(keys))
}

/// `text` (a [`config`]) without `[store.encryption]`.
pub(crate) fn without_keys(text: &str) -> String {
    let line = text
        .lines()
        .find(|line| line.starts_with("keys = ["))
        .unwrap();
    text.replace(line, "").replace("[store.encryption]\n", "")
}

/// Every byte the store keeps, as its operator's tools would read it.
pub(crate) async fn kept_bytes(backend: &Backend) -> Vec<u8> {
    match backend {
        Backend::Embedded(path) => {
            let mut bytes = std::fs::read(path).unwrap();
            for suffix in ["-wal", "-journal"] {
                let mut side = path.clone().into_os_string();
                side.push(suffix);
                bytes.extend(std::fs::read(side).unwrap_or_default());
            }
            bytes
        }
        Backend::Redis(url) => {
            let (mut redis, keys) = keys_at(url, "*").await;
            let mut bytes = Vec::new();
            for key in keys {
                // Every value, whatever its type, as the server serializes it.
                let dumped: Vec<u8> = ::redis::cmd("DUMP")
                    .arg(&key)
                    .query_async(&mut redis)
                    .await
                    .unwrap_or_default();
                bytes.extend(dumped);
                let kind: String = ::redis::cmd("TYPE")
                    .arg(&key)
                    .query_async(&mut redis)
                    .await
                    .unwrap();
                if kind == "string" {
                    // A packed record (`store/redis/packed.rs`) as it reads.
                    let value: Vec<u8> = ::redis::cmd("GET")
                        .arg(&key)
                        .query_async(&mut redis)
                        .await
                        .unwrap();
                    bytes.extend(value);
                }
                if kind == "hash" {
                    let fields: Vec<Vec<u8>> = ::redis::cmd("HGETALL")
                        .arg(&key)
                        .query_async(&mut redis)
                        .await
                        .unwrap();
                    bytes.extend(fields.concat());
                }
            }
            bytes
        }
        Backend::Postgres(url) => {
            // Every table, as a backup of the database would hold it
            // (bytea in hex).
            let url = url.clone();
            let dump = tokio::task::spawn_blocking(move || {
                std::process::Command::new("pg_dump")
                    .args(["--data-only", "--dbname", &url])
                    .output()
                    .expect("pg_dump (PostgreSQL's client) is installed")
            })
            .await
            .unwrap();
            assert!(dump.status.success(), "{dump:?}");
            dump.stdout
        }
        _ => Vec::new(),
    }
}

/// Whether `bytes` hold `secret`, as it is or in hex.
pub(crate) fn holds(bytes: &[u8], secret: &str) -> bool {
    let hex = hex::encode(secret);
    [secret.as_bytes(), hex.as_bytes()]
        .iter()
        .any(|needle| bytes.windows(needle.len()).any(|w| w == *needle))
}

async fn sealed_at_rest(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (key_a, key_b) = (dir.path().join("a.key"), dir.path().join("b.key"));
    std::fs::write(&key_a, format!("{KEY_A}\n")).unwrap();
    std::fs::write(&key_b, KEY_B).unwrap();
    let upstream = upstream().await;
    let text = config(&upstream, &backend, &[&key_a]);
    let gateway = TestGateway::start(&text).await;
    let (sender, url) = (Sender::new(), gateway.url("/hook"));

    // A completed event, replayed; a dead one, its request kept.
    let first = sender.deliver(&url, &event_of("evt_ok")).await;
    assert_eq!(first.status, StatusCode::OK);
    let replay = sender.deliver(&url, &event_of("evt_ok")).await;
    assert!(replay.replayed());
    assert!(String::from_utf8_lossy(&replay.body).contains(ANSWER));
    assert_eq!(replay.headers[ANSWER_HEADER], ANSWER);
    let dead = sender.deliver(&url, &event_of("evt_fail")).await;
    assert_eq!(dead.status, StatusCode::SERVICE_UNAVAILABLE);

    // Read back whole through the store.
    let ok = gateway.record("hook", "evt_ok").await.unwrap();
    let response = ok.response.expect("recorded");
    assert!(String::from_utf8_lossy(&response.body).contains(ANSWER));
    assert_eq!(response.headers[ANSWER_HEADER], ANSWER);
    let failed = gateway.record("hook", "evt_fail").await.unwrap();
    let request = failed.request.expect("kept");
    assert!(String::from_utf8_lossy(&request.body).contains(CUSTOMER));
    let signature = sign(event_of("evt_fail").as_bytes());
    assert_eq!(request.headers["x-signature"], signature.as_str());

    // The store's own bytes hold none of it.
    let kept = kept_bytes(&backend).await;
    assert!(!kept.is_empty(), "the store keeps something");
    for secret in [CUSTOMER, ANSWER, signature.as_str()] {
        assert!(!holds(&kept, secret), "{secret} is kept in clear");
    }
    assert!(holds(&kept, "evt_fail"), "keys stay in clear");

    // Reloaded with another key only: the dead event's duplicate is not
    // forwarded, and the sender is told to come back.
    let other = with_keys(&text, &[&key_b]);
    assert!(gateway.reloader.apply(&parse_config(&other)).is_empty());
    let calls = upstream.count("evt_fail");
    let refused = sender.deliver(&url, &event_of("evt_fail")).await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.json()["error"]["code"], "record_unreadable");
    assert!(refused.headers.contains_key("retry-after"));
    assert_eq!(upstream.count("evt_fail"), calls, "never forwarded again");
    let shown = request_admin(&gateway, "/admin/routes/hook/keys/evt_fail").await;
    assert_eq!(shown.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(shown.json()["error"]["code"], "record_unreadable");
    // A search through stored requests passes over what does not open.
    let search = "/admin/events?route=hook&q=json:/type%3Dcustomer.updated";
    let searched = request_admin(&gateway, search).await;
    assert_eq!(searched.status, StatusCode::OK, "{:?}", searched.json());
    assert_eq!(searched.json()["events"], serde_json::json!([]));
    let metrics = scrape(&gateway.admin_url("/metrics")).await;
    let failures = sample(&metrics, "hookgate_store_decrypt_failures_total", &[]);
    assert!(failures.is_some_and(|n| n >= 2.0), "{failures:?}");

    // The new key first, the old one still listed: it opens again, and
    // what is written now is sealed under the new key.
    let rotated = with_keys(&text, &[&key_b, &key_a]);
    assert!(gateway.reloader.apply(&parse_config(&rotated)).is_empty());
    let shown = request_admin(&gateway, "/admin/routes/hook/keys/evt_fail").await;
    assert_eq!(shown.status, StatusCode::OK);
    assert!(shown.json().to_string().contains(CUSTOMER));
    let second = sender.deliver(&url, &event_of("evt_fail_2")).await;
    assert_eq!(second.status, StatusCode::SERVICE_UNAVAILABLE);
    let only_new = with_keys(&text, &[&key_b]);
    assert!(gateway.reloader.apply(&parse_config(&only_new)).is_empty());
    let record = gateway.record("hook", "evt_fail_2").await.unwrap();
    assert!(String::from_utf8_lossy(&record.request.unwrap().body).contains(CUSTOMER));
    gateway.shutdown().await;
}

pub(crate) async fn request_admin(gateway: &TestGateway, path: &str) -> Answer {
    request(Method::GET, &gateway.admin_url(path), Some(ADMIN_TOKEN)).await
}

crate::on_backends!(sealed_at_rest: [embedded, redis, postgres]);

/// Redis with `packed_completions` and the replay cache off: the completed
/// record is one string, sealed as the hash is, and a duplicate answered
/// from it (no script, `store/redis/packed.rs`) gets the answer whole.
#[tokio::test]
async fn a_packed_completion_is_sealed_and_answers_whole() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let key_a = dir.path().join("a.key");
    std::fs::write(&key_a, KEY_A).unwrap();
    let upstream = upstream().await;
    let backend = Backend::Redis(redis.url());
    let store = format!(
        "packed_completions = true\nreplay_cache_bytes = 0\n[store.encryption]\n{}",
        keys_line(&[&key_a])
    );
    let text = config_text(&upstream.url("/hook"), &backend, "", &store);
    let gateway = TestGateway::start(&text).await;
    let (sender, url) = (Sender::new(), gateway.url("/hook"));
    assert_eq!(
        sender.deliver(&url, &event_of("evt_ok")).await.status,
        StatusCode::OK
    );

    let (mut raw, keys) = keys_at(&redis.url(), "*:evt_ok").await;
    let [record_key] = &keys[..] else {
        panic!("one record: {keys:?}")
    };
    let held: Vec<u8> = ::redis::cmd("GET")
        .arg(record_key)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(held.starts_with(b"p2:200:"), "a packed completion");
    let kept = kept_bytes(&backend).await;
    for secret in [ANSWER, CUSTOMER] {
        assert!(
            !holds(&held, secret) && !holds(&kept, secret),
            "{secret} is kept in clear"
        );
    }

    let replay = sender.deliver(&url, &event_of("evt_ok")).await;
    assert!(replay.replayed());
    assert!(String::from_utf8_lossy(&replay.body).contains(ANSWER));
    assert_eq!(replay.headers[ANSWER_HEADER], ANSWER);
    assert_eq!(upstream.count("evt_ok"), 1);
    let kind: String = ::redis::cmd("TYPE")
        .arg(record_key)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(kind, "string", "answered from the string as it is");
    gateway.shutdown().await;
}

#[tokio::test]
async fn a_config_with_a_bad_key_is_refused_and_names_it_by_place_only() {
    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("short.key");
    std::fs::write(&short, "00ff").unwrap();
    let upstream = Upstream::start().await;
    let text = config(&upstream, &Backend::Memory, &[&short]);
    let parsed = hookgate::config::Config::parse(&text, std::path::Path::new("t.toml"), &|_| None);
    let error = parsed.unwrap_err().to_string();
    assert!(error.contains("store.encryption.keys"), "{error}");
    assert!(error.contains("keys[0]"), "{error}");
    assert!(
        !error.contains("00ff"),
        "the key itself is never echoed: {error}"
    );

    // A good one: `hookgate check` says so, naming the key by its id only.
    let good = dir.path().join("good.key");
    std::fs::write(&good, KEY_A).unwrap();
    let text = config(&upstream, &Backend::Memory, &[&good]);
    let summary = parse_config(&text).summary();
    assert!(summary.contains("data at rest sealed"), "{summary}");
    assert!(!summary.contains(KEY_A), "{summary}");
}

/// `hookgate store copy` carries the ciphertext as it is, to a store of
/// another backend and key prefix: it opens there under the same keys, the
/// target's bytes hold nothing in clear, and a target without the keys
/// answers `record_unreadable`, never garbage.
#[tokio::test]
async fn a_sealed_store_copied_to_redis_opens_there_and_stays_sealed() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("a.key");
    std::fs::write(&key, KEY_A).unwrap();
    let upstream = upstream().await;
    let embedded = Backend::Embedded(dir.path().join("old.db"));
    let from = config(&upstream, &embedded, &[&key]);
    let gateway = TestGateway::start(&from).await;
    let sender = Sender::new();
    let url = gateway.url("/hook");
    assert_eq!(
        sender.deliver(&url, &event_of("evt_ok")).await.status,
        StatusCode::OK
    );
    let dead = sender.deliver(&url, &event_of("evt_fail")).await;
    assert_eq!(dead.status, StatusCode::SERVICE_UNAVAILABLE);
    gateway.shutdown().await;

    let target = Backend::Redis(redis.url());
    let to = config(&upstream, &target, &[&key]);
    let (from_file, to_file) = (dir.path().join("from.toml"), dir.path().join("to.toml"));
    std::fs::write(&from_file, &from).unwrap();
    std::fs::write(&to_file, &to).unwrap();
    let copy = std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .args(["store", "copy", "--from"])
        .arg(&from_file)
        .arg("--to")
        .arg(&to_file)
        .env("TEST_SECRET", SECRET)
        .output()
        .unwrap();
    assert!(copy.status.success(), "{copy:?}");
    let kept = kept_bytes(&target).await;
    assert!(holds(&kept, "evt_ok"));
    for secret in [CUSTOMER, ANSWER] {
        assert!(!holds(&kept, secret), "{secret} is kept in clear");
    }

    let gateway = TestGateway::start(&to).await;
    let url = gateway.url("/hook");
    let replay = sender.deliver(&url, &event_of("evt_ok")).await;
    assert!(replay.replayed());
    assert!(String::from_utf8_lossy(&replay.body).contains(ANSWER));
    let failed = gateway.record("hook", "evt_fail").await.unwrap();
    assert!(String::from_utf8_lossy(&failed.request.unwrap().body).contains(CUSTOMER));
    assert_eq!(upstream.count("evt_ok"), 1);
    gateway.shutdown().await;

    // The same store read by a gateway without the keys.
    let keyless = without_keys(&to);
    let gateway = TestGateway::start(&keyless).await;
    let refused = sender
        .deliver(&gateway.url("/hook"), &event_of("evt_ok"))
        .await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.json()["error"]["code"], "record_unreadable");
    assert_eq!(upstream.count("evt_ok"), 1, "never forwarded again");
    gateway.shutdown().await;
}

/// A stored ciphertext with one byte changed, or moved to another event's
/// record, does not open: the sender's duplicate is refused (never
/// forwarded), the operator told, and the untouched record still opens.
#[tokio::test]
async fn a_changed_or_moved_ciphertext_does_not_open() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("a.key");
    std::fs::write(&key, KEY_A).unwrap();
    let upstream = upstream().await;
    let path = dir.path().join("hookgate.db");
    let text = config(&upstream, &Backend::Embedded(path.clone()), &[&key]);
    let gateway = TestGateway::start(&text).await;
    let (sender, url) = (Sender::new(), gateway.url("/hook"));
    for id in ["evt_fail_1", "evt_fail_2", "evt_fail_3"] {
        let dead = sender.deliver(&url, &event_of(id)).await;
        assert_eq!(dead.status, StatusCode::SERVICE_UNAVAILABLE);
    }

    // By hand, as someone with write access to the file could (beside the
    // running gateway: SQLite's locking keeps the two apart).
    let file = rusqlite::Connection::open(&path).unwrap();
    let body_of = |id: &str| -> Vec<u8> {
        file.query_row(
            "SELECT request_body FROM webhook_events WHERE key LIKE '%' || ?1",
            [id],
            |row| row.get(0),
        )
        .unwrap()
    };
    let mut changed = body_of(":evt_fail_1");
    let last = changed.len() - 1;
    changed[last] ^= 0x01;
    let moved = body_of(":evt_fail_3");
    for (id, body) in [(":evt_fail_1", changed), (":evt_fail_2", moved)] {
        let set = "UPDATE webhook_events SET request_body = ?1 WHERE key LIKE '%' || ?2";
        assert_eq!(file.execute(set, rusqlite::params![body, id]).unwrap(), 1);
    }
    drop(file);

    for id in ["evt_fail_1", "evt_fail_2"] {
        let shown = request_admin(&gateway, &format!("/admin/routes/hook/keys/{id}")).await;
        assert_eq!(shown.status, StatusCode::INTERNAL_SERVER_ERROR, "{id}");
        assert_eq!(shown.code(), "record_unreadable", "{id}");
        let calls = upstream.count(id);
        let refused = sender.deliver(&url, &event_of(id)).await;
        assert_eq!(refused.code(), "record_unreadable", "{id}");
        assert_eq!(upstream.count(id), calls, "{id}: never forwarded");
    }
    let intact = request_admin(&gateway, "/admin/routes/hook/keys/evt_fail_3").await;
    assert_eq!(intact.status, StatusCode::OK);
    assert!(intact.json().to_string().contains(CUSTOMER));
    gateway.shutdown().await;
}
