//! The benchmark's load generator, for what `wrk` cannot do:
//!
//! - `rate`: open-loop load at a fixed request rate; latency is measured from
//!   each request's *scheduled* send time, so a stall is not hidden
//!   (coordinated omission). Prints achieved rate and p50/p99/p99.9. Given
//!   several URLs (comma-separated), each gets the rate on connections of
//!   its own, their requests interleaved in one schedule, and a line each
//!   (`target=K`): the box's stalls then fall on all of them alike, so the
//!   difference of their percentiles is what one adds over another.
//! - `sign`: write Stripe-style signed deliveries (one per line,
//!   `signature<TAB>body`) for wrk's Lua script; a share of them repeat
//!   earlier events, as retries do.
//! - `idle`: open N keep-alive connections, make one request on each, keep
//!   them open, and report a process's RSS and peak RSS (VmHWM); with `h2`,
//!   HTTP/2 connections (prior knowledge, h2c).
//! - `tls`: new TLS connections with *full* handshakes (session resumption
//!   and tickets off, which wrk cannot do), each carrying one unique POST
//!   and closed; prints connections per second.
//!
//! Usage:
//!   load rate URL[,URL...] RATE SECONDS CONNECTIONS [unique|replay]
//!   load sign SECRET COUNT DUP_RATIO > deliveries.tsv
//!   load idle HOST:PORT CONNECTIONS PID [h2]
//!   load tls HOST:PORT PATH CA.pem SECONDS CONCURRENCY

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};
use tokio::time::Instant;

use bytes::Bytes;
use hmac::{Hmac, Mac};
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use sha2::Sha256;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).cloned().unwrap_or_default();
    match arg(0).as_str() {
        "rate" => {
            let mode = if arg(5).is_empty() {
                "unique".to_owned()
            } else {
                arg(5)
            };
            rate(
                &arg(1),
                arg(2).parse().unwrap(),
                arg(3).parse().unwrap(),
                arg(4).parse().unwrap(),
                &mode,
            )
            .await
        }
        "sign" => sign(&arg(1), arg(2).parse().unwrap(), arg(3).parse().unwrap()),
        "idle" => {
            idle(
                arg(1).parse().unwrap(),
                arg(2).parse().unwrap(),
                arg(3).parse().unwrap(),
                arg(4) == "h2",
            )
            .await
        }
        "tls" => {
            full_handshakes(
                arg(1).parse().unwrap(),
                &arg(2),
                &arg(3),
                arg(4).parse().unwrap(),
                arg(5).parse().unwrap(),
            )
            .await
        }
        _ => eprintln!("usage: see the top of bench/load.rs"),
    }
}

fn now_secs() -> u64 {
    hookgate::clock::wall()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn sign(secret: &str, count: usize, dup_ratio: f64) {
    let t = now_secs();
    let mut out = std::io::BufWriter::new(std::io::stdout());
    let mut unique = 0usize;
    for _ in 0..count {
        let id = if unique > 0 && rand::random::<f64>() < dup_ratio {
            rand::random::<usize>() % unique
        } else {
            unique += 1;
            unique - 1
        };
        // A retry carries the same bytes as the first delivery.
        let body =
            format!(r#"{{"id":"evt_{t}_{id}","object":"event","type":"invoice.paid","n":{id}}}"#);
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(format!("{t}.{body}").as_bytes());
        let signature = format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()));
        writeln!(out, "{signature}\t{body}").unwrap();
    }
    eprintln!("{count} deliveries of {unique} events");
}

async fn rate(urls: &str, rate: u64, seconds: u64, connections: usize, mode: &str) {
    let urls: Vec<&str> = urls.split(',').collect();
    let total = (rate * seconds) as usize;
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    // Target k's request i is due at start + (i + k / n) intervals.
    let offset = interval / urls.len() as u32;
    let start = Instant::now() + Duration::from_millis(200);
    let run = format!("{}-{}", std::process::id(), now_secs());
    let mut targets = Vec::new();
    for (k, url) in urls.iter().enumerate() {
        let first = start + offset * k as u32;
        let load = Load {
            url: Arc::new((*url).to_owned()),
            mode: Arc::new(mode.to_owned()),
            run: format!("{run}-{k}"),
        };
        targets.push(load.open_loop(first, interval, total, connections));
    }
    for (k, target) in futures_util::future::join_all(targets)
        .await
        .into_iter()
        .enumerate()
    {
        let (mut latencies, failures) = target;
        let elapsed = start.elapsed();
        latencies.sort();
        let pct = |p: f64| {
            latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)]
                .as_secs_f64()
                * 1e3
        };
        let label = if urls.len() > 1 {
            format!("target={k} ")
        } else {
            String::new()
        };
        println!(
            "{label}rate={:.0} p50_ms={:.3} p99_ms={:.3} p999_ms={:.3} failures={failures}",
            latencies.len() as f64 / elapsed.as_secs_f64(),
            pct(0.50),
            pct(0.99),
            pct(0.999),
        );
    }
}

/// One target of [`rate`]: where its requests go, and what they carry.
#[derive(Clone)]
struct Load {
    url: Arc<String>,
    mode: Arc<String>,
    run: String,
}

