//! `hookgate demo`: exactly-once, shown in one command, with nothing to
//! install or configure.
//!
//! In this one process it starts a gateway on the embedded store in a
//! temporary directory (its config written there, to read), and a
//! recording consumer — the "legacy endpoint" — that takes a moment per
//! call and counts every event it sees. Then it plays the sender: a
//! Stripe-signed delivery, the sender's retry of it, and a burst of
//! concurrent copies of another event. It prints what the sender got each
//! time and how often the consumer saw each event, and keeps serving so
//! the printed `curl` lines can be pasted (`--exit` stops instead).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use hmac::{Hmac, Mac};
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use sha2::Sha256;
use tokio::net::TcpListener;

use hookgate::config::Config;
use hookgate::headers::IDEMPOTENT_REPLAYED;
use hookgate::store::StoreError;
use hookgate::App;

/// Why the demo could not show what it set out to.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("the demo's config: {0}")]
    Config(String),
    #[error("the embedded store: {0}")]
    Store(#[from] StoreError),
    #[error("sending to the gateway: {0}")]
    Send(String),
    /// The gateway did not answer as exactly-once promises (a bug).
    #[error("{0}")]
    Broken(String),
}

#[derive(clap::Args)]
pub struct DemoArgs {
    /// The gateway's port on 127.0.0.1; when it is taken (or 0), any free
    /// port. The consumer and the admin listener take 3000 and 9090 when
    /// free, else any.
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Print the summary and exit instead of serving until Ctrl-C.
    #[arg(long)]
    pub exit: bool,
}

/// The demo route's Stripe endpoint secret (it signs nothing real).
const SECRET: &str = "whsec_hookgate_demo";
const ROUTE: &str = "stripe";
const ROUTE_PATH: &str = "/webhooks/stripe";
/// How long the consumer takes per call: long enough for a burst of
/// copies to arrive while the first is still being processed.
const CONSUMER_TAKES: Duration = Duration::from_millis(300);
/// Concurrent copies of one event in step 3.
const BURST: usize = 20;

/// Run the demo until `shutdown` (or, with `--exit`, until the script has
/// run). Errors are the demo's own failures: a port, the store, or a
/// gateway answer that is not what exactly-once promises.
pub async fn run(
    args: DemoArgs,
    clock: hookgate::clock::Clock,
    shutdown: impl Future<Output = ()>,
) -> Result<(), DemoError> {
    let dir = std::env::temp_dir().join(format!("hookgate-demo-{}", std::process::id()));
    // A leftover of an earlier run under the same pid would replay its events.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let consumer_listener = bind(3000).await?;
    let consumer_addr = consumer_listener.local_addr()?;
    let admin_listener = bind(9090).await?;
    let gateway_listener = bind(args.port).await?;
    let token = hex::encode(rand::random::<[u8; 16]>());
    let addrs = Addrs {
        gateway: gateway_listener.local_addr()?,
        admin: admin_listener.local_addr()?,
        consumer: consumer_addr,
    };
    let config_path = write_config(&dir, &addrs, &token)?;
    let config =
        Config::load(&config_path).map_err(|error| DemoError::Config(error.to_string()))?;
    let app = App::new(&config, clock).await?;

    let consumer = Arc::new(Consumer::default());
    tokio::spawn(Arc::clone(&consumer).serve(consumer_listener));

    let sender = Sender::new(addrs.gateway);
    let exit = args.exit;
    let shown = Shown {
        addrs,
        token,
        config: config_path,
        dir: dir.clone(),
    };
    let script = tokio::spawn(async move {
        let result = play(&sender, &consumer, &shown).await;
        if result.is_ok() && !exit {
            println!(
                "Serving until Ctrl-C. The store and config stay in {} until then.",
                shown.dir.display()
            );
        }
        result
    });
    // Stop on Ctrl-C; and when the script failed (exit 1), or with
    // `--exit` when it is done.
    let (result_tx, result_rx) = tokio::sync::oneshot::channel();
    let stop = async move {
        let script = async {
            match script.await {
                Ok(Err(error)) => Err(error),
                _ if exit => Ok(()),
                _ => std::future::pending().await,
            }
        };
        let result = tokio::select! {
            result = script => result,
            () = shutdown => Ok(()),
        };
        let _ = result_tx.send(result);
    };
    app.serve(gateway_listener, Some(admin_listener), stop)
        .await;
    let _ = std::fs::remove_dir_all(&dir);
    result_rx.await.unwrap_or(Ok(()))
}

