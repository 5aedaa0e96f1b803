//! Reloads against the real binary: routes appear without dropping traffic,
//! a broken file changes nothing, a rotated certificate reaches new
//! connections — by SIGHUP, by `hookgate reload` (which says whether it
//! took), and by the file watcher (a Kubernetes-style Secret swap, a
//! certificate rewritten in place). And `drain_delay` on SIGTERM.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{StatusCode, Version};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::*;

fn hup(gateway: &GatewayProcess) {
    let status = std::process::Command::new("kill")
        .args(["-HUP", &gateway.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

fn with_admin(text: &str, port: u16) -> String {
    text.replace(
        "[store]",
        &format!("[admin]\nlisten = \"127.0.0.1:{port}\"\n\n[store]"),
    )
}

/// The test config to `upstream` with an admin listener on `admin_port`
/// and `lines` added to `[server]`.
fn with_server_lines(upstream: &Upstream, admin_port: u16, lines: &str) -> String {
    with_admin(
        &config_text(&upstream.url("/"), &Backend::Memory, "", ""),
        admin_port,
    )
    .replace(
        "shutdown_grace = \"2s\"",
        &format!("shutdown_grace = \"2s\"\n{lines}"),
    )
}

async fn reloads(admin_port: u16, result: &str) -> f64 {
    let body = scrape(&format!("http://127.0.0.1:{admin_port}/metrics")).await;
    sample(
        &body,
        "hookgate_config_reloads_total",
        &[("result", result)],
    )
    .unwrap_or(-1.0)
}

/// The binary on a memory store with an admin listener, its config in a
/// temp dir: (dir, config path, admin port, process).
async fn start_with_admin(
    upstream: &Upstream,
) -> (tempfile::TempDir, std::path::PathBuf, u16, GatewayProcess) {
    let dir = tempfile::tempdir().unwrap();
    let admin_port = free_port();
    let text = with_admin(
        &config_text(&upstream.url("/"), &Backend::Memory, "", ""),
        admin_port,
    );
    let (path, port) = write_config(dir.path(), &text);
    let gateway = GatewayProcess::start(&path, port).await;
    (dir, path, admin_port, gateway)
}

/// A second route goes live while deliveries keep flowing; none fails.
#[tokio::test]
async fn a_route_added_on_sighup_goes_live_without_dropping_requests() {
    let upstream = Upstream::start().await;
    let (_dir, path, admin_port, gateway) = start_with_admin(&upstream).await;

    let running = Arc::new(AtomicBool::new(true));
    let stream = {
        let (running, url) = (Arc::clone(&running), gateway.url("/hook"));
        tokio::spawn(async move {
            let sender = Sender::new();
            let mut statuses = Vec::new();
            let mut n = 0;
            while running.load(Ordering::Relaxed) {
                n += 1;
                statuses.push(
                    sender
                        .deliver(&url, &event(&format!("evt_stream_{n}")))
                        .await
                        .status,
                );
            }
            statuses
        })
    };
    // Deliveries flow before the reload...
    assert!(eventually(Duration::from_secs(5), || ready(upstream.total() >= 5)).await);
    let second = std::fs::read_to_string(&path).unwrap()
        + "\n[[routes]]\nname = \"second\"\npath = \"/second\"\nupstream = \"http://127.0.0.1:9/\"\n\
           key = [\"json:/id\"]\n[routes.verify]\nscheme = \"none\"\n";
    std::fs::write(&path, second).unwrap();
    let before = Sender::new()
        .deliver(&gateway.url("/second"), &event("evt_2"))
        .await;
    assert_eq!(before.code(), "route_not_found");
    hup(&gateway);

    let live = eventually(Duration::from_secs(5), || async {
        let answer = Sender::new()
            .deliver(&gateway.url("/second"), &event("evt_2"))
            .await;
        // The new route's upstream is a closed port: it answers 502.
        answer.code() == "upstream_unreachable"
    });
    assert!(live.await, "the added route went live");
    // ...and after it.
    let at_reload = upstream.total();
    assert!(
        eventually(Duration::from_secs(5), || ready(
            upstream.total() >= at_reload + 5
        ))
        .await
    );
    running.store(false, Ordering::Relaxed);
    let statuses = stream.await.unwrap();
    assert!(
        statuses.len() > 10,
        "the stream kept flowing ({})",
        statuses.len()
    );
    assert!(
        statuses.iter().all(|s| *s == StatusCode::OK),
        "a request failed during reload: {statuses:?}"
    );
    assert_eq!(reloads(admin_port, "success").await, 1.0);
}

/// A broken file is rejected, loudly, and the running config keeps serving.
#[tokio::test]
async fn a_broken_config_leaves_the_old_one_serving() {
    let upstream = Upstream::start().await;
    let (_dir, path, admin_port, mut gateway) = start_with_admin(&upstream).await;

    let broken = std::fs::read_to_string(&path)
        .unwrap()
        .replace("[[routes]]", "[[routes]]\nupstraem = \"typo\"");
    std::fs::write(&path, broken).unwrap();
    hup(&gateway);
    // At least once: the file watcher may notice the change as well.
    let counted = eventually(Duration::from_secs(10), || async {
        reloads(admin_port, "failure").await >= 1.0
    })
    .await;
    assert!(
        counted,
        "the failed reload is counted (hookgate: {:?})",
        gateway.child.try_wait()
    );
    let answer = Sender::new()
        .deliver(&gateway.url("/hook"), &event("evt_still"))
        .await;
    assert_eq!(answer.status, StatusCode::OK, "old routes still serve");
    assert_eq!(reloads(admin_port, "success").await, 0.0);

    gateway.stop("TERM");
    let logs = gateway.logs();
    assert!(
        logs.contains("config reload rejected") && logs.contains("routes[0].upstraem"),
        "{logs}"
    );
}

/// New connections get the rotated certificate after SIGHUP.
#[tokio::test]
async fn a_rotated_certificate_is_served_to_new_connections() {
    rotate_certificate(true).await;
}

/// …and, without any signal, once the watcher sees the files change (a
/// cert-manager renewal rewriting the mounted files).
#[tokio::test]
async fn a_renewed_certificate_is_picked_up_by_the_watcher() {
    rotate_certificate(false).await;
}

/// Rotate the served certificate; `hup`: send SIGHUP, else wait for the
/// watcher.
async fn rotate_certificate(hup_it: bool) {
    let old_ca = Pki::new("old");
    let new_ca = Pki::new("new");
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let (old_cert, old_key) = old_ca.leaf("gateway");
    std::fs::copy(&old_cert, &cert).unwrap();
    std::fs::copy(&old_key, &key).unwrap();
    let text = config_text(&upstream.url("/"), &Backend::Memory, "", "").replace(
        "shutdown_grace",
        &format!(
            "tls = {{ cert = \"{}\", key = \"{}\" }}\nshutdown_grace",
            cert.display(),
            key.display()
        ),
    );
    let (path, port) = write_config(dir.path(), &text);
    let gateway = GatewayProcess::start(&path, port).await;
    let url = format!("https://localhost:{port}/hook");

    let trusting_new = new_ca.sender(Version::HTTP_11);
    assert!(old_ca
        .sender(Version::HTTP_11)
        .send(signed(&url, &event("evt_a")))
        .await
        .is_ok());
    assert!(trusting_new
        .send(signed(&url, &event("evt_b")))
        .await
        .is_err());

    let (new_cert, new_key) = new_ca.leaf("gateway");
    std::fs::copy(&new_cert, &cert).unwrap();
    std::fs::copy(&new_key, &key).unwrap();
    if hup_it {
        hup(&gateway);
    }
    let tries = std::sync::atomic::AtomicUsize::new(0);
    let rotated = eventually(Duration::from_secs(10), || async {
        let i = tries.fetch_add(1, Ordering::Relaxed);
        let sent = (new_ca.sender(Version::HTTP_11))
            .send(signed(&url, &event(&format!("evt_c{i}"))))
            .await;
        sent.is_ok_and(|(answer, _)| answer.status == StatusCode::OK)
    });
    assert!(rotated.await, "new connections see the new certificate");
    assert!(old_ca
        .sender(Version::HTTP_11)
        .send(signed(&url, &event("evt_d")))
        .await
        .is_err());
}

/// What a reload cannot change is reported, and the running value stays.
#[tokio::test]
async fn restart_only_changes_are_reported() {
    let upstream = Upstream::start().await;
    let text = config_text(&upstream.url("/"), &Backend::Memory, "", "");
    let app = hookgate::App::new(&parse_config(&text), clock())
        .await
        .unwrap();
    let changed = text
        .replace("timeout = \"300ms\"", "timeout = \"900ms\"")
        .replace("listen = \"127.0.0.1:0\"", "listen = \"127.0.0.1:1\"")
        .replace("path = \"/hook\"", "path = \"/moved\"")
        .replace(
            "shutdown_grace = \"2s\"",
            "shutdown_grace = \"3s\"\nheader_read_timeout = \"4s\"\nmax_connections = 7",
        )
        .replace("key_prefix = \"t", "key_prefix = \"moved-t");
    let needs_restart = app.reloader().apply(&parse_config(&changed));
    assert_eq!(
        needs_restart,
        [
            "server.listen",
            "server.header_read_timeout",
            "server.shutdown_grace",
            "server.max_connections",
            "[store]",
            "store.key_prefix",
        ]
    );
    assert!(
        app.parts
            .routes
            .named("hook")
            .is_some_and(|route| route.path == "/moved"),
        "routes were swapped"
    );
}

/// A reload of `text` on the running test gateway; nothing needs a restart.
fn reload(gateway: &TestGateway, text: &str) {
    let needs_restart = gateway.reloader.apply(&parse_config(text));
    assert_eq!(needs_restart, Vec::<String>::new(), "all of it is live");
}

/// Routes and secrets: a moved path and a withdrawn secret apply to the next
/// request.
#[tokio::test]
async fn routes_and_secrets_are_live() {
    let upstream = Upstream::start().await;
    let text = config_text(&upstream.url("/"), &Backend::Memory, "", "");
    let gateway = TestGateway::start(&text).await;
    let sender = Sender::new();
    let deliver = |path: &str, id: &str| {
        let (url, body) = (gateway.url(path), event(id));
        let sender = sender.clone();
        async move { sender.deliver(&url, &body).await }
    };
    assert_eq!(deliver("/hook", "evt_1").await.status, StatusCode::OK);

    let moved = text.replace("path = \"/hook\"", "path = \"/moved\"");
    reload(&gateway, &moved);
    assert_eq!(deliver("/hook", "evt_2").await.code(), "route_not_found");
    assert_eq!(deliver("/moved", "evt_2").await.status, StatusCode::OK);

    // The test secret withdrawn: only the old one is left.
    let rotated = moved.replace(", \"${TEST_SECRET}\"", "");
    reload(&gateway, &rotated);
    assert_eq!(deliver("/moved", "evt_3").await.code(), "signature_invalid");
    assert_eq!(upstream.total(), 2);
    gateway.shutdown().await;
}

/// `server.max_body_bytes` and `server.body_read_timeout` bound the next
/// request after a reload.
#[tokio::test]
async fn request_limits_are_live() {
    let upstream = Upstream::start().await;
    let text = config_text(&upstream.url("/"), &Backend::Memory, "", "");
    let gateway = TestGateway::start(&text).await;
    let sender = Sender::new();
    let big = |id: &str| format!(r#"{{"id":"{id}","pad":"{}"}}"#, "x".repeat(2000));
    let url = gateway.url("/hook");
    assert_eq!(
        sender.deliver(&url, &big("evt_a")).await.status,
        StatusCode::OK
    );

    reload(
        &gateway,
        &text.replace(
            "max_body_bytes = 4096",
            "max_body_bytes = 1024\nbody_read_timeout = \"300ms\"",
        ),
    );
    assert_eq!(
        sender.deliver(&url, &big("evt_b")).await.code(),
        "body_too_large"
    );

    // A sender that stops halfway through its body is cut off after 300 ms.
    let started = tokio::time::Instant::now();
    let mut stream = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
    let head = "POST /hook HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"id\":";
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = vec![0; 1024];
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut answer))
        .await
        .expect("answered before the old 30 s timeout")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..read]);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("body_timeout"), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(upstream.total(), 1);
    gateway.shutdown().await;
}

