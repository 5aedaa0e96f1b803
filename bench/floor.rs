//! The floor: the least an idempotent proxy on Redis can do, for
//! `bench/run.sh` to show beside hookgate what each of hookgate's
//! guarantees costs. Per request: `SET key pending NX GET PX 30000` (one
//! round trip, no script); a duplicate gets the stored body (or 409 while
//! pending); a new key is forwarded and its answer stored with a plain
//! `SET`. No verification, no fencing token, no lease renewal, no failure
//! handling, no recording of headers — none of what makes hookgate's
//! claims safe. Never use this for anything but the comparison.
//!
//! Usage: `floor 127.0.0.1:3800 redis://127.0.0.1:6391/0 http://127.0.0.1:3100/hook`

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use redis::aio::ConnectionManager;
use tokio::net::TcpListener;

struct Floor {
    redis: ConnectionManager,
    client: Client<HttpConnector, Full<Bytes>>,
    upstream: String,
}

fn answer(status: StatusCode, body: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response
}

impl Floor {
    async fn handle(&self, request: Request<Incoming>) -> Response<Full<Bytes>> {
        let Some(key) = request
            .headers()
            .get("x-id")
            .and_then(|v| v.to_str().ok())
            .map(|id| format!("floor:{id}"))
        else {
            return answer(StatusCode::BAD_REQUEST, Bytes::new());
        };
        let Ok(body) = request.into_body().collect().await.map(|b| b.to_bytes()) else {
            return answer(StatusCode::BAD_REQUEST, Bytes::new());
        };
        let mut redis = self.redis.clone();
        let previous: Option<Vec<u8>> = match redis::cmd("SET")
            .arg(&key)
            .arg("pending")
            .arg("NX")
            .arg("GET")
            .arg("PX")
            .arg(30_000)
            .query_async(&mut redis)
            .await
        {
            Ok(previous) => previous,
            Err(_) => return answer(StatusCode::SERVICE_UNAVAILABLE, Bytes::new()),
        };
        match previous.as_deref() {
            Some(b"pending") => return answer(StatusCode::CONFLICT, Bytes::new()),
            Some(done) => return answer(StatusCode::OK, Bytes::copy_from_slice(done)),
            None => {}
        }
        let forward = Request::post(&self.upstream)
            .header("idempotency-key", &key["floor:".len()..])
            .header("content-type", "application/json")
            .body(Full::new(body))
            .expect("valid request");
        let Ok(response) = self.client.request(forward).await else {
            return answer(StatusCode::BAD_GATEWAY, Bytes::new());
        };
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let _: Result<(), _> = redis::cmd("SET")
            .arg(&key)
            .arg(body.as_ref())
            .arg("PX")
            .arg(3_600_000)
            .query_async(&mut redis)
            .await;
        answer(status, body)
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (listen, redis_url, upstream) = match (args.next(), args.next(), args.next()) {
        (Some(l), Some(r), Some(u)) => (l, r, u),
        _ => return Err("usage: floor LISTEN REDIS_URL UPSTREAM_URL".into()),
    };
    let redis = ConnectionManager::new(redis::Client::open(redis_url)?).await?;
    let floor = Arc::new(Floor {
        redis,
        client: Client::builder(TokioExecutor::new()).build_http(),
        upstream,
    });
    let listener = TcpListener::bind(&listen).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let floor = Arc::clone(&floor);
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let floor = Arc::clone(&floor);
                async move { Ok::<_, Infallible>(floor.handle(request).await) }
            });
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
