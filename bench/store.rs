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
//! hookgate_bench`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hookgate::config::{Backend, StoreSettings, Synchronous};
use hookgate::metrics::StoreMetrics;
use hookgate::replay::{BodyKept, RecordedResponse};
use hookgate::store::{ClaimOutcome, ClaimRequest, Store};
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
        "{:<22} {:>12} {:>10} {:>10}",
        "backend", "pairs/s", "p50", "p99"
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
        ("redis", Backend::Redis { url: redis_url }),
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
    for (name, backend) in backends {
        let min_replicas_acked = match backend {
            Backend::Redis { .. } => min_replicas_acked,
            _ => 0,
        };
        let settings = StoreSettings {
            timeout: Duration::from_secs(5),
            min_replicas_acked,
            ..StoreSettings::new(backend)
        };
        let store = Store::open(&settings, "store-bench:", StoreMetrics::unregistered());
        let store = Arc::new(store.expect("open store"));
        if store.ping().await.is_err() {
            println!("{name:<22} unavailable");
            continue;
        }
        let run = format!("{}-{}", std::process::id(), name.len());
        let started = Instant::now();
        let mut tasks = Vec::new();
        for worker in 0..concurrency {
            let (store, run) = (Arc::clone(&store), run.clone());
            tasks.push(tokio::spawn(async move {
                let response = RecordedResponse {
                    status: StatusCode::OK,
                    headers: HeaderMap::new(),
                    body: Bytes::from_static(b"{\"ok\":true}"),
                    body_kept: BodyKept::Whole,
                };
                let mut latencies = Vec::new();
                for i in (worker..ops).step_by(concurrency) {
                    let key = store.key(&run, &i.to_string());
                    let began = Instant::now();
                    let claim = store
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
                        .complete(&key, &lease, &response, Duration::from_secs(60))
                        .await
                        .expect("complete");
                    assert!(done);
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
        let pct =
            |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
        println!(
            "{name:<22} {:>12.0} {:>9.2}ms {:>9.2}ms",
            ops as f64 / elapsed.as_secs_f64(),
            pct(0.50).as_secs_f64() * 1e3,
            pct(0.99).as_secs_f64() * 1e3,
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