/// `store.on_error` applies at once: with the store down, a reload to
/// "forward" lets deliveries through, and it is not reported as needing a
/// restart.
#[tokio::test]
async fn store_on_error_is_live() {
    let Some(mut redis) = RedisServer::start().await else {
        return;
    };
    let upstream = Upstream::start().await;
    let text = config_text(&upstream.url("/"), &Backend::Redis(redis.url()), "", "");
    let gateway = TestGateway::start(&text).await;
    let sender = Sender::new();
    redis.kill();
    let url = gateway.url("/hook");
    assert_eq!(
        sender.deliver(&url, &event("evt_1")).await.code(),
        "store_unavailable"
    );

    reload(
        &gateway,
        &text.replace("[store]", "[store]\non_error = \"forward\""),
    );
    assert_eq!(
        sender.deliver(&url, &event("evt_2")).await.status,
        StatusCode::OK
    );
    assert_eq!(upstream.count("evt_2"), 1);
    assert_eq!(upstream.count("evt_1"), 0);
    gateway.shutdown().await;
}

/// A reload keeps the pooled upstream connection of a route whose upstream
/// did not change; a route moved to another upstream goes there.
#[tokio::test]
async fn a_reload_keeps_upstream_keep_alive_connections() {
    let upstream = Upstream::start().await;
    let text = config_text(&upstream.url("/"), &Backend::Memory, "", "");
    let gateway = TestGateway::start(&text).await;
    let sender = Sender::new();
    let url = gateway.url("/hook");
    assert_eq!(
        sender.deliver(&url, &event("evt_1")).await.status,
        StatusCode::OK
    );
    assert_eq!(upstream.connections(), 1);

    reload(
        &gateway,
        &text.replace("upstream_timeout = \"5s\"", "upstream_timeout = \"6s\""),
    );
    assert_eq!(
        sender.deliver(&url, &event("evt_2")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        upstream.connections(),
        1,
        "the pooled connection was reused"
    );

    let other = Upstream::start().await;
    reload(&gateway, &text.replace(&upstream.url("/"), &other.url("/")));
    assert_eq!(
        sender.deliver(&url, &event("evt_3")).await.status,
        StatusCode::OK
    );
    assert_eq!((upstream.total(), other.total()), (2, 1));
    gateway.shutdown().await;
}

/// A `${file:…}` secret in a Kubernetes-style Secret volume (files behind a
/// `..data` symlink that an update swaps atomically): the watcher reloads
/// it without a signal, and the rotated secret verifies.
#[tokio::test]
async fn a_secret_volume_update_is_reloaded_by_the_watcher() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let volume = dir.path().join("secrets");
    let write_version = |name: &str, secret: &str| {
        let version = volume.join(name);
        std::fs::create_dir_all(&version).unwrap();
        std::fs::write(version.join("webhook"), format!("{secret}\n")).unwrap();
        // What the kubelet does: a new ..data link, renamed over the old.
        let link = volume.join("..data_tmp");
        std::os::unix::fs::symlink(name, &link).unwrap();
        std::fs::rename(&link, volume.join("..data")).unwrap();
    };
    std::fs::create_dir_all(&volume).unwrap();
    write_version("..2026_01", SECRET);
    std::os::unix::fs::symlink("..data/webhook", volume.join("webhook")).unwrap();
    let admin_port = free_port();
    let text = with_admin(
        &config_text(&upstream.url("/"), &Backend::Memory, "", ""),
        admin_port,
    )
    .replace(
        "secrets = [\"old-secret-0123456789\", \"${TEST_SECRET}\"]",
        &format!(
            "secrets = [\"${{file:{}}}\"]",
            volume.join("webhook").display()
        ),
    );
    let (path, port) = write_config(dir.path(), &text);
    let gateway = GatewayProcess::start(&path, port).await;
    let url = gateway.url("/hook");
    let sender = Sender::new();
    assert_eq!(
        sender.deliver(&url, &event("evt_file_1")).await.status,
        StatusCode::OK
    );

    // Rotate to a secret the test signs with by hand.
    let rotated = "rotated-secret-0123456789";
    write_version("..2026_02", rotated);
    let signed_with = |secret: &str, id: &str| {
        let body = event(id);
        let mut mac =
            <hmac::Hmac<sha2::Sha256> as hmac::Mac>::new_from_slice(secret.as_bytes()).unwrap();
        hmac::Mac::update(&mut mac, body.as_bytes());
        let signature = format!(
            "sha256={}",
            hex::encode(hmac::Mac::finalize(mac).into_bytes())
        );
        http::Request::post(&url)
            .header("x-signature", signature)
            .body(http_body_util::Full::new(bytes::Bytes::from(body)))
            .unwrap()
    };
    let tries = std::sync::atomic::AtomicUsize::new(0);
    let picked_up = eventually(Duration::from_secs(15), || async {
        let i = tries.fetch_add(1, Ordering::Relaxed);
        let answer = sender
            .send(signed_with(rotated, &format!("evt_file_r{i}")))
            .await;
        assert!(answer.status == StatusCode::OK || answer.code() == "signature_invalid");
        answer.status == StatusCode::OK
    });
    assert!(
        picked_up.await,
        "the rotated secret verifies without a signal"
    );
    let old = sender.deliver(&url, &event("evt_file_old")).await;
    assert_eq!(old.code(), "signature_invalid", "the old secret is gone");
    assert_eq!(reloads(admin_port, "success").await, 1.0);
    let metrics = scrape(&format!("http://127.0.0.1:{admin_port}/metrics")).await;
    let stamped = sample(
        &metrics,
        "hookgate_config_last_reload_success_timestamp_seconds",
        &[],
    )
    .unwrap();
    let now = hookgate::clock::wall()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        now - stamped < 30.0,
        "stamped at the reload: {stamped} vs {now}"
    );
}

