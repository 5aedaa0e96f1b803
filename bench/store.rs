//! Store benchmark: claim + complete throughput and latency of each backend
//! on this machine, with many concurrent tasks (as under real traffic).
//!
//! Usage: `cargo run --release --example store-bench -- [REDIS_URL] [OPS] [CONCURRENCY] [MIN_REPLICAS_ACKED]`
//! (defaults: redis://127.0.0.1:6379/15, 50000, 64, 0). The Redis database
//! given is used for scratch keys under `store-bench:`; with
//! MIN_REPLICAS_ACKED > 0 every Redis claim and completion waits for that
//! many replicas (`WAIT`), as `store.min_replicas_acked` does. PostgreSQL is
//! `$STORE_BENCH_POSTGRES`, by default the database `hookgate_bench` on
//! 127.0.0.1:5432 (create it first: `createdb -h 127.0.0.1 -U postgres
//! hookgate_bench`). `$STORE_BENCH_ONLY` (e.g. `postgres`) runs only the
//! backends whose name starts with it — several such processes at once
//! are a fleet of gateways on one store.
//!
//! For Redis it also prints the server's CPU per pair (`INFO cpu`, user +
//! sys, over the run) and runs the same pairs in the design's packed shape —
//! one `SET key packed NX GET PX` for the claim (no script) and one fenced
//! script for the completion — to show what hookgate's hash-and-script claim
//! costs Redis beside it. Last, replays of completed records on Redis,
//! four ways: hookgate's store with its replay cache (pub/sub invalidation),
//! without it, and the redis crate's RESP3 client-side caching of an
//! `HGETALL` (server-tracked invalidation) beside a plain `HGETALL`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use bytes::Bytes;
use hookgate::clock::Clock;
use hookgate::config::{Backend, StoreSettings, Synchronous};
use hookgate::metrics::StoreMetrics;
use hookgate::store::{BodyKept, RecordedResponse};
use hookgate::store::{ClaimOutcome, ClaimRequest, Store, StoreKey};
use http::{HeaderMap, StatusCode};

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let redis_url = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1:6379/15".into());
    let ops: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(50_000);
    let concurrency: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(64);
    let min_replicas_acked: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("hookgate-store-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    println!("claim + complete, {ops} keys, {concurrency} concurrent tasks\n");
    println!(
        "{:<22} {:>12} {:>10} {:>10} {:>16}",
        "backend", "pairs/s", "p50", "p99", "server CPU/pair"
    );
    let backends = [
        ("memory", Backend::Memory),
        (
            "embedded (normal)",
            Backend::Embedded {
                path: dir.join("normal.db"),
                synchronous: Synchronous::Normal,
            },
        ),
        (
            "embedded (full)",
            Backend::Embedded {
                path: dir.join("full.db"),
                synchronous: Synchronous::Full,
            },
        ),
        (
            "redis",
            Backend::Redis {
                url: redis_url.clone(),
            },
        ),
        (
            "postgres",
            Backend::Postgres {
                url: std::env::var("STORE_BENCH_POSTGRES").unwrap_or_else(|_| {
                    "postgres://postgres@127.0.0.1:5432/hookgate_bench".to_owned()
                }),
                pool_size: 16,
            },
        ),
    ];
    let only = std::env::var("STORE_BENCH_ONLY").unwrap_or_default();
    for (name, backend) in backends {
        if !name.starts_with(only.as_str()) {
            continue;
        }
        let min_replicas_acked = match backend {
            Backend::Redis { .. } => min_replicas_acked,
            _ => 0,
        };
        let settings = StoreSettings {
            timeout: Duration::from_secs(5),
            min_replicas_acked,
            ..StoreSettings::new(backend)
        };
        let store = Store::open(
            &settings,
            "store-bench:",
            StoreMetrics::unregistered(),
            &clock(),
        );
        let store = Arc::new(store.expect("open store"));
        if store.ping().await.is_err() {
            println!("{name:<22} unavailable");
            continue;
        }
        let run = format!("{}-{}", std::process::id(), name.len());
        let is_redis = matches!(settings.backend, Backend::Redis { .. });
        let cpu_before = if is_redis {
            redis_cpu(&redis_url).await
        } else {
            0.0
        };
        let response = Arc::new(RecordedResponse {
            status: StatusCode::OK,
            headers: HeaderMap::new(),
            body: Bytes::from_static(b"{\"ok\":true}"),
            body_kept: BodyKept::Whole,
        });
        let measured = measure(ops, concurrency, move |i| {
            let (store, run, response) = (Arc::clone(&store), run.clone(), Arc::clone(&response));
            async move {
                let key = store.key(&run, &i.to_string());
                let claim = store
                    .records()
                    .claim(ClaimRequest::delivery(
                        &key,
                        "00",
                        Duration::from_secs(30),
                        Duration::from_secs(60),
                    ))
                    .await
                    .expect("claim");
                let ClaimOutcome::New(lease) = claim else {
                    panic!("fresh key was not new")
                };
                let done = store
                    .records()
                    .complete(&key, &lease, &response, Duration::from_secs(60))
                    .await
                    .expect("complete");
                assert!(done);
            }
        })
        .await;
        let cpu = if is_redis {
            Some(redis_cpu(&redis_url).await - cpu_before)
        } else {
            None
        };
        measured.print(name, ops, cpu);
    }
    if "redis".starts_with(only.as_str()) {
        packed_shape(&redis_url, ops, concurrency).await;
        replays(&redis_url, ops, concurrency).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// What one run measured.
struct Measured {
    elapsed: Duration,
    latencies: Vec<Duration>,
}

impl Measured {
    fn print(&self, name: &str, ops: usize, server_cpu_seconds: Option<f64>) {
        let pct = |p: f64| {
            let i = ((self.latencies.len() as f64 * p) as usize).min(self.latencies.len() - 1);
            self.latencies[i].as_secs_f64() * 1e3
        };
        let cpu = server_cpu_seconds
            .map(|s| format!("{:.1} us", s * 1e6 / ops as f64))
            .unwrap_or_default();
        println!(
            "{name:<22} {:>12.0} {:>9.2}ms {:>9.2}ms {cpu:>16}",
            ops as f64 / self.elapsed.as_secs_f64(),
            pct(0.50),
            pct(0.99),
        );
    }
}

/// Runs `pair(i)` for every i below `ops`, `concurrency` at a time, timing
/// each.
async fn measure<F, Fut>(ops: usize, concurrency: usize, pair: F) -> Measured
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let started = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..concurrency {
        let pair = pair.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            for i in (worker..ops).step_by(concurrency) {
                let began = Instant::now();
                pair(i).await;
                latencies.push(began.elapsed());
            }
            latencies
        }));
    }
    let mut latencies = Vec::with_capacity(ops);
    for task in tasks {
        latencies.extend(task.await.unwrap());
    }
    let elapsed = started.elapsed();
    latencies.sort();
    Measured { elapsed, latencies }
}

