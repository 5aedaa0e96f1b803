//! Real components for the integration tests: a `redis-server` on a free
//! port that a test can kill and restart, a recording upstream that counts
//! side effects per idempotency key, and the gateway itself on 127.0.0.1:0.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hmac::{Hmac, Mac};
use hookgate::config::Config;
use hookgate::pipeline::Gateway;
use hookgate::App;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use sha2::Sha256;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

pub const SECRET: &str = "test-secret-0123456789";

/// Poll `check` until it holds or `within` passes.
pub async fn eventually(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    check()
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

// ---------------------------------------------------------------- redis

/// A private `redis-server` on a free port, killed on drop.
pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
    /// Extra `redis-server` arguments (e.g. an ACL user).
    args: Vec<String>,
    /// URL the readiness check connects with.
    probe_url: Option<String>,
}

impl RedisServer {
    /// Start one, or `None` when redis-server is not installed. Under
    /// `CI=true` a missing redis-server fails the test instead.
    pub async fn start() -> Option<RedisServer> {
        Self::start_with(&[], None).await
    }

    /// Start one with extra arguments (`{port}` is replaced); `probe_url`
    /// (with `{port}`) is what the readiness check connects with, or `"tcp"`
    /// to only wait for the port.
    pub async fn start_with(args: &[&str], probe_url: Option<&str>) -> Option<RedisServer> {
        Self::start_check()?;
        let port = free_port();
        let mut server = RedisServer {
            port,
            child: None,
            args: args
                .iter()
                .map(|a| a.replace("{port}", &port.to_string()))
                .collect(),
            probe_url: probe_url.map(|url| url.replace("{port}", &port.to_string())),
        };
        server.restart().await;
        Some(server)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// `Some` when redis-server (and redis-cli) are installed; under
    /// `CI=true` their absence fails the test instead of skipping it.
    pub fn start_check() -> Option<()> {
        let found = ["redis-server", "redis-cli"]
            .iter()
            .all(|bin| Command::new(bin).arg("--version").output().is_ok());
        if !found {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "redis-server is not installed, and CI=true forbids skipping"
            );
            eprintln!("skipping: redis-server not installed");
            return None;
        }
        Some(())
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// (Re)start on the same port and wait until it answers.
    pub async fn restart(&mut self) {
        self.kill();
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        self.child = Some(child);
        if self.probe_url.as_deref() == Some("tcp") {
            // TLS-only servers: the port accepting is as far as a plain probe gets.
            let deadline = Instant::now() + Duration::from_secs(10);
            while tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .is_err()
            {
                assert!(Instant::now() < deadline, "redis-server did not come up");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            return;
        }
        let client =
            redis::Client::open(self.probe_url.clone().unwrap_or_else(|| self.url())).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(mut conn) = client.get_multiplexed_async_connection().await {
                if redis::cmd("PING")
                    .query_async::<String>(&mut conn)
                    .await
                    .is_ok()
                {
                    return;
                }
            }
            assert!(Instant::now() < deadline, "redis-server did not come up");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

// ---------------------------------------------------------------- upstream

/// One request as the upstream saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub uri: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Which call this was for its idempotency key (1 = first).
    pub nth: usize,
}

impl Seen {
    pub fn key(&self) -> String {
        self.headers
            .get("idempotency-key")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    }
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
    seen: Arc<Mutex<Vec<Seen>>>,
    _stop: oneshot::Sender<()>,
}

impl Upstream {
    pub async fn start() -> Upstream {
        Self::with(ok_plan).await
    }

    pub async fn with(behaviour: impl Fn(&Seen) -> Plan + Send + Sync + 'static) -> Upstream {
        Self::serve(None, behaviour).await
    }

    /// An upstream behind TLS with `config`'s certificate.
    pub async fn tls(config: Arc<rustls::ServerConfig>) -> Upstream {
        Self::serve(Some(config), ok_plan).await
    }

    async fn serve(
        tls: Option<Arc<rustls::ServerConfig>>,
        behaviour: impl Fn(&Seen) -> Plan + Send + Sync + 'static,
    ) -> Upstream {
        let behaviour: Arc<Behaviour> = Arc::new(behaviour);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let (stop, mut stopped) = oneshot::channel::<()>();
        let log = Arc::clone(&seen);
        tokio::spawn(async move {
            loop {
                let (stream, _) = tokio::select! {
                    accepted = listener.accept() => accepted.unwrap(),
                    _ = &mut stopped => return,
                };
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
                            let seen = {
                                let mut log = log.lock().unwrap();
                                let mut seen = Seen {
                                    method: parts.method.to_string(),
                                    uri: parts.uri.to_string(),
                                    headers: parts.headers,
                                    body,
                                    nth: 0,
                                };
                                let key = seen.key();
                                seen.nth = 1 + log.iter().filter(|s| s.key() == key).count();
                                log.push(seen.clone());
                                seen
                            };
                            let plan = behaviour(&seen);
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
            _stop: stop,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// How many times the upstream processed `key`.
    pub fn count(&self, key: &str) -> usize {
        self.seen().iter().filter(|s| s.key() == key).count()
    }

    pub fn total(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// Calls per key.
    pub fn counts(&self) -> HashMap<String, usize> {
        let mut counts = HashMap::new();
        for seen in self.seen() {
            *counts.entry(seen.key()).or_default() += 1;
        }
        counts
    }
}

// ---------------------------------------------------------------- gateway

/// Store section of a test config.
#[derive(Clone)]
pub enum Backend {
    Memory,
    /// The SQLite file's path.
    Embedded(std::path::PathBuf),
    Redis(String),
}

impl Backend {
    pub fn toml(&self) -> String {
        match self {
            Backend::Memory => "backend = \"memory\"".into(),
            Backend::Embedded(path) => {
                format!("backend = \"embedded\"\npath = \"{}\"", path.display())
            }
            Backend::Redis(url) => format!("backend = \"redis\"\nurl = \"{url}\""),
        }
    }
}

/// A config with one signed route `/hook` (key `json:/id`) to `upstream`,
/// plus `route_extra` lines in that route and `store_extra` in `[store]`.
pub fn config_text(
    upstream: &str,
    backend: &Backend,
    route_extra: &str,
    store_extra: &str,
) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
max_body_bytes = 4096
shutdown_grace = "2s"

[store]
{backend}
timeout = "300ms"
key_prefix = "t{prefix}:"
{store_extra}

[[routes]]
name = "hook"
path = "/hook"
upstream = "{upstream}"
key = ["json:/id"]
upstream_timeout = "5s"
{route_extra}

[routes.verify]
scheme = "hmac"
secrets = ["old-secret", "${{TEST_SECRET}}"]
header = "X-Signature"
prefix = "sha256="
"#,
        backend = backend.toml(),
        prefix = rand::random::<u32>(),
    )
}

pub fn parse_config(text: &str) -> Config {
    Config::parse(text, Path::new("test.toml"), &|name| {
        (name == "TEST_SECRET").then(|| SECRET.to_owned())
    })
    .unwrap_or_else(|e| panic!("test config invalid: {e}\n{text}"))
}

/// The gateway, in-process, on a free port (and its admin listener on
/// another, when the config has `[admin]`).
pub struct TestGateway {
    pub addr: SocketAddr,
    pub admin_addr: Option<SocketAddr>,
    pub gateway: Arc<Gateway>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl TestGateway {
    pub async fn start(text: &str) -> TestGateway {
        let config = parse_config(text);
        let app = App::new(&config).await.expect("store");
        let gateway = Arc::clone(&app.gateway);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let admin_listener = match config.fixed.admin {
            Some(_) => Some(TcpListener::bind("127.0.0.1:0").await.unwrap()),
            None => None,
        };
        let admin_addr = admin_listener.as_ref().map(|l| l.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            app.serve(listener, admin_listener, async {
                let _ = stopped.await;
            })
            .await;
        });
        TestGateway {
            addr,
            admin_addr,
            gateway,
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!(
            "http://{}{path}",
            self.admin_addr.expect("config has [admin]")
        )
    }

    /// Trigger a graceful shutdown and wait until `serve` returns.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.unwrap();
        }
    }
}

// ---------------------------------------------------------------- client

pub fn sign(body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// A response as a sender sees it.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }

    /// The `error.code` of a hookgate error body.
    pub fn code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    pub fn replayed(&self) -> bool {
        self.headers
            .get("idempotent-replayed")
            .is_some_and(|v| v == "true")
    }
}

#[derive(Clone)]
pub struct Sender {
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Default for Sender {
    fn default() -> Self {
        Self::new()
    }
}

impl Sender {
    pub fn new() -> Sender {
        Sender {
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    pub fn h2c() -> Sender {
        Sender {
            client: Client::builder(TokioExecutor::new())
                .http2_only(true)
                .build_http(),
        }
    }

    pub async fn send(&self, request: Request<Full<Bytes>>) -> Answer {
        self.try_send(request).await.expect("request failed")
    }

    /// Send, or the transport error.
    pub async fn try_send(&self, request: Request<Full<Bytes>>) -> Result<Answer, String> {
        let response = self
            .client
            .request(request)
            .await
            .map_err(|e| e.to_string())?;
        let (parts, body) = response.into_parts();
        Ok(Answer {
            status: parts.status,
            headers: parts.headers,
            body: body.collect().await.map_err(|e| e.to_string())?.to_bytes(),
        })
    }

    /// POST a correctly signed `body`.
    pub async fn deliver(&self, url: &str, body: &str) -> Answer {
        self.send(signed(url, body)).await
    }

    /// Deliver like a webhook sender: retry on 409/503 until an answer sticks.
    pub async fn deliver_until_settled(&self, url: &str, body: &str) -> Answer {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let answer = self.deliver(url, body).await;
            let busy = matches!(answer.status.as_u16(), 409 | 503);
            if !busy || Instant::now() > deadline {
                return answer;
            }
            tokio::time::sleep(Duration::from_millis(10 + rand::random::<u64>() % 20)).await;
        }
    }
}

pub fn signed(url: &str, body: &str) -> Request<Full<Bytes>> {
    Request::post(url)
        .header("content-type", "application/json")
        .header("x-signature", sign(body.as_bytes()))
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap()
}

pub fn event(id: &str) -> String {
    format!(r#"{{"id":"{id}","type":"order.paid","amount":4200}}"#)
}

// ---------------------------------------------------------------- process

/// The real `hookgate` binary, running `run` on a config file.
pub struct GatewayProcess {
    pub child: std::process::Child,
    pub port: u16,
    /// stderr goes to a file: a pipe nobody drains would block the gateway.
    log: tempfile::NamedTempFile,
}

impl GatewayProcess {
    /// Start `hookgate run` on `config` and wait until it accepts connections
    /// on `port`.
    pub async fn start(config: &Path, port: u16) -> GatewayProcess {
        let log = tempfile::NamedTempFile::new().unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_hookgate"))
            .args(["run", "--log-format", "json", "--config"])
            .arg(config)
            .env("TEST_SECRET", SECRET)
            .stderr(log.reopen().unwrap())
            .spawn()
            .expect("spawn hookgate");
        let mut process = GatewayProcess { child, port, log };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = process.child.try_wait() {
                panic!("hookgate exited early with {status}: {}", process.logs());
            }
            assert!(
                Instant::now() < deadline,
                "hookgate did not start listening"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        process
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Send `signal` (e.g. "TERM", "KILL") and wait for the exit status.
    pub fn stop(&mut self, signal: &str) -> std::process::ExitStatus {
        Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        self.child.wait().unwrap()
    }

    /// Everything it logged so far.
    pub fn logs(&mut self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A config file in `dir` serving on a free port; returns (path, port).
pub fn write_config(dir: &Path, text: &str) -> (std::path::PathBuf, u16) {
    let port = free_port();
    let path = dir.join("gateway.toml");
    std::fs::write(
        &path,
        text.replace("127.0.0.1:0", &format!("127.0.0.1:{port}")),
    )
    .unwrap();
    (path, port)
}

// ---------------------------------------------------------------- TLS

/// A test CA and certificates it signs, as PEM files in a temp dir.
pub struct Pki {
    pub dir: tempfile::TempDir,
    ca: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
}

impl Pki {
    pub fn new(name: &str) -> Pki {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("{name} test CA"));
        let ca = rcgen::CertifiedIssuer::self_signed(params, rcgen::KeyPair::generate().unwrap())
            .unwrap();
        let pki = Pki {
            dir: tempfile::tempdir().unwrap(),
            ca,
        };
        std::fs::write(pki.ca_path(), pki.ca.pem()).unwrap();
        pki
    }

    pub fn ca_path(&self) -> std::path::PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// A certificate for localhost and 127.0.0.1: (cert path, key path).
    pub fn leaf(&self, name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params =
            rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                .unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        let (cert_path, key_path) = (
            self.dir.path().join(format!("{name}.crt")),
            self.dir.path().join(format!("{name}.key")),
        );
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        (cert_path, key_path)
    }

    pub fn server_config(&self, name: &str) -> Arc<rustls::ServerConfig> {
        let (cert, key) = self.leaf(name);
        hookgate::tls::server_config(&cert, &key).unwrap()
    }

    /// A client trusting only this CA, offering only `version` in ALPN.
    pub fn sender(&self, version: http::Version) -> HttpsSender {
        let roots = hookgate::tls::load_certs(&self.ca_path()).unwrap();
        let mut store = rustls::RootCertStore::empty();
        for root in roots {
            store.add(root).unwrap();
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(store)
        .with_no_client_auth();
        let h2 = version == http::Version::HTTP_2;
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(config)
            .https_only();
        let connector = if h2 {
            connector.enable_http2().build()
        } else {
            connector.enable_http1().build()
        };
        let mut builder = Client::builder(TokioExecutor::new());
        builder.http2_only(h2);
        HttpsSender {
            client: builder.build(connector),
        }
    }
}

pub struct HttpsSender {
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl HttpsSender {
    /// Send, or the connection/handshake error as text.
    pub async fn send(
        &self,
        request: Request<Full<Bytes>>,
    ) -> Result<(Answer, http::Version), String> {
        let response = self
            .client
            .request(request)
            .await
            .map_err(|e| format!("{e:?}"))?;
        let version = response.version();
        let (parts, body) = response.into_parts();
        let answer = Answer {
            status: parts.status,
            headers: parts.headers,
            body: body.collect().await.map_err(|e| e.to_string())?.to_bytes(),
        };
        Ok((answer, version))
    }
}

// ---------------------------------------------------------------- cluster

/// A real Redis Cluster: 3 masters + 3 replicas on free ports, joined with
/// `redis-cli --cluster create`. Each server is tied to this test process by
/// a watchdog shell, so none outlives the test binary.
pub struct RedisCluster {
    pub ports: Vec<u16>,
    _dir: tempfile::TempDir,
}

impl RedisCluster {
    /// Start one, or `None` when redis-server is missing (fails under CI=true).
    pub async fn start() -> Option<RedisCluster> {
        RedisServer::start_check()?;
        let dir = tempfile::tempdir().unwrap();
        let ports: Vec<u16> = (0..6).map(|_| free_port()).collect();
        for port in &ports {
            spawn_cluster_node(dir.path(), *port);
        }
        for port in &ports {
            wait_for_ping(*port).await;
        }
        let nodes: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let created = tokio::task::spawn_blocking(move || {
            Command::new("redis-cli")
                .args(["--cluster", "create"])
                .args(&nodes)
                .args(["--cluster-replicas", "1", "--cluster-yes"])
                .output()
                .expect("redis-cli")
        })
        .await
        .unwrap();
        assert!(
            created.status.success(),
            "cluster create: {}",
            String::from_utf8_lossy(&created.stdout)
        );
        let cluster = RedisCluster { ports, _dir: dir };
        cluster.wait_healthy().await;
        Some(cluster)
    }

    pub fn nodes(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect()
    }

    /// `nodes = [...]` for a `[store]` section.
    pub fn toml(&self) -> String {
        let nodes: Vec<String> = self.nodes().iter().map(|n| format!("\"{n}\"")).collect();
        format!(
            "backend = \"redis-cluster\"\nnodes = [{}]",
            nodes.join(", ")
        )
    }

    async fn command(port: u16, args: &[&str]) -> Option<redis::Value> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).ok()?;
        let mut conn = client.get_multiplexed_async_connection().await.ok()?;
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        cmd.query_async(&mut conn).await.ok()
    }

    async fn text(port: u16, args: &[&str]) -> String {
        match Self::command(port, args).await {
            Some(redis::Value::BulkString(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
            Some(redis::Value::VerbatimString { text, .. }) => text,
            Some(redis::Value::SimpleString(text)) => text,
            _ => String::new(),
        }
    }

    /// Until every live node reports `cluster_state:ok` and agrees on 3 masters.
    pub async fn wait_healthy(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut ok = true;
            for port in &self.ports {
                let info = Self::text(*port, &["CLUSTER", "INFO"]).await;
                if info.is_empty() {
                    continue; // a killed node
                }
                ok &= info.contains("cluster_state:ok");
            }
            if ok {
                return;
            }
            assert!(Instant::now() < deadline, "cluster did not become healthy");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The port of the master currently serving `key`.
    pub async fn master_of(&self, key: &str) -> u16 {
        for port in &self.ports {
            let slot = match Self::command(*port, &["CLUSTER", "KEYSLOT", key]).await {
                Some(redis::Value::Int(slot)) => slot,
                _ => continue,
            };
            let nodes = Self::text(*port, &["CLUSTER", "NODES"]).await;
            for line in nodes.lines() {
                let fields: Vec<&str> = line.split(' ').collect();
                if fields.len() < 9 || !fields[2].contains("master") || fields[2].contains("fail") {
                    continue;
                }
                let serves = fields[8..].iter().any(|range| match range.split_once('-') {
                    Some((a, b)) => {
                        (a.parse().unwrap_or(-1)..=b.parse().unwrap_or(-2)).contains(&slot)
                    }
                    None => range.parse() == Ok(slot),
                });
                if serves {
                    let addr = fields[1].split('@').next().unwrap();
                    return addr.rsplit(':').next().unwrap().parse().unwrap();
                }
            }
        }
        panic!("no master serves {key}");
    }

    /// Start the node on `port` again (it rejoins with its saved identity,
    /// as a replica of whoever took over its slots).
    pub async fn restart(&self, port: u16) {
        spawn_cluster_node(self._dir.path(), port);
        wait_for_ping(port).await;
    }

    /// SIGKILL the server on `port`.
    pub async fn kill(&self, port: u16) {
        let info = Self::text(port, &["INFO", "server"]).await;
        let pid = info
            .lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .expect("process_id")
            .trim()
            .to_owned();
        Command::new("kill").args(["-9", &pid]).status().unwrap();
    }
}

/// One cluster node, under a watchdog shell that kills it when this test
/// process is gone.
fn spawn_cluster_node(dir: &std::path::Path, port: u16) {
    let script = format!(
        "redis-server --port {port} --bind 127.0.0.1 --cluster-enabled yes \
         --cluster-config-file nodes-{port}.conf --cluster-node-timeout 1000 \
         --save '' --appendonly no --protected-mode no --dir {dir} --logfile redis-{port}.log & \
         r=$!; while kill -0 {parent} 2>/dev/null && kill -0 $r 2>/dev/null; do sleep 0.2; done; kill -9 $r",
        dir = dir.display(),
        parent = std::process::id(),
    );
    let mut watchdog = Command::new("sh")
        .args(["-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn redis-server");
    std::thread::spawn(move || watchdog.wait());
}

async fn wait_for_ping(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while RedisCluster::text(port, &["PING"]).await != "PONG" {
        assert!(
            Instant::now() < deadline,
            "redis-server on {port} did not come up"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One cluster shared by the tests that only need a healthy one (the
/// failover tests start their own).
pub async fn shared_cluster() -> Option<&'static RedisCluster> {
    static SHARED: tokio::sync::OnceCell<Option<RedisCluster>> = tokio::sync::OnceCell::const_new();
    SHARED.get_or_init(RedisCluster::start).await.as_ref()
}

// ---------------------------------------------------------------- metrics

/// The Prometheus text an admin listener serves at `url`.
pub async fn scrape(url: &str) -> String {
    let answer = Sender::new()
        .send(Request::get(url).body(Full::new(Bytes::new())).unwrap())
        .await;
    String::from_utf8(answer.body.to_vec()).unwrap()
}

/// The value of one sample of `name` whose labels include all of `labels`.
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter(|line| {
            line.starts_with(&format!("{name}{{")) || line.starts_with(&format!("{name} "))
        })
        .find(|line| {
            labels
                .iter()
                .all(|(k, v)| line.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
}
