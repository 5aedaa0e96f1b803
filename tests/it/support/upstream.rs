//! The recording upstream: a real HTTP server standing in for the legacy
//! consumer, counting side effects per idempotency key.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// One request as the upstream saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub uri: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Which call this was for its idempotency key (1 = first).
    pub nth: usize,
    /// When the request arrived.
    pub at: tokio::time::Instant,
    /// What the upstream answered (or will answer, once its delay is over).
    pub status: StatusCode,
}

impl Seen {
    pub fn key(&self) -> String {
        self.headers
            .get("idempotency-key")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    }
}

/// Every request the upstream took, and the calls per idempotency key.
#[derive(Default)]
struct Log {
    all: Vec<Seen>,
    per_key: HashMap<String, usize>,
}

/// What the upstream does with a request.
pub struct Plan {
    pub status: StatusCode,
    pub delay: Duration,
    pub headers: Vec<(&'static str, String)>,
    pub body: String,
}

type Behaviour = dyn Fn(&Seen) -> Plan + Send + Sync;

/// The default: 200, a JSON body naming the key and the call number, a
/// session cookie and a custom header — everything a replay must reproduce
/// (or, for the cookie, must not).
pub fn ok_plan(seen: &Seen) -> Plan {
    Plan {
        status: StatusCode::OK,
        delay: Duration::ZERO,
        headers: vec![
            ("content-type", "application/json".into()),
            ("x-upstream", "legacy".into()),
            ("set-cookie", "session=secret; HttpOnly".into()),
        ],
        body: format!(r#"{{"processed":"{}","call":{}}}"#, seen.key(), seen.nth),
    }
}

/// A real HTTP server standing in for the legacy consumer. It counts side
/// effects per idempotency key, the way a double charge would show.
pub struct Upstream {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Log>>,
    /// TCP connections accepted so far (keep-alive reuse shows here).
    connections: Arc<AtomicUsize>,
    _stop: oneshot::Sender<()>,
}

impl Upstream {
    pub async fn start() -> Upstream {
        Self::with(ok_plan).await
    }

    pub async fn with(behaviour: impl Fn(&Seen) -> Plan + Send + Sync + 'static) -> Upstream {
        Self::serve(None, behaviour).await
    }

    /// An upstream that answers 503 until the returned switch is set, then
    /// as usual.
    pub async fn flaky() -> (Upstream, Arc<AtomicBool>) {
        let healthy = Arc::new(AtomicBool::new(false));
        let switch = Arc::clone(&healthy);
        let upstream = Upstream::with(move |seen| {
            if switch.load(Ordering::SeqCst) {
                ok_plan(seen)
            } else {
                Plan {
                    status: StatusCode::SERVICE_UNAVAILABLE,
                    ..ok_plan(seen)
                }
            }
        })
        .await;
        (upstream, healthy)
    }

    /// An upstream behind TLS with `config`'s certificate.
    pub async fn tls(config: Arc<rustls::ServerConfig>) -> Upstream {
        Self::serve(Some(config), ok_plan).await
    }

    /// An upstream behind TLS with `config`'s certificate, answering as
    /// `behaviour` says (a sender's own server: SNS's certificate host).
    pub async fn tls_with(
        config: Arc<rustls::ServerConfig>,
        behaviour: impl Fn(&Seen) -> Plan + Send + Sync + 'static,
    ) -> Upstream {
        Self::serve(Some(config), behaviour).await
    }

    async fn serve(
        tls: Option<Arc<rustls::ServerConfig>>,
        behaviour: impl Fn(&Seen) -> Plan + Send + Sync + 'static,
    ) -> Upstream {
        let behaviour: Arc<Behaviour> = Arc::new(behaviour);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Mutex<Log>> = Arc::default();
        let (stop, mut stopped) = oneshot::channel::<()>();
        let log = Arc::clone(&seen);
        let connections: Arc<AtomicUsize> = Arc::default();
        let accepted_count = Arc::clone(&connections);
        tokio::spawn(async move {
            loop {
                let (stream, _) = tokio::select! {
                    accepted = listener.accept() => accepted.unwrap(),
                    _ = &mut stopped => return,
                };
                accepted_count.fetch_add(1, Ordering::Relaxed);
                let log = Arc::clone(&log);
                let behaviour = Arc::clone(&behaviour);
                let tls = tls.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request: Request<Incoming>| {
                        let log = Arc::clone(&log);
                        let behaviour = Arc::clone(&behaviour);
                        async move {
                            let (parts, body) = request.into_parts();
                            let body = body.collect().await.unwrap().to_bytes();
                            let plan = {
                                let mut log = log.lock().unwrap();
                                let mut seen = Seen {
                                    method: parts.method.to_string(),
                                    uri: parts.uri.to_string(),
                                    headers: parts.headers,
                                    body,
                                    nth: 0,
                                    at: tokio::time::Instant::now(),
                                    status: StatusCode::OK,
                                };
                                let key = seen.key();
                                let calls = log.per_key.entry(key).or_default();
                                *calls += 1;
                                seen.nth = *calls;
                                let plan = behaviour(&seen);
                                seen.status = plan.status;
                                log.all.push(seen);
                                plan
                            };
                            tokio::time::sleep(plan.delay).await;
                            let mut response = Response::new(Full::new(Bytes::from(plan.body)));
                            *response.status_mut() = plan.status;
                            for (name, value) in plan.headers {
                                response.headers_mut().append(name, value.parse().unwrap());
                            }
                            Ok::<_, Infallible>(response)
                        }
                    });
                    let http = hyper::server::conn::http1::Builder::new();
                    let _ = match tls {
                        None => http.serve_connection(TokioIo::new(stream), service).await,
                        Some(config) => {
                            match tokio_rustls::TlsAcceptor::from(config).accept(stream).await {
                                Ok(stream) => {
                                    http.serve_connection(TokioIo::new(stream), service).await
                                }
                                Err(_) => Ok(()),
                            }
                        }
                    };
                });
            }
        });
        Upstream {
            addr,
            seen,
            connections,
            _stop: stop,
        }
    }

    /// How many TCP connections the upstream accepted.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::Relaxed)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().all.clone()
    }

    /// How many times the upstream processed `key`.
    pub fn count(&self, key: &str) -> usize {
        let log = self.seen.lock().unwrap();
        log.per_key.get(key).copied().unwrap_or(0)
    }

    /// Wait until every one of `ids` reached the upstream (answered or not).
    pub async fn all_reached(&self, ids: &[String], within: Duration) -> bool {
        super::eventually(within, || {
            std::future::ready(ids.iter().all(|id| self.count(id) >= 1))
        })
        .await
    }

    pub fn total(&self) -> usize {
        self.seen.lock().unwrap().all.len()
    }

    /// Calls per key.
    pub fn counts(&self) -> HashMap<String, usize> {
        self.seen.lock().unwrap().per_key.clone()
    }
}
