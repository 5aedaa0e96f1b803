//! Attacks and broken peers, played against the real gateway: upstreams that
//! time out, hang up or cut their answer short, and senders that try to slip
//! a second delivery past the claim. Every test counts what the upstream saw.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::support::*;

/// What a [`RawUpstream`] does once it has read a whole request.
#[derive(Clone, Copy)]
enum Misbehaviour {
    /// Hang up without a status: the request arrived, the outcome is unknown.
    CloseBeforeStatus,
    /// Send a final status and a tenth of the promised body, then hang up.
    CutBody,
}

/// An upstream that misbehaves at the socket level, counting the requests it
/// read (each one a side effect the legacy app may have performed).
struct RawUpstream {
    addr: SocketAddr,
    calls: Arc<AtomicUsize>,
}

impl RawUpstream {
    async fn start(misbehaviour: Misbehaviour) -> RawUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let calls: Arc<AtomicUsize> = Arc::default();
        let counted = Arc::clone(&calls);
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let counted = Arc::clone(&counted);
                tokio::spawn(async move {
                    if !read_request(&mut stream).await {
                        return;
                    }
                    counted.fetch_add(1, Ordering::SeqCst);
                    if let Misbehaviour::CutBody = misbehaviour {
                        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                                    etag: \"v1\"\r\ncontent-length: 100\r\n\r\n{\"partial\":";
                        let _ = stream.write_all(head.as_bytes()).await;
                        let _ = stream.flush().await;
                    }
                });
            }
        });
        RawUpstream { addr, calls }
    }

    fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

/// Read one request head and its `content-length` body; `false` on EOF.
async fn read_request(stream: &mut tokio::net::TcpStream) -> bool {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let Ok(n) = stream.read(&mut chunk).await else {
            return false;
        };
        if n == 0 {
            return false;
        }
        buffer.extend_from_slice(&chunk[..n]);
        let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length:"))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or(0);
        if buffer.len() >= end + 4 + length {
            return true;
        }
    }
}

fn route_config(upstream: &str, route_extra: &str) -> String {
    config_text(upstream, &Backend::Memory, route_extra, "")
}

/// A timeout is an unknown outcome: the claim is held until its lease runs
/// out, so a prompt retry gets 409 instead of running beside a call the
/// upstream may still be working on. After the lease, the retry is forwarded
/// (with the same idempotency key): the documented window.
#[tokio::test]
async fn a_timed_out_call_holds_its_claim_until_the_lease_runs_out() {
    let upstream = Upstream::with(|seen| Plan {
        delay: if seen.nth == 1 {
            Duration::from_secs(3)
        } else {
            Duration::ZERO
        },
        ..ok_plan(seen)
    })
    .await;
    let text = route_config(&upstream.url("/"), "processing_ttl = \"1500ms\"")
        .replace("upstream_timeout = \"5s\"", "upstream_timeout = \"300ms\"");
    let gateway = TestGateway::start(&text).await;
    let sender = Sender::new();
    let url = gateway.url("/hook");

    let first = sender.deliver(&url, &event("evt_slow")).await;
    assert_eq!(first.code(), "upstream_timeout");
    let retry = sender.deliver(&url, &event("evt_slow")).await;
    assert_eq!(retry.status, StatusCode::CONFLICT, "{retry:?}");
    assert_eq!(retry.code(), "in_flight");
    assert!(retry.headers.get("retry-after").is_some());
    assert_eq!(
        upstream.count("evt_slow"),
        1,
        "nothing ran beside the first call"
    );

    let later = eventually(Duration::from_secs(5), || async {
        sender.deliver(&url, &event("evt_slow")).await.status == StatusCode::OK
    });
    assert!(later.await, "forwarded once the lease ran out");
    let keys: Vec<String> = upstream.seen().iter().map(Seen::key).collect();
    assert_eq!(keys, ["evt_slow", "evt_slow"], "the same key both times");
    gateway.shutdown().await;
}