impl Load {
    /// `total` requests, request `i` due at `first + i × interval`, over
    /// `connections` keep-alive connections; each one's latency from when
    /// it was due, and the failures.
    async fn open_loop(
        self,
        first: Instant,
        interval: Duration,
        total: usize,
        connections: usize,
    ) -> (Vec<Duration>, usize) {
        let uri: http::Uri = self.url.parse().unwrap();
        let addr: SocketAddr = format!("{}:{}", uri.host().unwrap(), uri.port_u16().unwrap_or(80))
            .parse()
            .unwrap();
        let workers: Vec<_> = (0..connections)
            .map(|worker| {
                let load = self.clone();
                tokio::spawn(async move {
                    let stream = TcpStream::connect(addr).await.unwrap();
                    stream.set_nodelay(true).unwrap();
                    let (mut sender, connection) =
                        hyper::client::conn::http1::handshake(TokioIo::new(stream))
                            .await
                            .unwrap();
                    tokio::spawn(connection);
                    let mut latencies = Vec::new();
                    let mut failures = 0usize;
                    for i in (worker..total).step_by(connections) {
                        let scheduled = first + interval * i as u32;
                        tokio::time::sleep_until(scheduled).await;
                        let id = match load.mode.as_str() {
                            "replay" => "bench-replay".to_owned(),
                            _ => format!("{}-{i}", load.run),
                        };
                        let request = Request::post(load.url.as_str())
                            .header("host", "bench")
                            .header("x-id", &id)
                            .header("content-type", "application/json")
                            .body(Full::new(Bytes::from(format!(r#"{{"id":"{id}"}}"#))))
                            .unwrap();
                        match sender.send_request(request).await {
                            Ok(response) => {
                                let ok = response.status().is_success();
                                let _ = response.into_body().collect().await;
                                if !ok {
                                    failures += 1;
                                }
                            }
                            Err(_) => failures += 1,
                        }
                        latencies.push(scheduled.elapsed());
                    }
                    (latencies, failures)
                })
            })
            .collect();
        let mut latencies = Vec::with_capacity(total);
        let mut failures = 0;
        for worker in workers {
            let (l, f) = worker.await.unwrap();
            latencies.extend(l);
            failures += f;
        }
        (latencies, failures)
    }
}

async fn idle(addr: SocketAddr, connections: usize, pid: u32, h2: bool) {
    let mut open = Vec::with_capacity(connections);
    let mut sessions = Vec::new();
    let request = b"GET /healthcheck-idle HTTP/1.1\r\nHost: bench\r\n\r\n";
    for _ in 0..connections {
        let mut stream = match TcpStream::connect(addr).await {
            Ok(stream) => stream,
            Err(error) => {
                eprintln!(
                    "connect failed after {} connections: {error}",
                    open.len() + sessions.len()
                );
                break;
            }
        };
        if h2 {
            let executor = hyper_util::rt::TokioExecutor::new();
            let (mut sender, connection) =
                hyper::client::conn::http2::handshake(executor, TokioIo::new(stream))
                    .await
                    .unwrap();
            tokio::spawn(connection);
            let request = Request::get(format!("http://{addr}/healthcheck-idle"))
                .body(Full::new(Bytes::new()))
                .unwrap();
            let _ = sender.send_request(request).await;
            sessions.push(sender);
            continue;
        }
        stream.write_all(request).await.unwrap();
        let mut buf = [0u8; 1024];
        let _ = stream.read(&mut buf).await;
        open.push(stream);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .map(|l| {
                l.split_whitespace()
                    .nth(1)
                    .unwrap_or("0")
                    .parse::<u64>()
                    .unwrap_or(0)
            })
            .unwrap_or(0)
    };
    println!(
        "connections={} rss_mib={:.1} peak_rss_mib={:.1}",
        open.len() + sessions.len(),
        field("VmRSS:") as f64 / 1024.0,
        field("VmHWM:") as f64 / 1024.0
    );
}

/// `concurrency` loops, each: connect, a full TLS handshake (no session
/// cache, no tickets), one POST with a fresh `X-Id`, read the answer to
/// its end, close. Prints connections/s and how many answers were 2xx.
async fn full_handshakes(addr: SocketAddr, path: &str, ca: &str, seconds: u64, concurrency: usize) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};

    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.resumption = rustls::client::Resumption::disabled();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let name = ServerName::try_from(addr.ip().to_string()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..concurrency)
        .map(|task| {
            let (connector, name, path) = (connector.clone(), name.clone(), path.to_owned());
            tokio::spawn(async move {
                let (mut done, mut ok) = (0u64, 0u64);
                while Instant::now() < deadline {
                    let tcp = TcpStream::connect(addr).await.unwrap();
                    tcp.set_nodelay(true).unwrap();
                    let mut tls = match connector.connect(name.clone(), tcp).await {
                        Ok(tls) => tls,
                        Err(error) => {
                            // Counted as done and not ok; a handshake that
                            // cannot succeed ends the run at once.
                            eprintln!("TLS handshake failed: {error}");
                            done += 1;
                            break;
                        }
                    };
                    let body = r#"{"type":"bench"}"#;
                    let request = format!(
                        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nX-Id: tls-{task}-{done}-{}\r\n\
                         Content-Type: application/json\r\nContent-Length: {}\r\n\
                         Connection: close\r\n\r\n{body}",
                        rand::random::<u64>(),
                        body.len()
                    );
                    tls.write_all(request.as_bytes()).await.unwrap();
                    let mut answer = Vec::new();
                    let _ = tls.read_to_end(&mut answer).await;
                    done += 1;
                    ok += u64::from(answer.starts_with(b"HTTP/1.1 2"));
                }
                (done, ok)
            })
        })
        .collect();
    let (mut done, mut ok) = (0, 0);
    for task in tasks {
        let (d, o) = task.await.unwrap();
        done += d;
        ok += o;
    }
    println!(
        "RESULT connections_per_s={:.0} ok={ok} of {done}",
        done as f64 / seconds as f64
    );
}
