//! A real Redis primary with two replicas watched by three real sentinels
//! (`redis-sentinel`, or `redis-server --sentinel` where Debian's
//! `redis-sentinel` package is not installed: the same program), on free
//! ports. Each process is tied to this test process by a watchdog shell,
//! so none outlives the test binary.

use std::process::{Command, Stdio};
use std::time::Duration;

use super::redis::{command_on, kill_server_on, text_on};
use super::{eventually, free_port, RedisServer};

/// The name the sentinels monitor the primary under.
pub const MASTER: &str = "hookgate-primary";

pub struct RedisSentinels {
    /// The data servers: the first starts as the primary.
    pub servers: Vec<u16>,
    pub sentinels: Vec<u16>,
    /// How every server and sentinel is reached.
    reach: Reach,
    dir: tempfile::TempDir,
}

/// Plain, or TLS only (`--port 0`), every server and sentinel with a
/// certificate of one private CA, replication and the sentinels' links
/// over TLS too.
#[derive(Clone, Default)]
struct Reach {
    /// (certificate, key, CA) files.
    tls: Option<(String, String, String)>,
}

impl Reach {
    fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        }
    }

    fn client(&self, port: u16) -> ::redis::Client {
        let url = format!("{}://127.0.0.1:{port}", self.scheme());
        match &self.tls {
            None => ::redis::Client::open(url).unwrap(),
            Some((_, _, ca)) => {
                let roots = ::redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(std::fs::read(ca).unwrap()),
                };
                ::redis::Client::build_with_tls(url, roots).unwrap()
            }
        }
    }

    /// A server's listening arguments.
    fn server_args(&self, port: u16) -> String {
        match &self.tls {
            None => format!("--port {port}"),
            Some((cert, key, ca)) => format!(
                "--port 0 --tls-port {port} --tls-cert-file {cert} --tls-key-file {key} \
                 --tls-ca-cert-file {ca} --tls-auth-clients no --tls-replication yes"
            ),
        }
    }

    /// A sentinel's listening lines.
    fn sentinel_lines(&self, port: u16) -> String {
        match &self.tls {
            None => format!("port {port}\n"),
            Some((cert, key, ca)) => format!(
                "port 0\ntls-port {port}\ntls-cert-file {cert}\ntls-key-file {key}\n\
                 tls-ca-cert-file {ca}\ntls-auth-clients no\ntls-replication yes\n"
            ),
        }
    }
}

impl RedisSentinels {
    /// Start one and wait until every sentinel knows both replicas and
    /// both other sentinels (a sentinel that knows no replica cannot fail
    /// over); `None` when redis-server is missing (fails under CI=true).
    pub async fn start() -> Option<RedisSentinels> {
        Self::start_reached(Reach::default()).await
    }

    /// [`RedisSentinels::start`], every server and sentinel on TLS only,
    /// with certificates of `pki`'s CA.
    pub async fn start_tls(pki: &super::Pki) -> Option<RedisSentinels> {
        let (cert, key) = pki.leaf("redis");
        let path = |p: std::path::PathBuf| p.display().to_string();
        let tls = Some((path(cert), path(key), path(pki.ca_path())));
        Self::start_reached(Reach { tls }).await
    }

    async fn start_reached(reach: Reach) -> Option<RedisSentinels> {
        RedisServer::start_check()?;
        let dir = tempfile::tempdir().unwrap();
        let servers: Vec<u16> = (0..3).map(|_| free_port()).collect();
        for (i, port) in servers.iter().enumerate() {
            let replica_of = match i {
                0 => String::new(),
                _ => format!("--replicaof 127.0.0.1 {}", servers[0]),
            };
            watched(
                dir.path(),
                &format!(
                    "redis-server {listen} --bind 127.0.0.1 --save '' --appendonly no \
                     --protected-mode no --dir {dir} --logfile redis-{port}.log {replica_of}",
                    listen = reach.server_args(*port),
                    dir = dir.path().display()
                ),
            );
        }
        // The sentinels learn the replicas from the primary's `INFO`, sent
        // at once and then every 10 s: start them once the replicas are in.
        let synced = eventually(Duration::from_secs(20), || async {
            let mut synced = true;
            for port in &servers[1..] {
                synced &= text_on(reach.client(*port), &["INFO", "replication"])
                    .await
                    .contains("master_link_status:up");
            }
            synced
        });
        assert!(synced.await, "the replicas did not sync with the primary");
        let sentinels: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let program = match Command::new("redis-sentinel").arg("--version").output() {
            Ok(_) => "redis-sentinel",
            Err(_) => "redis-server",
        };
        for port in &sentinels {
            let conf = dir.path().join(format!("sentinel-{port}.conf"));
            std::fs::write(
                &conf,
                format!(
                    "{listen}bind 127.0.0.1\nprotected-mode no\ndir {dir}\n\
                     logfile sentinel-{port}.log\n\
                     sentinel monitor {MASTER} 127.0.0.1 {primary} 2\n\
                     sentinel down-after-milliseconds {MASTER} 1000\n\
                     sentinel failover-timeout {MASTER} 5000\n\
                     sentinel parallel-syncs {MASTER} 2\n",
                    listen = reach.sentinel_lines(*port),
                    dir = dir.path().display(),
                    primary = servers[0],
                ),
            )
            .unwrap();
            let sentinel_flag = if program == "redis-server" {
                "--sentinel"
            } else {
                ""
            };
            watched(
                dir.path(),
                &format!("{program} {} {sentinel_flag}", conf.display()),
            );
        }
        let set = RedisSentinels {
            servers,
            sentinels,
            reach,
            dir,
        };
        set.wait_watched().await;
        Some(set)
    }

