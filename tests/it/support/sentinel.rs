//! A real Redis primary with two replicas watched by three real sentinels
//! (`redis-sentinel`, or `redis-server --sentinel` where Debian's
//! `redis-sentinel` package is not installed: the same program), on free
//! ports. Each process is tied to this test process by a watchdog shell,
//! so none outlives the test binary.

use std::process::{Command, Stdio};
use std::time::Duration;

use super::redis::{command, kill_server, text};
use super::{eventually, free_port, RedisServer};

/// The name the sentinels monitor the primary under.
pub const MASTER: &str = "hookgate-primary";

pub struct RedisSentinels {
    /// The data servers: the first starts as the primary.
    pub servers: Vec<u16>,
    pub sentinels: Vec<u16>,
    dir: tempfile::TempDir,
}

impl RedisSentinels {
    /// Start one and wait until every sentinel knows both replicas and
    /// both other sentinels (a sentinel that knows no replica cannot fail
    /// over); `None` when redis-server is missing (fails under CI=true).
    pub async fn start() -> Option<RedisSentinels> {
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
                    "redis-server --port {port} --bind 127.0.0.1 --save '' --appendonly no \
                     --protected-mode no --dir {dir} --logfile redis-{port}.log {replica_of}",
                    dir = dir.path().display()
                ),
            );
        }
        // The sentinels learn the replicas from the primary's `INFO`, sent
        // at once and then every 10 s: start them once the replicas are in.
        let synced = eventually(Duration::from_secs(20), || async {
            let mut synced = true;
            for port in &servers[1..] {
                synced &= text(*port, &["INFO", "replication"])
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
                    "port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {dir}\n\
                     logfile sentinel-{port}.log\n\
                     sentinel monitor {MASTER} 127.0.0.1 {primary} 2\n\
                     sentinel down-after-milliseconds {MASTER} 1000\n\
                     sentinel failover-timeout {MASTER} 5000\n\
                     sentinel parallel-syncs {MASTER} 2\n",
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
            dir,
        };
        set.wait_watched().await;
        Some(set)
    }

    /// `[store]` keys for the set, the primary found through the sentinels.
    pub fn toml(&self) -> String {
        let sentinels: Vec<String> = (self.sentinels.iter())
            .map(|port| format!("\"redis://127.0.0.1:{port}\""))
            .collect();
        format!(
            "backend = \"redis-sentinel\"\nsentinels = [{}]\nmaster = \"{MASTER}\"",
            sentinels.join(", ")
        )
    }

    /// `(sentinels, master)` as `StoreSettings` takes them.
    pub fn store(&self) -> (Vec<String>, String) {
        let sentinels = (self.sentinels.iter())
            .map(|port| format!("redis://127.0.0.1:{port}"))
            .collect();
        (sentinels, MASTER.to_owned())
    }

    /// The port of the server the sentinels name as primary now.
    pub async fn primary(&self) -> Option<u16> {
        for port in &self.sentinels {
            let reply = command(*port, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER]).await;
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
        kill_server(port).await;
    }

    /// Whether `port` serves as a primary now (`ROLE`).
    pub async fn is_primary(&self, port: u16) -> bool {
        matches!(
            command(port, &["ROLE"]).await,
            Some(::redis::Value::Array(role))
                if matches!(role.first(), Some(::redis::Value::BulkString(r)) if r == b"master")
        )
    }

    /// Keys matching `pattern` on the data server `port`.
    pub async fn keys(&self, port: u16, pattern: &str) -> Vec<String> {
        match command(port, &["KEYS", pattern]).await {
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
                let master = text_array(*port, &["SENTINEL", "MASTER", MASTER]).await;
                let field = |name: &str| {
                    (master.iter().position(|f| f == name))
                        .and_then(|i| master.get(i + 1).cloned())
                        .unwrap_or_default()
                };
                ready &= field("num-slaves") == "2" && field("num-other-sentinels") == "2";
            }
            for port in &self.servers[1..] {
                ready &= text(*port, &["INFO", "replication"])
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

async fn text_array(port: u16, args: &[&str]) -> Vec<String> {
    match command(port, args).await {
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