/// Bind 127.0.0.1 on `preferred`, else on any free port.
async fn bind(preferred: u16) -> std::io::Result<TcpListener> {
    match TcpListener::bind(("127.0.0.1", preferred)).await {
        Ok(listener) => Ok(listener),
        Err(_) => TcpListener::bind(("127.0.0.1", 0)).await,
    }
}

struct Addrs {
    gateway: SocketAddr,
    admin: SocketAddr,
    consumer: SocketAddr,
}

/// What the summary points at.
struct Shown {
    addrs: Addrs,
    token: String,
    config: PathBuf,
    dir: PathBuf,
}

fn write_config(dir: &Path, addrs: &Addrs, token: &str) -> std::io::Result<PathBuf> {
    let config = format!(
        r#"# Written by `hookgate demo`; removed when it stops.
[server]
listen = "{gateway}"
watch = false

[store]
backend = "embedded"
path = "{db}"

[admin]
listen = "{admin}"
token = "{token}"

[[routes]]
name = "{ROUTE}"
path = "{ROUTE_PATH}"
upstream = "http://{consumer}/orders"
[routes.verify]
scheme = "stripe"
secrets = ["{SECRET}"]
# An hour, so that the printed curl lines keep working (Stripe's is 5m).
tolerance = "1h"
"#,
        gateway = addrs.gateway,
        admin = addrs.admin,
        consumer = addrs.consumer,
        db = dir.join("hookgate.db").display(),
    );
    let path = dir.join("gateway.toml");
    std::fs::write(&path, config)?;
    Ok(path)
}

/// The sender's side of the script, printed as it goes.
async fn play(sender: &Sender, consumer: &Consumer, shown: &Shown) -> Result<(), DemoError> {
    introduce(shown);
    let first = Event::new("evt_demo_1", "charge.succeeded");
    println!("1. Stripe delivers {}", first.id);
    let answer = sender.deliver(&first.signed()).await?;
    println!("   -> {}", answer.describe());
    expect(
        !answer.replayed && answer.status.is_success(),
        "the first delivery was not forwarded",
        &answer,
    )?;

    println!(
        "2. Stripe never saw that answer (a timeout), so it retries {}",
        first.id
    );
    let retry = sender.deliver(&first.signed()).await?;
    println!("   -> {}", retry.describe());
    expect(
        retry.replayed && retry.body == answer.body,
        "the retry was not replayed",
        &retry,
    )?;
    println!("   the same answer, from the record: the consumer was not called again");

    let burst = Event::new("evt_demo_2", "invoice.paid");
    println!(
        "3. {BURST} copies of {} arrive at the same moment (a retry storm)",
        burst.id
    );
    let delivery = burst.signed();
    let answers =
        futures_util::future::join_all((0..BURST).map(|_| sender.deliver(&delivery))).await;
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    for answer in answers {
        *tally.entry(answer?.describe()).or_default() += 1;
    }
    for (described, count) in &tally {
        println!("   {count:>2} x {described}");
    }
    println!("   a 409 tells the sender to retry later; its retry is then replayed:");
    let late = sender.deliver(&delivery).await?;
    println!("   -> {}", late.describe());
    expect(late.replayed, "the late retry was not replayed", &late)?;

    let seen = consumer.seen();
    let sent = 2 + BURST + 1;
    println!("4. What the consumer saw");
    for (id, count) in &seen {
        println!(
            "   {id}: {count} time{}",
            if *count == 1 { "" } else { "s" }
        );
    }
    let calls: u32 = seen.values().sum();
    println!("   {sent} deliveries sent, {calls} reached the consumer: each event exactly once.\n");
    if seen.get(first.id) != Some(&1) || seen.get(burst.id) != Some(&1) {
        return Err(DemoError::Broken(format!(
            "the consumer saw {seen:?}, not each event once"
        )));
    }

    try_it_yourself(shown, &first);
    Ok(())
}