/// The connection broke after the request was sent: the upstream may have
/// acted, so the claim is held like a timeout.
#[tokio::test]
async fn a_connection_broken_after_the_request_is_held_too() {
    let upstream = RawUpstream::start(Misbehaviour::CloseBeforeStatus).await;
    let gateway = TestGateway::start(&route_config(&upstream.url(), "")).await;
    let sender = Sender::new();
    let url = gateway.url("/hook");

    let first = sender.deliver(&url, &event("evt_hangup")).await;
    assert_eq!(first.status, StatusCode::BAD_GATEWAY);
    assert_eq!(first.code(), "upstream_unreachable");
    let retry = sender.deliver(&url, &event("evt_hangup")).await;
    assert_eq!(retry.code(), "in_flight");
    assert_eq!(upstream.calls(), 1);
    let record = gateway.record("hook", "evt_hangup").await.unwrap();
    assert_eq!(record.state.as_str(), "processing", "held, not released");
    gateway.shutdown().await;
}

/// A final status is the upstream's word even when its body broke off: the
/// event is recorded (`body_incomplete`), the sender of that delivery is told
/// 502 `upstream_body_incomplete`, and later deliveries replay the status.
#[tokio::test]
async fn a_final_status_whose_body_broke_off_is_recorded() {
    let upstream = RawUpstream::start(Misbehaviour::CutBody).await;
    let gateway = TestGateway::start(&route_config(&upstream.url(), "")).await;
    let sender = Sender::new();
    let url = gateway.url("/hook");

    let first = sender.deliver(&url, &event("evt_cut")).await;
    assert_eq!(first.status, StatusCode::BAD_GATEWAY);
    assert_eq!(first.code(), "upstream_body_incomplete");

    let replay = sender.deliver(&url, &event("evt_cut")).await;
    assert_eq!(replay.status, StatusCode::OK);
    assert!(replay.replayed());
    assert!(replay.body.is_empty());
    assert!(
        replay.headers.get("etag").is_none(),
        "no ETag of a body that is not there"
    );
    assert_eq!(upstream.calls(), 1);
    let record = gateway.record("hook", "evt_cut").await.unwrap();
    assert_eq!(record.state.as_str(), "completed");
    assert_eq!(record.response.unwrap().body_kept.as_str(), "incomplete");
    gateway.shutdown().await;
}

/// A body over `max_cached_body_bytes` is not kept, and neither are the
/// headers that describe it: the replay is status and headers, empty body.
#[tokio::test]
async fn a_dropped_body_is_replayed_without_the_headers_that_describe_it() {
    let upstream = Upstream::with(|seen| {
        let mut plan = ok_plan(seen);
        plan.headers.push(("content-encoding", "identity".into()));
        plan.headers.push(("etag", "\"v1\"".into()));
        plan
    })
    .await;
    let text = route_config(&upstream.url("/"), "max_cached_body_bytes = 8");
    let gateway = TestGateway::start(&text).await;
    let sender = Sender::new();
    let url = gateway.url("/hook");

    let first = sender.deliver(&url, &event("evt_big")).await;
    assert_eq!(first.status, StatusCode::OK);
    assert!(first.body.len() > 8, "the first sender gets the whole body");
    assert_eq!(first.headers["etag"], "\"v1\"");

    let replay = sender.deliver(&url, &event("evt_big")).await;
    assert!(replay.replayed());
    assert!(replay.body.is_empty());
    for gone in ["etag", "content-encoding"] {
        assert!(replay.headers.get(gone).is_none(), "{gone}");
    }
    assert_eq!(replay.headers["content-length"], "0");
    assert_eq!(replay.headers["x-upstream"], "legacy");
    let record = gateway.record("hook", "evt_big").await.unwrap();
    assert_eq!(record.response.unwrap().body_kept.as_str(), "dropped");
    assert_eq!(upstream.count("evt_big"), 1);
    gateway.shutdown().await;
}

const ADMIN_TOKEN: &str = "hostile-admin-token-0123";

fn with_admin(text: &str) -> String {
    text.replace(
        "[store]",
        &format!("[admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"{ADMIN_TOKEN}\"\n\n[store]"),
    )
}

