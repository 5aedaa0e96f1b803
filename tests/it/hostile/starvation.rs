//! Starvation and resource bounds: idle sockets holding connection slots, a
//! stalled disk under the embedded store, a stalled replica under `WAIT`.

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::route_config;
use crate::support::*;

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

    let started = tokio::time::Instant::now();
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
    let config = pki.client_config();
    let stream = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, stream)
        .await
        .expect("handshake");
    assert!(closed_within(&mut tls, Duration::from_secs(3)).await);
    gateway.shutdown().await;
}

/// The embedded store under a disk stall (another connection holds SQLite's
/// write lock): callers give up after `store.timeout`, requests beyond the
/// queue bound fail at once instead of piling up in memory, and once the
/// stall ends no key is left `processing` under a token nobody holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_store_under_a_disk_stall_stays_bounded_and_leaves_no_orphans() {
    use hookgate::store::{ClaimRequest, EmbeddedStore, Store};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stall.db");
    let backend = EmbeddedStore::open(
        &path,
        hookgate::config::Synchronous::Normal,
        crate::support::clock(),
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

    let started = tokio::time::Instant::now();
    let claims: Vec<_> = (0..6_000)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let key = store.key("stall", &format!("k{i}"));
                store
                    .records()
                    .claim(ClaimRequest::delivery(
                        &key,
                        "00",
                        Duration::from_secs(60),
                        Duration::from_secs(600),
                    ))
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

/// With `min_replicas_acked`, a claim's `WAIT` runs on a connection of its
/// own: while a stalled replica holds one claim in `WAIT`, every other store
/// operation goes on (and that claim then fails, 503, rather than go
/// unprotected).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_replicas_holds_up_only_its_own_claim() {
    use hookgate::store::{ClaimOutcome, ClaimRequest, RedisStore, Store, StoreKey};
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
    let (acked, unacked) = (store.key("w", "acked"), store.key("w", "unacked"));
    fn request(key: &StoreKey) -> ClaimRequest<'_> {
        ClaimRequest::delivery(key, "00", Duration::from_secs(60), Duration::from_secs(600))
    }
    assert!(matches!(
        store.records().claim(request(&acked)).await.unwrap(),
        ClaimOutcome::New(_)
    ));

    replica.signal("STOP");
    let waiting = {
        let store = Arc::clone(&store);
        tokio::spawn(async move { store.records().claim(request(&unacked)).await })
    };
    // Once the claim is blocked in its WAIT (the master lists it), use the
    // store meanwhile.
    let in_wait = eventually(Duration::from_secs(5), || async {
        let mut connection = client.get_multiplexed_async_connection().await.unwrap();
        let clients: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query_async(&mut connection)
            .await
            .unwrap();
        clients.contains("cmd=wait")
    });
    assert!(in_wait.await, "the claim never reached its WAIT");
    for _ in 0..20 {
        assert!(store.records().get(&acked).await.unwrap().is_some());
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