    /// `[store]` keys for the set, the primary found through the sentinels.
    pub fn toml(&self) -> String {
        let sentinels: Vec<String> = (self.sentinels.iter())
            .map(|port| format!("\"{}://127.0.0.1:{port}\"", self.reach.scheme()))
            .collect();
        format!(
            "backend = \"redis-sentinel\"\nsentinels = [{}]\nmaster = \"{MASTER}\"",
            sentinels.join(", ")
        )
    }

    /// `(sentinels, master)` as `StoreSettings` takes them.
    pub fn store(&self) -> (Vec<String>, String) {
        let sentinels = (self.sentinels.iter())
            .map(|port| format!("{}://127.0.0.1:{port}", self.reach.scheme()))
            .collect();
        (sentinels, MASTER.to_owned())
    }

    /// The port of the server the sentinels name as primary now.
    pub async fn primary(&self) -> Option<u16> {
        for port in &self.sentinels {
            let ask = ["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER];
            let reply = command_on(self.reach.client(*port), &ask).await;
            if let Some(::redis::Value::Array(parts)) = reply {
                if let Some(::redis::Value::BulkString(port)) = parts.get(1) {
                    return String::from_utf8_lossy(port).parse().ok();
                }
            }
        }
        None
    }

    /// SIGKILL the data server on `port`.
    pub async fn kill(&self, port: u16) {
        kill_server_on(self.reach.client(port)).await;
    }

    /// Whether `port` serves as a primary now (`ROLE`).
    pub async fn is_primary(&self, port: u16) -> bool {
        matches!(
            command_on(self.reach.client(port), &["ROLE"]).await,
            Some(::redis::Value::Array(role))
                if matches!(role.first(), Some(::redis::Value::BulkString(r)) if r == b"master")
        )
    }

    /// Keys matching `pattern` on the data server `port`.
    pub async fn keys(&self, port: u16, pattern: &str) -> Vec<String> {
        match command_on(self.reach.client(port), &["KEYS", pattern]).await {
            Some(::redis::Value::Array(keys)) => keys
                .iter()
                .filter_map(|key| match key {
                    ::redis::Value::BulkString(key) => {
                        Some(String::from_utf8_lossy(key).into_owned())
                    }
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    async fn wait_watched(&self) {
        let ready = eventually(Duration::from_secs(30), || async {
            let mut ready = true;
            for port in &self.sentinels {
                let ask = ["SENTINEL", "MASTER", MASTER];
                let master = text_array(self.reach.client(*port), &ask).await;
                let field = |name: &str| {
                    (master.iter().position(|f| f == name))
                        .and_then(|i| master.get(i + 1).cloned())
                        .unwrap_or_default()
                };
                ready &= field("num-slaves") == "2" && field("num-other-sentinels") == "2";
            }
            for port in &self.servers[1..] {
                ready &= text_on(self.reach.client(*port), &["INFO", "replication"])
                    .await
                    .contains("master_link_status:up");
            }
            ready
        });
        if !ready.await {
            let log = std::fs::read_to_string(
                self.dir
                    .path()
                    .join(format!("sentinel-{}.log", self.sentinels[0])),
            )
            .unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(10).collect();
            panic!("the sentinels did not come to watch the primary and its replicas; the first one's log ends: {tail:?}");
        }
    }
}

/// Run `script` in `dir` under a watchdog shell that kills it when this
/// test process is gone.
fn watched(dir: &std::path::Path, script: &str) {
    let script = format!(
        "{script} & r=$!; while kill -0 {parent} 2>/dev/null && kill -0 $r 2>/dev/null; \
         do sleep 0.2; done; kill -9 $r",
        parent = std::process::id(),
    );
    let mut watchdog = Command::new("sh")
        .args(["-c", &script])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn redis");
    std::thread::spawn(move || watchdog.wait());
}

async fn text_array(client: ::redis::Client, args: &[&str]) -> Vec<String> {
    match command_on(client, args).await {
        Some(::redis::Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                ::redis::Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                other => format!("{other:?}"),
            })
            .collect(),
        // RESP3 answers SENTINEL MASTER with a map.
        Some(::redis::Value::Map(pairs)) => pairs
            .iter()
            .flat_map(|(k, v)| [k, v])
            .map(|item| match item {
                ::redis::Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                other => format!("{other:?}"),
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// One set shared by the tests that only need a healthy one (the failover
/// tests start their own).
pub async fn shared_sentinels() -> Option<&'static RedisSentinels> {
    static SHARED: tokio::sync::OnceCell<Option<RedisSentinels>> =
        tokio::sync::OnceCell::const_new();
    SHARED.get_or_init(RedisSentinels::start).await.as_ref()
}
