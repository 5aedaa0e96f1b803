//! SIGHUP against the real binary: routes appear without dropping traffic,
//! a broken file changes nothing, a rotated certificate reaches new
//! connections.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{StatusCode, Version};

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
    tokio::time::sleep(Duration::from_millis(200)).await;
    let second = std::fs::read_to_string(&path).unwrap()
        + "\n[[routes]]\nname = \"second\"\npath = \"/second\"\nupstream = \"http://127.0.0.1:9/\"\n\
           key = [\"json:/id\"]\n[routes.verify]\nscheme = \"none\"\n";
    std::fs::write(&path, second).unwrap();
    let before = Sender::new()
        .deliver(&gateway.url("/second"), &event("evt_2"))
        .await;
    assert_eq!(before.code(), "route_not_found");
    hup(&gateway);

    let mut live = false;
    for _ in 0..100 {
        let answer = Sender::new()
            .deliver(&gateway.url("/second"), &event("evt_2"))
            .await;
        if answer.code() != "route_not_found" {
            // The new route's upstream is a closed port: it answers 502.
            assert_eq!(answer.code(), "upstream_unreachable");
            live = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(live, "the added route went live");
    tokio::time::sleep(Duration::from_millis(200)).await;
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
    let mut counted = false;
    for _ in 0..100 {
        if reloads(admin_port, "failure").await == 1.0 {
            counted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(counted, "the failed reload is counted");
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
    hup(&gateway);
    let mut rotated = false;
    for i in 0..100 {
        if let Ok((answer, _)) = new_ca
            .sender(Version::HTTP_11)
            .send(signed(&url, &event(&format!("evt_c{i}"))))
            .await
        {
            assert_eq!(answer.status, StatusCode::OK);
            rotated = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(rotated, "new connections see the new certificate");
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
    let app = hookgate::App::new(&parse_config(&text)).await.unwrap();
    let changed = text
        .replace("timeout = \"300ms\"", "timeout = \"900ms\"")
        .replace("listen = \"127.0.0.1:0\"", "listen = \"127.0.0.1:1\"")
        .replace("path = \"/hook\"", "path = \"/moved\"");
    let needs_restart = app.reloader().apply(&parse_config(&changed));
    assert_eq!(needs_restart.len(), 2, "{needs_restart:?}");
    assert!(needs_restart[0].starts_with("server.listen"));
    assert_eq!(needs_restart[1], "[store]");
    assert!(
        app.gateway
            .route("hook")
            .is_some_and(|route| route.path == "/moved"),
        "routes were swapped"
    );
}
