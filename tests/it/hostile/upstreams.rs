//! Upstreams that time out, hang up before a status, or cut their body
//! short: each outcome class of an upstream call (docs/guide/what-a-sender-sees.md, "What a sender sees"), counted at the upstream.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::route_config;
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
    assert_eq!(record.state.as_str(), "failed");
    assert_eq!(record.last_error.unwrap().class.as_str(), "unknown");
    assert!(
        record.lease_expires_at_ms.is_some() && record.token.is_some(),
        "held, not released: {record:?}"
    );
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
