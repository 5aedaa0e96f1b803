//! A private `redis-server` on a free port that a test can kill and restart,
//! and a real 3-master/3-replica Redis Cluster.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{eventually, free_port};

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

    /// Stop (`"STOP"`) or continue (`"CONT"`) the server process: a stopped
    /// replica acknowledges nothing.
    pub fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            let status = Command::new("kill")
                .args([&format!("-{signal}"), &child.id().to_string()])
                .status()
                .unwrap();
            assert!(status.success());
        }
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
            let port = self.port;
            let up = eventually(Duration::from_secs(10), || async move {
                tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .is_ok()
            });
            assert!(up.await, "redis-server did not come up");
            return;
        }
        let client =
            ::redis::Client::open(self.probe_url.clone().unwrap_or_else(|| self.url())).unwrap();
        let up = eventually(Duration::from_secs(30), || async {
            let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
                return false;
            };
            ::redis::cmd("PING")
                .query_async::<String>(&mut conn)
                .await
                .is_ok()
        });
        assert!(up.await, "redis-server did not come up");
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

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
        let ports = free_cluster_ports(6);
        for port in &ports {
            spawn_cluster_node(dir.path(), *port);
        }
        for port in &ports {
            wait_for_ping(dir.path(), *port).await;
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

    /// Until every live node reports `cluster_state:ok`, and every live
    /// replica has synced with its master (a replica that never synced
    /// does not take over when its master dies).
    pub async fn wait_healthy(&self) {
        let healthy = eventually(Duration::from_secs(30), || async {
            let mut ok = true;
            for port in &self.ports {
                let info = text(*port, &["CLUSTER", "INFO"]).await;
                if info.is_empty() {
                    continue; // a killed node
                }
                ok &= info.contains("cluster_state:ok");
                let replication = text(*port, &["INFO", "replication"]).await;
                if replication.contains("role:slave") {
                    ok &= replication.contains("master_link_status:up");
                }
            }
            ok
        });
        assert!(healthy.await, "cluster did not become healthy");
    }

    /// The port of the master currently serving `key`.
    pub async fn master_of(&self, key: &str) -> u16 {
        for port in &self.ports {
            let slot = match command(*port, &["CLUSTER", "KEYSLOT", key]).await {
                Some(::redis::Value::Int(slot)) => slot,
                _ => continue,
            };
            let nodes = text(*port, &["CLUSTER", "NODES"]).await;
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

    /// The ports of the nodes serving as masters now.
    pub async fn masters(&self) -> Vec<u16> {
        let mut masters = Vec::new();
        for port in &self.ports {
            if let Some(::redis::Value::Array(role)) = command(*port, &["ROLE"]).await {
                if matches!(role.first(), Some(::redis::Value::BulkString(r)) if r == b"master") {
                    masters.push(*port);
                }
            }
        }
        masters
    }

    /// How many keys matching `pattern` each master holds, by port.
    pub async fn keys_per_master(&self, pattern: &str) -> Vec<(u16, usize)> {
        let mut counts = Vec::new();
        for port in self.masters().await {
            let mut cursor = "0".to_owned();
            let mut n = 0;
            loop {
                let reply =
                    command(port, &["SCAN", &cursor, "MATCH", pattern, "COUNT", "1000"]).await;
                let Some(::redis::Value::Array(parts)) = reply else {
                    break;
                };
                if let [::redis::Value::BulkString(next), ::redis::Value::Array(keys)] =
                    parts.as_slice()
                {
                    n += keys.len();
                    cursor = String::from_utf8_lossy(next).into_owned();
                }
                if cursor == "0" {
                    break;
                }
            }
            counts.push((port, n));
        }
        counts
    }

    /// Lua script calls (`EVALSHA` and `EVAL`) a node has run, from
    /// `INFO commandstats`: what hookgate's operations cost it.
    pub async fn script_calls(&self, port: u16) -> u64 {
        let stats = text(port, &["INFO", "commandstats"]).await;
        stats
            .lines()
            .filter(|line| {
                line.starts_with("cmdstat_evalsha:") || line.starts_with("cmdstat_eval:")
            })
            .filter_map(|line| {
                line.split("calls=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum()
    }

    /// `GET key` on whichever master serves it.
    pub async fn get(&self, key: &str) -> Option<String> {
        let port = self.master_of(key).await;
        match command(port, &["GET", key]).await? {
            ::redis::Value::BulkString(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
            _ => None,
        }
    }

    /// Start the node on `port` again (it rejoins with its saved identity,
    /// as a replica of whoever took over its slots).
    pub async fn restart(&self, port: u16) {
        spawn_cluster_node(self._dir.path(), port);
        wait_for_ping(self._dir.path(), port).await;
    }

    /// SIGKILL the server on `port`.
    pub async fn kill(&self, port: u16) {
        kill_server(port).await;
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

/// `n` distinct free ports for cluster nodes. Redis puts a node's cluster
/// bus 10,000 above its port, so each must be at most 55535 and that one
/// free too (one in five of the kernel's free ports is above 55535, and a
/// bus port held by another test's connection keeps the node from
/// starting). The kernel may hand the same free port out twice in a row:
/// two nodes given one port make a cluster whose node list names a master
/// twice.
fn free_cluster_ports(n: usize) -> Vec<u16> {
    let mut ports = Vec::with_capacity(n);
    while ports.len() < n {
        let port = free_port();
        if port <= 55535
            && !ports.contains(&port)
            && !ports.contains(&(port + 10000))
            && port
                .checked_sub(10000)
                .is_none_or(|bus_of| !ports.contains(&bus_of))
            && std::net::TcpListener::bind(("127.0.0.1", port + 10000)).is_ok()
        {
            ports.push(port);
        }
    }
    ports
}

async fn wait_for_ping(dir: &std::path::Path, port: u16) {
    let up = eventually(Duration::from_secs(10), || async move {
        text(port, &["PING"]).await == "PONG"
    });
    if !up.await {
        let log =
            std::fs::read_to_string(dir.join(format!("redis-{port}.log"))).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(5).collect();
        panic!("redis-server on {port} did not come up; its log ends: {tail:?}");
    }
}

/// One cluster shared by the tests that only need a healthy one (the
/// failover tests start their own).
pub async fn shared_cluster() -> Option<&'static RedisCluster> {
    static SHARED: tokio::sync::OnceCell<Option<RedisCluster>> = tokio::sync::OnceCell::const_new();
    SHARED.get_or_init(RedisCluster::start).await.as_ref()
}

/// A connection of its own to the Redis at `url`, and the keys there that
/// match `pattern` (`KEYS`): for a test to look at what a store holds.
pub async fn keys_at(
    url: &str,
    pattern: &str,
) -> (::redis::aio::MultiplexedConnection, Vec<String>) {
    let client = ::redis::Client::open(url).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let keys = ::redis::cmd("KEYS")
        .arg(pattern)
        .query_async(&mut connection)
        .await
        .unwrap();
    (connection, keys)
}

/// `args` sent to the Redis (or sentinel) on `port`; `None` when it does not
/// answer within 2 s or refuses.
pub(super) async fn command(port: u16, args: &[&str]) -> Option<::redis::Value> {
    let client = ::redis::Client::open(format!("redis://127.0.0.1:{port}")).ok()?;
    command_on(client, args).await
}

/// [`command`] through `client`.
pub(super) async fn command_on(client: ::redis::Client, args: &[&str]) -> Option<::redis::Value> {
    let connecting = client.get_multiplexed_async_connection();
    let mut conn = tokio::time::timeout(Duration::from_secs(2), connecting)
        .await
        .ok()?
        .ok()?;
    let mut cmd = ::redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query_async(&mut conn).await.ok()
}

/// [`command`]'s answer as text ("" for none).
pub(super) async fn text(port: u16, args: &[&str]) -> String {
    let client = ::redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    text_on(client, args).await
}

/// [`text`] through `client`.
pub(super) async fn text_on(client: ::redis::Client, args: &[&str]) -> String {
    match command_on(client, args).await {
        Some(::redis::Value::BulkString(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
        Some(::redis::Value::VerbatimString { text, .. }) => text,
        Some(::redis::Value::SimpleString(text)) => text,
        _ => String::new(),
    }
}

/// SIGKILL the Redis on `port` (its `process_id`, as it reports it).
pub(super) async fn kill_server(port: u16) {
    let client = ::redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    kill_server_on(client).await;
}

/// [`kill_server`], asking through `client`.
pub(super) async fn kill_server_on(client: ::redis::Client) {
    let info = text_on(client, &["INFO", "server"]).await;
    let pid = info
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .expect("process_id")
        .trim()
        .to_owned();
    Command::new("kill").args(["-9", &pid]).status().unwrap();
}