async fn admin_delete(sender: &Sender, url: &str) -> Answer {
    let request = http::Request::delete(url)
        .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    sender.send(request).await
}

/// Forgetting a key whose delivery is still calling the upstream would let a
/// duplicate through beside it: the admin API refuses (409 `in_flight`)
/// unless `?force=true`.
#[tokio::test]
async fn a_delete_during_a_running_call_is_refused_unless_forced() {
    let upstream = Upstream::with(|seen| Plan {
        delay: Duration::from_millis(1500),
        ..ok_plan(seen)
    })
    .await;
    let gateway = TestGateway::start(&with_admin(&route_config(&upstream.url("/"), ""))).await;
    let sender = Sender::new();
    let url = gateway.url("/hook");
    let running = {
        let (sender, url) = (sender.clone(), url.clone());
        tokio::spawn(async move { sender.deliver(&url, &event("evt_del")).await })
    };
    assert!(eventually(Duration::from_secs(2), || ready(upstream.total() == 1)).await);

    let key_url = gateway.admin_url("/admin/routes/hook/keys/evt_del");
    let refused = admin_delete(&sender, &key_url).await;
    assert_eq!(refused.status, StatusCode::CONFLICT);
    assert_eq!(refused.code(), "in_flight");
    let duplicate = sender.deliver(&url, &event("evt_del")).await;
    assert_eq!(duplicate.code(), "in_flight", "the claim is intact");
    assert_eq!(upstream.count("evt_del"), 1);

    let forced = admin_delete(&sender, &format!("{key_url}?force=true")).await;
    assert_eq!(forced.status, StatusCode::OK);
    assert!(gateway.record("hook", "evt_del").await.is_none());
    assert_eq!(running.await.unwrap().status, StatusCode::OK);
    gateway.shutdown().await;
}

/// A config whose idle bounds are short enough to watch: 500 ms before a
/// first request, 1 s between requests, and only two connection slots.
fn tight(upstream: &str) -> String {
    route_config(upstream, "").replace(
        "shutdown_grace = \"2s\"",
        "shutdown_grace = \"2s\"\nheader_read_timeout = \"500ms\"\nidle_timeout = \"1s\"\nmax_connections = 2",
    )
}

/// Whether the gateway closes `stream` within `within` (EOF or reset).
async fn closed_within<S: tokio::io::AsyncRead + Unpin>(stream: &mut S, within: Duration) -> bool {
    let mut buffer = [0u8; 256];
    loop {
        match tokio::time::timeout(within, stream.read(&mut buffer)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue, // an HTTP error answer or an h2 frame; keep reading
        }
    }
}

/// Sockets that hold a slot without sending a request — silent ones, and
/// ones that stop two bytes into the protocol sniff — are closed after
/// `header_read_timeout`, and a real sender gets the slot.
#[tokio::test]
async fn idle_sockets_are_closed_and_free_their_slots() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&tight(&upstream.url("/"))).await;
    let mut silent = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
    let mut sniffed = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
    sniffed.write_all(b"PO").await.unwrap();

    let started = std::time::Instant::now();
    assert!(closed_within(&mut silent, Duration::from_secs(3)).await);
    assert!(closed_within(&mut sniffed, Duration::from_secs(3)).await);
    assert!(started.elapsed() < Duration::from_secs(3));

    let answer = tokio::time::timeout(
        Duration::from_secs(3),
        Sender::new().deliver(&gateway.url("/hook"), &event("evt_after_idle")),
    )
    .await
    .expect("a real sender is served once the idle slots are freed");
    assert_eq!(answer.status, StatusCode::OK);
    gateway.shutdown().await;
}

/// An h2 connection with no streams (pings alone keep it alive) is closed
/// too, before and after it has served a request.
#[tokio::test]
async fn an_idle_h2_session_is_closed() {
    let upstream = Upstream::start().await;
    let gateway = TestGateway::start(&tight(&upstream.url("/"))).await;
    for requests in [0, 1] {
        let stream = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
        let (mut send, connection) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(stream),
        )
        .await
        .unwrap();
        let connection = tokio::spawn(connection);
        for _ in 0..requests {
            let request = signed(&gateway.url("/hook"), &event("evt_h2_idle"));
            let response = send.send_request(request).await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
        }
        let ended = tokio::time::timeout(Duration::from_secs(4), connection).await;
        assert!(
            ended.is_ok(),
            "idle h2 session still open ({requests} requests)"
        );
    }
    gateway.shutdown().await;
}