/// Where everything the demo started listens.
fn introduce(shown: &Shown) {
    let a = &shown.addrs;
    println!("hookgate demo: exactly-once in front of a webhook consumer\n");
    println!(
        "  gateway   http://{}{ROUTE_PATH}  (verifies Stripe signatures; embedded store)",
        a.gateway
    );
    println!(
        "  consumer  http://{}/orders  (takes {} ms a call, counts what it sees)",
        a.consumer,
        CONSUMER_TAKES.as_millis()
    );
    println!(
        "  admin     http://{}  (metrics, and the admin API with the token below)",
        a.admin
    );
    println!("  config    {}\n", shown.config.display());
}

/// What to try next by hand, with `first` (already delivered) among it.
fn try_it_yourself(shown: &Shown, first: &Event) {
    let a = &shown.addrs;
    let next = Event::new("evt_demo_3", "customer.created");
    let mut forged = next.signed();
    forged.signature = format!("t={},v1={}", forged.timestamp, "0".repeat(64));
    println!("Try it yourself (these signatures stay valid for an hour):\n");
    println!(
        "  # {} again: replayed from the record (Idempotent-Replayed: true)",
        first.id
    );
    println!("  {}\n", first.signed().curl(a.gateway));
    println!("  # a new event: forwarded once, however often you send it");
    println!("  {}\n", next.signed().curl(a.gateway));
    println!("  # the same event with a forged signature: 401, nothing stored or forwarded");
    println!("  {}\n", forged.curl(a.gateway));
    println!("  # what the consumer has seen, per event");
    println!("  curl -s http://{}/\n", a.consumer);
    println!(
        "  # the stored record of {}, through the admin API",
        first.id
    );
    println!(
        "  curl -s -H 'Authorization: Bearer {}' http://{}/admin/routes/{ROUTE}/keys/{}\n",
        shown.token, a.admin, first.id
    );
    println!("  # the gateway's counters");
    println!(
        "  curl -s http://{}/metrics | grep '^hookgate_requests_total'\n",
        a.admin
    );
    println!(
        "The operator console: http://{}/ui (log in with the token {}).\n",
        a.admin, shown.token
    );
}

fn expect(holds: bool, what: &str, answer: &Answer) -> Result<(), DemoError> {
    if holds {
        Ok(())
    } else {
        Err(DemoError::Broken(format!(
            "{what}: {} {}",
            answer.status, answer.body
        )))
    }
}

/// One event as Stripe would send it.
struct Event {
    id: &'static str,
    body: String,
}

impl Event {
    fn new(id: &'static str, kind: &str) -> Self {
        Self {
            id,
            body: format!(r#"{{"id":"{id}","object":"event","type":"{kind}"}}"#),
        }
    }

    /// Signed now, as Stripe signs: `t=<unix>,v1=hex(HMAC-SHA256("t.body"))`.
    fn signed(&self) -> Delivery {
        let timestamp = hookgate::clock::wall()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).expect("any key length");
        mac.update(format!("{timestamp}.{}", self.body).as_bytes());
        Delivery {
            body: self.body.clone(),
            timestamp,
            signature: format!(
                "t={timestamp},v1={}",
                hex::encode(mac.finalize().into_bytes())
            ),
        }
    }
}

struct Delivery {
    body: String,
    timestamp: u64,
    signature: String,
}

