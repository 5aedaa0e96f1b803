//! What an idle keep-alive connection holds on the heap once it has been
//! served: every allocation is counted while a real listener serves
//! connections that each make one request and stay open, so the bytes
//! each parked connection keeps are known exactly, whatever the allocator
//! does with them. A binary of its own, so its counting allocator sits
//! under nothing else.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http_body_util::Full;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Bytes allocated minus bytes freed, by the whole process.
struct Counting;

static NET: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        NET.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        NET.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        NET.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// One request on `stream`, and its answer read.
async fn request(stream: &mut TcpStream) {
    stream
        .write_all(b"GET /hook HTTP/1.1\r\nhost: gateway\r\n\r\n")
        .await
        .unwrap();
    let mut answer = [0u8; 512];
    let n = stream.read(&mut answer).await.unwrap();
    assert!(answer[..n].starts_with(b"HTTP/1.1 200"));
}

/// Open a connection, make one request, read its answer; keep it open.
async fn served(addr: std::net::SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    request(&mut stream).await;
    stream
}

/// Wait until `n` connections are parked (idle ones park after 100 ms).
async fn all_parked(parked: &prometheus::IntGauge, n: i64) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while parked.get() < n {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("every idle connection parked within 10 s");
}

#[tokio::test(flavor = "current_thread")]
async fn an_idle_keep_alive_connection_holds_little_on_the_heap() {
    const CONNECTIONS: isize = 200;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = hookgate::server::Limits {
        max_connections: 1000,
        header_read_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(60),
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let gauges = hookgate::server::ConnectionGauges::unexported();
    let parked = gauges.parked.clone();
    let server = tokio::spawn(async move {
        let open = hookgate::server::accept_loop(
            listener,
            limits,
            None,
            gauges,
            async {
                let _ = stopped.await;
            },
            |_peer, _proto| {
                |_request| async { Response::new(Full::new(Bytes::from_static(b"ok"))) }
            },
        )
        .await;
        open.close().await;
    });

    // Warm up: the runtime's and the listener's own allocations.
    let mut open = Vec::new();
    for _ in 0..20 {
        open.push(served(addr).await);
    }
    all_parked(&parked, 20).await;
    let before = NET.load(Ordering::Relaxed);
    for _ in 0..CONNECTIONS {
        open.push(served(addr).await);
    }
    // An idle connection parks after 100 ms.
    all_parked(&parked, 20 + CONNECTIONS as i64).await;
    let per_connection = (NET.load(Ordering::Relaxed) - before) / CONNECTIONS;
    eprintln!(
        "an idle keep-alive connection holds {per_connection} bytes (both ends' sockets included)"
    );
    assert!(
        per_connection < 4 * 1024,
        "{per_connection} bytes per idle connection"
    );

    // Each is served again.
    for stream in open.iter_mut().step_by(37) {
        request(stream).await;
    }
    drop(open);
    let _ = stop.send(());
    server.await.unwrap();
}