/// Redis's own CPU seconds so far (main thread and children, user + sys).
async fn redis_cpu(url: &str) -> f64 {
    let Ok(client) = redis::Client::open(url) else {
        return 0.0;
    };
    let Ok(mut connection) = client.get_multiplexed_async_connection().await else {
        return 0.0;
    };
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query_async(&mut connection)
        .await
        .unwrap_or_default();
    info.lines()
        .filter_map(|line| line.split_once(':'))
        .filter(|(name, _)| matches!(*name, "used_cpu_sys" | "used_cpu_user"))
        .filter_map(|(_, value)| value.trim().parse::<f64>().ok())
        .sum()
}

/// The completion of the packed shape: the record is one string, the
/// fencing token is the whole pending value.
const PACKED_COMPLETE: &str = "
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
";

/// The same pairs in the design's packed shape, on the same Redis.
async fn packed_shape(url: &str, ops: usize, concurrency: usize) {
    let Ok(client) = redis::Client::open(url) else {
        return;
    };
    let Ok(connection) = client.get_connection_manager().await else {
        println!("{:<22} unavailable", "redis, packed shape");
        return;
    };
    let script = Arc::new(redis::Script::new(PACKED_COMPLETE));
    let run = format!("store-bench:packed:{}", std::process::id());
    let cpu_before = redis_cpu(url).await;
    let measured = measure(ops, concurrency, move |i| {
        let (mut connection, script, key) = (
            connection.clone(),
            Arc::clone(&script),
            format!("{run}:{i}"),
        );
        async move {
            let pending = format!("p|{i:016x}|00");
            let previous: Option<Vec<u8>> = redis::cmd("SET")
                .arg(&key)
                .arg(&pending)
                .arg("NX")
                .arg("GET")
                .arg("PX")
                .arg(30_000)
                .query_async(&mut connection)
                .await
                .expect("claim");
            assert!(previous.is_none(), "fresh key was not new");
            let done: i64 = script
                .key(&key)
                .arg(&pending)
                .arg("c|200||{\"ok\":true}")
                .arg(60_000)
                .invoke_async(&mut connection)
                .await
                .expect("complete");
            assert_eq!(done, 1);
        }
    })
    .await;
    let cpu = redis_cpu(url).await - cpu_before;
    measured.print("redis, packed shape", ops, Some(cpu));
}

