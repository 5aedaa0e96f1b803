//! The binary as an operator runs it: `check`, `run`, signals, exit codes.

use std::process::{Command, Stdio};
use std::time::Duration;

use http::StatusCode;

use crate::support::*;

const BIN: &str = env!("CARGO_BIN_EXE_hookgate");

fn example() -> String {
    format!("{}/gateway.toml.example", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn check_accepts_the_shipped_example() {
    let output = Command::new(BIN)
        .args(["check", "--config", &example()])
        .env("ORDERS_WEBHOOK_SECRET", "example-secret")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("/webhooks/orders"), "{stdout}");
    assert!(
        !stdout.contains("example-secret"),
        "secrets are never printed"
    );
}

#[test]
fn check_names_file_line_and_key_and_exits_2() {
    let output = Command::new(BIN)
        .args(["check", "--config", &example()])
        .env_remove("ORDERS_WEBHOOK_SECRET")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("gateway.toml.example:") && stderr.contains("routes[0].verify.secrets[0]: environment variable `ORDERS_WEBHOOK_SECRET` is not set"),
        "{stderr}"
    );

    let missing = Command::new(BIN)
        .args(["check", "--config", "/nonexistent.toml"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
}

#[test]
fn version_is_printed() {
    let output = Command::new(BIN).arg("--version").output().unwrap();
    assert!(String::from_utf8_lossy(&output.stdout).contains(env!("CARGO_PKG_VERSION")));
}

/// `hookgate run` serves, and SIGTERM stops it with exit 0; a port in use is
/// exit 1.
#[tokio::test]
async fn run_serves_until_sigterm() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let text = config_text(&upstream.url("/"), &Backend::Memory, "", "")
        .replace("127.0.0.1:0", &format!("127.0.0.1:{port}"));
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, text).unwrap();

    let mut child = Command::new(BIN)
        .args(["run", "--log-format", "json"])
        .env("HOOKGATE_CONFIG", &path)
        .env("TEST_SECRET", SECRET)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}/hook");
    let sender = Sender::new();
    let mut answered = false;
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            answered = sender.deliver(&url, &event("evt_cli")).await.status == StatusCode::OK;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(answered, "the gateway served a delivery");

    let busy = Command::new(BIN)
        .args(["run", "--config", path.to_str().unwrap()])
        .env("TEST_SECRET", SECRET)
        .output()
        .unwrap();
    assert_eq!(busy.status.code(), Some(1), "cannot bind: runtime failure");

    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let mut logs = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut logs).unwrap();
    assert!(logs.contains("\"outcome\":\"forwarded\""), "{logs}");
    assert!(!logs.contains(SECRET), "secrets are never logged");
}
