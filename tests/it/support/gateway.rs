//! The gateway under test: in-process on 127.0.0.1:0 ([`TestGateway`]), or the
//! real binary on a config file ([`GatewayProcess`]), and the test config.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use hookgate::config::Config;
use hookgate::store::Record;
use hookgate::store::Store;
use hookgate::App;
use hookgate::Reloader;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use super::{eventually, free_port, SECRET};

/// Store section of a test config.
#[derive(Clone)]
pub enum Backend {
    Memory,
    /// The SQLite file's path.
    Embedded(std::path::PathBuf),
    Redis(String),
    /// A PostgreSQL URL (8 connections per gateway).
    Postgres(String),
    /// A `[store]` section as [`super::RedisCluster::toml`] writes it.
    RedisCluster(String),
    /// A `[store]` section as [`super::RedisSentinels::toml`] writes it.
    RedisSentinel(String),
}

impl Backend {
    pub fn toml(&self) -> String {
        match self {
            Backend::Memory => "backend = \"memory\"".into(),
            Backend::Embedded(path) => {
                format!("backend = \"embedded\"\npath = \"{}\"", path.display())
            }
            Backend::Redis(url) => format!("backend = \"redis\"\nurl = \"{url}\""),
            Backend::Postgres(url) => {
                format!("backend = \"postgres\"\nurl = \"{url}\"\npool_size = 8")
            }
            Backend::RedisCluster(toml) | Backend::RedisSentinel(toml) => toml.clone(),
        }
    }
}

/// A config with one signed route `/hook` (key `json:/id`) to `upstream`,
/// plus `route_extra` lines in that route and `store_extra` in `[store]`
/// (which may set its own `timeout`, 300 ms otherwise).
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
{timeout}key_prefix = "t{prefix}:"
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
secrets = ["old-secret-0123456789", "${{TEST_SECRET}}"]
header = "X-Signature"
prefix = "sha256="
"#,
        backend = backend.toml(),
        timeout = if store_extra
            .lines()
            .any(|l| l.trim_start().starts_with("timeout"))
        {
            ""
        } else {
            "timeout = \"300ms\"\n"
        },
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
    /// The gateway's store, to look at what it holds.
    pub store: Arc<Store>,
    /// Applies a reloaded config, as SIGHUP does.
    pub reloader: Arc<Reloader>,
    /// The gateway's clock: a test moves it on where time is the subject.
    pub clock: hookgate::clock::Clock,
    /// `hookgate_worker_passes_total`: the workers' passes over the queues.
    passes: prometheus::IntCounter,
    /// `hookgate_parked_connections`.
    parked: prometheus::IntGauge,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl TestGateway {
    pub async fn start(text: &str) -> TestGateway {
        Self::start_on(text, "127.0.0.1:0").await
    }

    /// The gateway with its public listener on `listen` (e.g. `[::1]:0`).
    pub async fn start_on(text: &str, listen: &str) -> TestGateway {
        let config = parse_config(text);
        let clock = super::clock();
        let app = App::new(&config, clock.clone()).await.expect("store");
        let store = Arc::clone(&app.parts.store);
        let passes = app.parts.metrics.worker_passes.clone();
        let parked = app.parts.metrics.parked_connections.clone();
        let reloader = app.reloader();
        let listener = TcpListener::bind(listen).await.unwrap();
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
            store,
            reloader,
            clock,
            passes,
            parked,
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Wait until the workers have made `n` more passes over every queue
    /// (`hookgate_worker_passes_total`): a check made then sees what those
    /// passes did — a second delivery, a call a pause should have held.
    /// The gateway's own count, not a guess at how long it takes.
    pub async fn worker_passes(&self, n: u64) {
        let from = self.passes.get();
        let passed = eventually(Duration::from_secs(15), || {
            std::future::ready(self.passes.get() >= from + n)
        })
        .await;
        let made = self.passes.get() - from;
        assert!(passed, "the workers made {made} passes, not {n}");
    }

    /// Wait until `n` keep-alive connections are parked
    /// (`hookgate_parked_connections`): idle, their state dropped.
    pub async fn parked_connections(&self, n: i64) {
        let parked = eventually(Duration::from_secs(10), || {
            std::future::ready(self.parked.get() == n)
        })
        .await;
        assert!(parked, "{} connections parked, not {n}", self.parked.get());
    }

    /// `POST /admin/routes/{route}/{action}` (pause, resume) with the test
    /// token and `query`; the admin API's answer.
    pub async fn control(&self, route: &str, action: &str, query: &str) -> super::Answer {
        let url = self.admin_url(&format!("/admin/routes/{route}/{action}?{query}"));
        super::request(http::Method::POST, &url, Some(super::ADMIN_TOKEN)).await
    }

    /// What the store holds for `key` in `scope`.
    pub async fn record(&self, scope: &str, key: &str) -> Option<Record> {
        let store = &self.store;
        store.records().get(&store.key(scope, key)).await.unwrap()
    }

    /// Whether the replay cache serves (its invalidation feed subscribed)
    /// within 5 s.
    pub async fn replay_cache_live(&self) -> bool {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while tokio::time::Instant::now() < deadline {
            let cache = self.store.replay_cache();
            if cache.is_some_and(|cache| cache.is_live()) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
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
        Self::start_binary(Path::new(env!("CARGO_BIN_EXE_hookgate")), config, port).await
    }

    /// The same with another build of hookgate (an earlier release).
    pub async fn start_binary(binary: &Path, config: &Path, port: u16) -> GatewayProcess {
        let log = tempfile::NamedTempFile::new().unwrap();
        let child = Command::new(binary)
            .args(["run", "--log-format", "json", "--config"])
            .arg(config)
            .env("TEST_SECRET", SECRET)
            .stderr(log.reopen().unwrap())
            .spawn()
            .expect("spawn hookgate");
        let mut process = GatewayProcess { child, port, log };
        let listening = eventually(Duration::from_secs(10), || {
            if let Ok(Some(status)) = process.child.try_wait() {
                panic!("hookgate exited early with {status}: {}", process.logs());
            }
            std::future::ready(std::net::TcpStream::connect(("127.0.0.1", port)).is_ok())
        });
        assert!(
            listening.await,
            "hookgate did not start listening: {}",
            process.logs()
        );
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