/// Completed records the replay scenarios read, round robin.
const REPLAYED: usize = 1_000;

/// Replays of completed records on Redis: through hookgate's store with and
/// without its replay cache, and as `HGETALL` with and without the redis
/// crate's RESP3 client-side caching.
async fn replays(url: &str, ops: usize, concurrency: usize) {
    println!("\nreplays of {REPLAYED} completed records, {ops} lookups\n");
    let response = RecordedResponse {
        status: StatusCode::OK,
        headers: HeaderMap::new(),
        body: Bytes::from_static(b"{\"ok\":true}"),
        body_kept: BodyKept::Whole,
    };
    let mut keys = Vec::new();
    for cache_bytes in [32 << 20, 0] {
        let settings = StoreSettings::new(Backend::Redis { url: url.into() });
        let Ok(store) = Store::open(
            &settings,
            "store-bench:",
            StoreMetrics::unregistered(),
            &clock(),
        ) else {
            return;
        };
        let store = Arc::new(store.with_replay_cache(cache_bytes));
        let run = format!("replay-{}-{cache_bytes}", std::process::id());
        keys.clear();
        for i in 0..REPLAYED {
            let key = store.key(&run, &i.to_string());
            let Ok(ClaimOutcome::New(lease)) = store.records().claim(delivery(&key)).await else {
                println!("{:<22} unavailable", "redis");
                return;
            };
            assert!(store
                .records()
                .complete(&key, &lease, &response, Duration::from_secs(60))
                .await
                .unwrap());
            keys.push(key);
        }
        // Let the invalidation feed subscribe: the cache serves nothing before.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let shared = Arc::new(keys.clone());
        let cpu_before = redis_cpu(url).await;
        let measured = measure(ops, concurrency, move |i| {
            let (store, keys) = (Arc::clone(&store), Arc::clone(&shared));
            async move {
                let outcome = store
                    .records()
                    .claim(delivery(&keys[i % REPLAYED]))
                    .await
                    .expect("claim");
                assert!(
                    matches!(outcome, ClaimOutcome::Completed(_)),
                    "not a replay"
                );
            }
        })
        .await;
        let cpu = redis_cpu(url).await - cpu_before;
        let name = if cache_bytes > 0 {
            "store, replay cache"
        } else {
            "store, no cache"
        };
        measured.print(name, ops, Some(cpu));
    }
    for cached in [true, false] {
        let Ok(client) = redis::Client::open(format!("{url}?protocol=resp3")) else {
            return;
        };
        let mut config = redis::AsyncConnectionConfig::new();
        if cached {
            config = config.set_cache_config(redis::caching::CacheConfig::new());
        }
        let Ok(connection) = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
        else {
            return;
        };
        let shared: Arc<Vec<String>> =
            Arc::new(keys.iter().map(|key| key.as_str().to_owned()).collect());
        let cpu_before = redis_cpu(url).await;
        let measured = measure(ops, concurrency, move |i| {
            let (mut connection, keys) = (connection.clone(), Arc::clone(&shared));
            async move {
                let fields: Vec<(String, Vec<u8>)> = redis::cmd("HGETALL")
                    .arg(&keys[i % REPLAYED])
                    .query_async(&mut connection)
                    .await
                    .expect("HGETALL");
                assert!(fields
                    .iter()
                    .any(|(name, value)| name == "state" && value == b"completed"));
            }
        })
        .await;
        let cpu = redis_cpu(url).await - cpu_before;
        let name = if cached {
            "RESP3 client cache"
        } else {
            "plain HGETALL"
        };
        measured.print(name, ops, Some(cpu));
    }
}

/// The benchmark's clock: each store it opens gets its own, as each
/// gateway process has one.
#[allow(clippy::disallowed_methods)]
fn clock() -> Clock {
    Clock::system()
}

fn delivery(key: &StoreKey) -> ClaimRequest<'_> {
    ClaimRequest::delivery(key, "00", Duration::from_secs(30), Duration::from_secs(60))
}