/// A TLS connection that completes its handshake and then sends nothing is
/// closed like a plain one.
#[tokio::test]
async fn a_connection_idle_after_its_tls_handshake_is_closed() {
    let pki = Pki::new("gateway");
    let upstream = Upstream::start().await;
    let (cert, key) = pki.leaf("gateway");
    let text = tight(&upstream.url("/")).replace(
        "shutdown_grace",
        &format!(
            "tls = {{ cert = \"{}\", key = \"{}\" }}\nshutdown_grace",
            cert.display(),
            key.display()
        ),
    );
    let gateway = TestGateway::start(&text).await;
    let mut roots = rustls::RootCertStore::empty();
    for cert in hookgate::tls::load_certs(&pki.ca_path()).unwrap() {
        roots.add(cert).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let stream = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, stream)
        .await
        .expect("handshake");
    assert!(closed_within(&mut tls, Duration::from_secs(3)).await);
    gateway.shutdown().await;
}

const GITHUB_SECRET: &str = "github-secret-0123456789";

/// A GitHub route (replay guard on by default) on `backend`.
fn github_route(upstream: &str, backend: &Backend) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[store]\n{}\nkey_prefix = \"h{}:\"\n\
         [[routes]]\nname = \"gh\"\npath = \"/gh\"\nupstream = \"{upstream}\"\n\
         [routes.verify]\nscheme = \"github\"\nsecrets = [\"{GITHUB_SECRET}\"]\n",
        backend.toml(),
        rand::random::<u32>(),
    )
}

/// A correctly signed GitHub delivery of `body` under delivery id `id`.
fn github_delivery(
    url: &str,
    id: &str,
    body: &str,
) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    use hmac::Mac;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(GITHUB_SECRET.as_bytes()).unwrap();
    mac.update(body.as_bytes());
    http::Request::post(url)
        .header("content-type", "application/json")
        .header("x-github-delivery", id)
        .header(
            "x-hub-signature-256",
            format!("sha256={}", hex::encode(mac.finalize().into_bytes())),
        )
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_owned(),
        )))
        .unwrap()
}

/// A delivery id crafted to look like a replay guard's name
/// (`body-sha256:<hex>`) is an ordinary key: guards have their own
/// namespace, so it neither collides (WRONGTYPE, 503) nor blocks the body.
#[tokio::test]
async fn a_delivery_id_shaped_like_a_guard_key_is_just_a_key() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let upstream = Upstream::start().await;
    let text = github_route(&upstream.url("/"), &Backend::Redis(redis.url()));
    let gateway = TestGateway::start(&text).await;
    let sender = Sender::new();
    let url = gateway.url("/gh");
    let first_body = r#"{"action":"opened","number":1}"#;
    let first = sender.send(github_delivery(&url, "d-1", first_body)).await;
    assert_eq!(first.status, StatusCode::OK);

    let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(
        first_body.as_bytes(),
    ));
    let crafted_id = format!("body-sha256:{digest}");
    let other_body = r#"{"action":"closed","number":2}"#;
    let crafted = sender
        .send(github_delivery(&url, &crafted_id, other_body))
        .await;
    assert_eq!(crafted.status, StatusCode::OK, "{crafted:?}");
    assert!(!crafted.replayed());
    assert_eq!(upstream.total(), 2);
    assert_eq!(upstream.count(&crafted_id), 1);
    gateway.shutdown().await;
}