/// `hookgate reload` applies a good file and exits 0; a broken one is
/// rejected, the problems printed and the exit code 1 — where SIGHUP
/// would have said nothing.
#[tokio::test]
async fn hookgate_reload_says_whether_the_config_was_applied() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let admin_port = free_port();
    let text = with_server_lines(&upstream, admin_port, "watch = false").replace(
        &format!("listen = \"127.0.0.1:{admin_port}\"\n"),
        &format!("listen = \"127.0.0.1:{admin_port}\"\ntoken = \"{ADMIN_TOKEN}\"\n"),
    );
    let (path, port) = write_config(dir.path(), &text);
    let _gateway = GatewayProcess::start(&path, port).await;
    let token_file = dir.path().join("admin-token");
    std::fs::write(&token_file, format!("{ADMIN_TOKEN}\n")).unwrap();
    let reload = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
            .arg("reload")
            .env(
                "HOOKGATE_ADMIN_URL",
                format!("http://127.0.0.1:{admin_port}"),
            )
            .env_remove("HOOKGATE_ADMIN_TOKEN")
            .env("HOOKGATE_ADMIN_TOKEN_FILE", &token_file)
            .env("TEST_SECRET", SECRET)
            .output()
            .unwrap()
    };
    let good = reload();
    assert!(
        good.status.success(),
        "{}",
        String::from_utf8_lossy(&good.stderr)
    );
    assert!(String::from_utf8_lossy(&good.stdout).contains("reloaded"));

    let broken = std::fs::read_to_string(&path)
        .unwrap()
        .replace("[[routes]]", "[[routes]]\nupstraem = \"typo\"");
    std::fs::write(&path, broken).unwrap();
    let rejected = reload();
    assert_eq!(rejected.status.code(), Some(1));
    let said = String::from_utf8_lossy(&rejected.stderr);
    assert!(
        said.contains("routes[0].upstraem") && said.contains("config_invalid"),
        "{said}"
    );
    assert_eq!(reloads(admin_port, "success").await, 1.0);
    assert_eq!(reloads(admin_port, "failure").await, 1.0);
    let still = Sender::new()
        .deliver(
            &format!("http://127.0.0.1:{port}/hook"),
            &event("evt_still"),
        )
        .await;
    assert_eq!(still.status, StatusCode::OK, "the running config serves on");
}