impl Delivery {
    /// A `curl` line that sends this delivery, to paste into a shell.
    fn curl(&self, gateway: SocketAddr) -> String {
        format!(
            "curl -si http://{gateway}{ROUTE_PATH} -H 'Content-Type: application/json' -H 'Stripe-Signature: {}' -d '{}'",
            self.signature, self.body
        )
    }
}

/// What the sender got back.
struct Answer {
    status: StatusCode,
    replayed: bool,
    retry_after: Option<String>,
    body: String,
}

impl Answer {
    fn describe(&self) -> String {
        let mut text = format!(
            "{} {}",
            self.status.as_u16(),
            self.status.canonical_reason().unwrap_or_default()
        );
        if self.replayed {
            text.push_str(", Idempotent-Replayed: true");
        } else if self.status.is_success() {
            text.push_str(", forwarded");
        }
        if let Some(after) = &self.retry_after {
            let _ = write!(text, ", Retry-After: {after} (still being processed)");
        }
        if self.status.is_success() {
            let _ = write!(text, " {}", self.body.trim());
        }
        text
    }
}

/// The demo's sender: plain HTTP/1.1 to the gateway.
struct Sender {
    client: Client<HttpConnector, Full<Bytes>>,
    url: String,
}

impl Sender {
    fn new(gateway: SocketAddr) -> Self {
        Self {
            client: Client::builder(TokioExecutor::new()).build_http(),
            url: format!("http://{gateway}{ROUTE_PATH}"),
        }
    }

    async fn deliver(&self, delivery: &Delivery) -> Result<Answer, DemoError> {
        let failed = |error: &dyn std::fmt::Display| DemoError::Send(error.to_string());
        let request = Request::post(&self.url)
            .header(header::CONTENT_TYPE, "application/json")
            .header("stripe-signature", &delivery.signature)
            .body(Full::new(Bytes::from(delivery.body.clone())))
            .map_err(|error| failed(&error))?;
        let response = self
            .client
            .request(request)
            .await
            .map_err(|error| failed(&error))?;
        let status = response.status();
        let text = |name| {
            response
                .headers()
                .get(name)
                .and_then(|value: &http::HeaderValue| value.to_str().ok())
                .map(str::to_owned)
        };
        let replayed = text(IDEMPOTENT_REPLAYED).as_deref() == Some("true");
        let retry_after = text(header::RETRY_AFTER);
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|error| failed(&error))?
            .to_bytes();
        Ok(Answer {
            status,
            replayed,
            retry_after,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    }
}

/// The legacy endpoint: slow, and it counts every event it processes by
/// the idempotency key the gateway injects. `GET /` shows the counts.
#[derive(Default)]
struct Consumer {
    seen: Mutex<BTreeMap<String, u32>>,
}

impl Consumer {
    fn seen(&self) -> BTreeMap<String, u32> {
        self.seen.lock().expect("not poisoned").clone()
    }

    async fn serve(self: Arc<Self>, listener: TcpListener) {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let consumer = Arc::clone(&self);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let consumer = Arc::clone(&consumer);
                    async move { Ok::<_, std::convert::Infallible>(consumer.handle(request).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    }

    async fn handle(&self, request: Request<Incoming>) -> Response<Full<Bytes>> {
        if request.method() == Method::GET {
            let seen = serde_json::to_string_pretty(&self.seen()).unwrap_or_default();
            return json(StatusCode::OK, format!("{seen}\n"));
        }
        let key = request
            .headers()
            .get("idempotency-key")
            .and_then(|value| value.to_str().ok())
            .unwrap_or("(no key)")
            .to_owned();
        tokio::time::sleep(CONSUMER_TAKES).await;
        let order = {
            let mut seen = self.seen.lock().expect("not poisoned");
            *seen.entry(key.clone()).or_default() += 1;
            seen.values().sum::<u32>()
        };
        let body = serde_json::json!({ "order": format!("ord_{order}"), "event": key });
        json(StatusCode::CREATED, body.to_string())
    }
}

fn json(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}
