//! The benchmark's legacy consumer: answers every POST with a small JSON
//! body and counts side effects per `Idempotency-Key`, so a benchmark run
//! can check exactly-once while it measures. `GET /stats` reports
//! `{"requests":…,"unique_keys":…,"duplicates":…}`.
//!
//! Usage: `bench-upstream 127.0.0.1:3000`

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Method, Response};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

#[derive(Default)]
struct Stats {
    requests: u64,
    keys: HashSet<String>,
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:3000".into());
    let listener = TcpListener::bind(&addr).await?;
    let stats: Arc<Mutex<Stats>> = Arc::default();
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let stats = Arc::clone(&stats);
        tokio::spawn(async move {
            let service = service_fn(move |request: http::Request<hyper::body::Incoming>| {
                let stats = Arc::clone(&stats);
                async move {
                    if request.method() == Method::GET {
                        let stats = stats.lock().unwrap();
                        let body = format!(
                            r#"{{"requests":{},"unique_keys":{},"duplicates":{}}}"#,
                            stats.requests,
                            stats.keys.len(),
                            stats.requests - stats.keys.len() as u64
                        );
                        return Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(body))));
                    }
                    // `/slow…`: a legacy consumer that takes 50 ms a call.
                    if request.uri().path().starts_with("/slow") {
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    }
                    let key = request
                        .headers()
                        .get("idempotency-key")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    let _ = request.into_body().collect().await;
                    {
                        let mut stats = stats.lock().unwrap();
                        stats.requests += 1;
                        if let Some(key) = key {
                            stats.keys.insert(key);
                        }
                    }
                    let mut response =
                        Response::new(Full::new(Bytes::from_static(b"{\"ok\":true}")));
                    response.headers_mut().insert(
                        "content-type",
                        http::HeaderValue::from_static("application/json"),
                    );
                    Ok(response)
                }
            });
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