/// `drain_delay`: on SIGTERM `/readyz` turns 503 at once while the public
/// listener still takes deliveries; then the process drains and exits 0.
#[tokio::test]
async fn drain_delay_keeps_accepting_while_readiness_is_down() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let admin_port = free_port();
    let text = with_server_lines(&upstream, admin_port, "drain_delay = \"1500ms\"");
    let (path, port) = write_config(dir.path(), &text);
    let mut gateway = GatewayProcess::start(&path, port).await;
    let readyz = format!("http://127.0.0.1:{admin_port}/readyz");
    assert_eq!(get(&readyz, None).await.status, StatusCode::OK);
    let started = tokio::time::Instant::now();
    std::process::Command::new("kill")
        .args(["-TERM", &gateway.child.id().to_string()])
        .status()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(1), || async {
            get(&readyz, None).await.status == StatusCode::SERVICE_UNAVAILABLE
        })
        .await,
        "readiness turns 503 first"
    );
    let during = Sender::new()
        .deliver(&gateway.url("/hook"), &event("evt_during_drain"))
        .await;
    assert_eq!(during.status, StatusCode::OK, "still accepting");
    assert!(started.elapsed() < Duration::from_millis(1500));
    let status = gateway.child.wait().unwrap();
    assert!(status.success());
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "waited drain_delay"
    );
    assert_eq!(upstream.count("evt_during_drain"), 1);
}
