//! The binary as an operator runs it: `check`, `run`, signals, exit codes.

use std::process::Command;

use http::{Method, StatusCode};

use crate::support::*;

const BIN: &str = env!("CARGO_BIN_EXE_hookgate");

fn example() -> String {
    format!("{}/gateway.toml.example", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn check_accepts_the_shipped_example() {
    let output = Command::new(BIN)
        .args(["check", "--config", &example()])
        .env("ORDERS_WEBHOOK_SECRET", "example-secret-0123456789")
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
        !stdout.contains("example-secret-0123456789"),
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
    let text = config_text(&upstream.url("/"), &Backend::Memory, "", "");
    let (path, port) = write_config(dir.path(), &text);
    let mut gateway = GatewayProcess::start(&path, port).await;
    let answer = Sender::new()
        .deliver(&gateway.url("/hook"), &event("evt_cli"))
        .await;
    assert_eq!(answer.status, StatusCode::OK);

    let busy = Command::new(BIN)
        .args(["run", "--config", path.to_str().unwrap()])
        .env("TEST_SECRET", SECRET)
        .output()
        .unwrap();
    assert_eq!(busy.status.code(), Some(1), "cannot bind: runtime failure");

    assert_eq!(gateway.stop("TERM").code(), Some(0));
    let logs = gateway.logs();
    let line = logs
        .lines()
        .find(|line| line.contains("\"outcome\":\"forwarded\""))
        .unwrap_or_else(|| panic!("no request line in {logs}"));
    let line: serde_json::Value = serde_json::from_str(line).expect("one JSON object per line");
    assert_eq!(line["route"], "hook");
    assert_eq!(line["key"], "evt_cli");
    assert_eq!(line["status"], 200);
    assert_eq!(line["request_id"].as_str().map(str::len), Some(32));
    assert!(line["upstream_ms"].as_f64().is_some());
    assert!(!logs.contains(SECRET), "secrets are never logged");
}

/// Log fields are values: the start-up line names the admin listener as an
/// address, not as Rust's `Some(…)`; and the admin API takes the bearer
/// scheme in any case (RFC 9110 §11.1).
#[tokio::test]
async fn log_fields_are_values_and_the_bearer_scheme_is_case_insensitive() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let admin_port = free_port();
    let text = with_admin(
        &config_text(&upstream.url("/"), &Backend::Memory, "", ""),
        true,
    )
    .replace(
        "127.0.0.1:0\"\ntoken",
        &format!("127.0.0.1:{admin_port}\"\ntoken"),
    );
    let (path, port) = write_config(dir.path(), &text);
    let mut gateway = GatewayProcess::start(&path, port).await;
    let url = format!("http://127.0.0.1:{admin_port}/admin/routes");
    for scheme in ["bearer", "BEARER", "Bearer"] {
        let auth = format!("{scheme} {ADMIN_TOKEN}");
        let answer = send(Method::GET, &url, &[("authorization", &auth)], "").await;
        assert_eq!(
            answer.status,
            StatusCode::OK,
            "{scheme}: {:?}",
            answer.json()
        );
    }
    let wrong = send(Method::GET, &url, &[("authorization", "bearer nope")], "").await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert_eq!(gateway.stop("TERM").code(), Some(0));
    let logs = gateway.logs();
    let line = logs
        .lines()
        .find(|line| line.contains("hookgate is serving"))
        .unwrap_or_else(|| panic!("no start-up line in {logs}"));
    let line: serde_json::Value = serde_json::from_str(line).expect("one JSON object per line");
    assert_eq!(line["admin"], format!("127.0.0.1:{admin_port}"), "{line}");
}

/// The embedded store keeps its promise across restarts: after SIGTERM and
/// after SIGKILL, a duplicate of a completed event is replayed byte for byte.
#[tokio::test]
async fn the_embedded_store_survives_restarts_and_sigkill() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let text = config_text(&upstream.url("/"), &Backend::Embedded(db.clone()), "", "");
    let (path, port) = write_config(dir.path(), &text);
    let sender = Sender::new();

    for (i, signal) in ["TERM", "KILL"].into_iter().enumerate() {
        let id = format!("evt_restart_{i}");
        let mut gateway = GatewayProcess::start(&path, port).await;
        let first = sender.deliver(&gateway.url("/hook"), &event(&id)).await;
        assert_eq!(first.status, StatusCode::OK);
        let status = gateway.stop(signal);
        if signal == "TERM" {
            assert_eq!(status.code(), Some(0));
        }

        let _again = GatewayProcess::start(&path, port).await;
        let replay = sender.deliver(&_again.url("/hook"), &event(&id)).await;
        assert!(replay.replayed(), "after SIG{signal}: {replay:?}");
        assert_eq!(replay.body, first.body, "identical body after SIG{signal}");
        assert_eq!(upstream.count(&id), 1);
    }
}

/// Two gateways on one SQLite file would each think they own it: the second
/// refuses to start and says why.
#[tokio::test]
async fn a_second_gateway_on_the_same_file_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shared.db");
    let text = config_text("http://127.0.0.1:9/", &Backend::Embedded(db), "", "");
    let (path, port) = write_config(dir.path(), &text);
    let _first = GatewayProcess::start(&path, port).await;

    let other = dir.path().join("other.toml");
    std::fs::write(
        &other,
        std::fs::read_to_string(&path)
            .unwrap()
            .replace(&port.to_string(), &free_port().to_string()),
    )
    .unwrap();
    let second = Command::new(BIN)
        .args([
            "run",
            "--log-format",
            "text",
            "--config",
            other.to_str().unwrap(),
        ])
        .env("TEST_SECRET", SECRET)
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(
        stderr.contains("in use by another hookgate process"),
        "{stderr}"
    );
}

/// `check --print-migrations` prints the PostgreSQL schema hookgate would
/// create, each version recorded, and nothing else (psql reads it as it is).
#[test]
fn check_prints_the_postgres_migrations() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .args([
            "check",
            "--print-migrations",
            "--config",
            "gateway.toml.example",
        ])
        .env("ORDERS_WEBHOOK_SECRET", "example-secret-0123456789")
        .output()
        .unwrap();
    assert!(output.status.success());
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(stdout.starts_with("-- hookgate's PostgreSQL"), "{stdout}");
    assert!(stdout.contains("-- version 1"), "{stdout}");
    assert!(stdout
        .contains("INSERT INTO hookgate_migrations (version) VALUES (1) ON CONFLICT DO NOTHING;"));
    assert!(stdout.contains("CREATE TABLE IF NOT EXISTS webhook_events"));
    assert!(stdout.contains("PRIMARY KEY (source, idempotency_key)"));
}