/// Delivery A of a body fails (500, released); the same body under a new id
/// B succeeds; A's retry is then a duplicate of B — the guard holds for every
/// later claim of the body, on every backend.
#[tokio::test]
async fn a_failed_delivery_retried_after_its_body_completed_under_another_id_is_a_duplicate() {
    let redis = RedisServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut backends = vec![
        Backend::Memory,
        Backend::Embedded(dir.path().join("hostile.db")),
    ];
    backends.extend(redis.as_ref().map(|redis| Backend::Redis(redis.url())));
    for backend in backends {
        let upstream = Upstream::with(|seen| Plan {
            status: if seen.key() == "A" {
                StatusCode::INTERNAL_SERVER_ERROR
            } else {
                StatusCode::OK
            },
            ..ok_plan(seen)
        })
        .await;
        let gateway = TestGateway::start(&github_route(&upstream.url("/"), &backend)).await;
        let sender = Sender::new();
        let url = gateway.url("/gh");
        let body = r#"{"action":"created","charge":4200}"#;
        let a = sender.send(github_delivery(&url, "A", body)).await;
        assert_eq!(a.status, StatusCode::INTERNAL_SERVER_ERROR);
        let b = sender.send(github_delivery(&url, "B", body)).await;
        assert_eq!(b.status, StatusCode::OK);
        let retry = sender.send(github_delivery(&url, "A", body)).await;
        assert_eq!(retry.status, StatusCode::OK, "{}", backend.toml());
        assert!(retry.replayed(), "{}", backend.toml());
        assert_eq!(retry.body, b.body);
        assert_eq!(upstream.total(), 2, "{}", backend.toml());
        gateway.shutdown().await;
    }
}

/// The embedded store under a disk stall (another connection holds SQLite's
/// write lock): callers give up after `store.timeout`, requests beyond the
/// queue bound fail at once instead of piling up in memory, and once the
/// stall ends no key is left `processing` under a token nobody holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_store_under_a_disk_stall_stays_bounded_and_leaves_no_orphans() {
    use hookgate::store::{ClaimRequest, Clock, EmbeddedStore, Store};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stall.db");
    let backend = EmbeddedStore::open(
        &path,
        hookgate::config::Synchronous::Normal,
        Clock::system(),
    )
    .unwrap();
    let metrics = hookgate::metrics::StoreMetrics::unregistered();
    let store = Arc::new(Store::new(
        backend,
        "stall:",
        Duration::from_millis(200),
        metrics,
    ));
    store.ping().await.unwrap();

    let (locked, is_locked) = std::sync::mpsc::channel();
    let (unlock, until_unlocked) = std::sync::mpsc::channel::<()>();
    let holder = {
        let path = path.clone();
        std::thread::spawn(move || {
            let connection = rusqlite::Connection::open(path).unwrap();
            connection.execute_batch("BEGIN EXCLUSIVE").unwrap();
            locked.send(()).unwrap();
            until_unlocked.recv().unwrap();
            connection.execute_batch("COMMIT").unwrap();
        })
    };
    is_locked.recv().unwrap();

    let started = std::time::Instant::now();
    let claims: Vec<_> = (0..6_000)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let key = format!("stall:k{i}");
                store
                    .claim(ClaimRequest {
                        key: &key,
                        body_sha256: "00",
                        processing_ttl: Duration::from_secs(60),
                        retention: Duration::from_secs(600),
                        guard_key: None,
                    })
                    .await
            })
        })
        .collect();
    let mut refused_at_once = 0;
    for claim in claims {
        let error = claim
            .await
            .unwrap()
            .expect_err("nothing commits during the stall");
        refused_at_once += usize::from(error.to_string().contains("waiting for the database"));
    }
    assert!(
        refused_at_once >= 6_000 - EmbeddedStore::MAX_QUEUED - 512,
        "the queue is bounded: only {refused_at_once} refused at once"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "callers did not pile up"
    );

    unlock.send(()).unwrap();
    holder.join().unwrap();
    // The ping queues behind everything the stall left: once it answers, the
    // thread has been through all of it.
    let drained = eventually(Duration::from_secs(15), || async {
        store.ping().await.is_ok()
    });
    assert!(drained.await);
    let reader = rusqlite::Connection::open(&path).unwrap();
    let processing: i64 = reader
        .query_row(
            "SELECT COUNT(*) FROM webhook_events WHERE state = 'processing'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(processing, 0, "no orphaned claims");
}

/// A sender cannot forge where it comes from: its `X-Forwarded-For` chain is
/// kept only when the peer is one of `trusted_proxies`.
#[tokio::test]
async fn x_forwarded_for_is_kept_only_from_trusted_proxies() {
    let upstream = Upstream::start().await;
    let sender = Sender::new();
    for (trusted, expected) in [
        ("", "127.0.0.1"),
        ("trusted_proxies = [\"10.0.0.0/8\"]", "127.0.0.1"),
        (
            "trusted_proxies = [\"10.0.0.0/8\", \"127.0.0.1/32\"]",
            "198.51.100.7, 127.0.0.1",
        ),
    ] {
        let text = route_config(&upstream.url("/"), "").replace(
            "shutdown_grace = \"2s\"",
            &format!("shutdown_grace = \"2s\"\n{trusted}"),
        );
        let gateway = TestGateway::start(&text).await;
        let id = format!("evt_xff_{}", upstream.total());
        let mut request = signed(&gateway.url("/hook"), &event(&id));
        request
            .headers_mut()
            .insert("x-forwarded-for", "198.51.100.7".parse().unwrap());
        assert_eq!(sender.send(request).await.status, StatusCode::OK);
        let seen = upstream.seen().pop().unwrap();
        assert_eq!(seen.headers["x-forwarded-for"], expected, "{trusted}");
        gateway.shutdown().await;
    }
}

/// With `min_replicas_acked`, a claim's `WAIT` runs on a connection of its
/// own: while a stalled replica holds one claim in `WAIT`, every other store
/// operation goes on (and that claim then fails, 503, rather than go
/// unprotected).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_replicas_holds_up_only_its_own_claim() {
    use hookgate::store::{ClaimOutcome, ClaimRequest, RedisStore, Store};
    let Some(master) = RedisServer::start().await else {
        return;
    };
    let replicaof = format!("127.0.0.1 {}", master.port);
    let replica = RedisServer::start_with(&["--replicaof", &replicaof], None)
        .await
        .unwrap();
    let client = redis::Client::open(master.url()).unwrap();
    let synced = eventually(Duration::from_secs(10), || async {
        let mut connection = client.get_multiplexed_async_connection().await.unwrap();
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut connection)
            .await
            .unwrap();
        info.contains("connected_slaves:1") && info.contains("state=online")
    });
    assert!(synced.await, "the replica never came online");

    let settings = hookgate::config::StoreSettings {
        timeout: Duration::from_secs(4),
        min_replicas_acked: 1,
        ..hookgate::config::StoreSettings::new(hookgate::config::Backend::Redis {
            url: master.url(),
        })
    };
    let backend = RedisStore::connect(&master.url(), &settings).unwrap();
    let metrics = hookgate::metrics::StoreMetrics::unregistered();
    let store = Arc::new(Store::new(backend, "wait:", settings.timeout, metrics));
    let request = |key: &'static str| ClaimRequest {
        key,
        body_sha256: "00",
        processing_ttl: Duration::from_secs(60),
        retention: Duration::from_secs(600),
        guard_key: None,
    };
    assert!(matches!(
        store.claim(request("wait:acked")).await.unwrap(),
        ClaimOutcome::New(_)
    ));

    replica.signal("STOP");
    let waiting = {
        let store = Arc::clone(&store);
        tokio::spawn(async move { store.claim(request("wait:unacked")).await })
    };
    // Give the claim time to reach its WAIT, then use the store meanwhile.
    tokio::time::sleep(Duration::from_millis(200)).await;
    for _ in 0..20 {
        assert!(store.get("wait:acked").await.unwrap().is_some());
        store.ping().await.unwrap();
    }
    assert!(
        !waiting.is_finished(),
        "the other operations did not queue behind the WAIT"
    );
    let unacked = waiting.await.unwrap();
    assert!(
        unacked
            .as_ref()
            .is_err_and(|e| e.to_string().contains("replicas acknowledged")),
        "{unacked:?}"
    );
    replica.signal("CONT");
}
