//! `hookgate backup` of the embedded store while its gateway serves
//! (docs/operations.md, "Backups"): taken under load, verified, and
//! restored — a gateway started on the copy replays what was done before
//! it, forwarding none of it again.

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use http::StatusCode;

use crate::support::*;

fn backup(config: &std::path::Path, to: &std::path::Path) -> (Option<i32>, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .args(["backup", "--config"])
        .arg(config)
        .arg("--to")
        .arg(to)
        .env("TEST_SECRET", SECRET)
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_under_load_restores_and_replays_what_was_done() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live.db");
    let text = config_text(&upstream.url("/"), &Backend::Embedded(live.clone()), "", "");
    let (config, port) = write_config(dir.path(), &text);
    let mut gateway = GatewayProcess::start(&config, port).await;
    let sender = Sender::new();
    let done: Vec<String> = (0..200).map(|i| format!("evt_before_{i}")).collect();
    for id in &done {
        // A sender retries what a loaded machine's store deadline refused.
        let answer = sender
            .deliver_until_settled(&gateway.url("/hook"), &event(id))
            .await;
        assert_eq!(answer.status, StatusCode::OK);
    }

    // New events keep arriving while the copy is taken.
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (stop, url) = (Arc::clone(&stop), gateway.url("/hook"));
        tokio::spawn(async move {
            let mut sent = 0;
            while !stop.load(Ordering::SeqCst) {
                let answer = Sender::new()
                    .deliver_until_settled(&url, &event(&format!("evt_during_{sent}")))
                    .await;
                assert_eq!(answer.status, StatusCode::OK);
                sent += 1;
            }
            sent
        })
    };
    while upstream.total() < 250 {
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let copy = dir.path().join("copy.db");
    let (code, said, err) = tokio::task::block_in_place(|| backup(&config, &copy));
    assert_eq!(code, Some(0), "{err}");
    assert!(said.contains("verified"), "{said}");
    let records: u64 = said
        .split_whitespace()
        .nth(2)
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(records >= 250, "every commit before it: {said}");
    stop.store(true, Ordering::SeqCst);
    let during = load.await.unwrap();
    assert!(during > 0);
    let (code, _, err) = tokio::task::block_in_place(|| backup(&config, &copy));
    assert_eq!(code, Some(1), "never over an existing file");
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(gateway.stop("TERM").code(), Some(0));

    // Restore: a gateway on the copy alone (no -wal beside it).
    let restored_dir = tempfile::tempdir().unwrap();
    let restored = restored_dir.path().join("restored.db");
    std::fs::copy(&copy, &restored).unwrap();
    // The same config (the same key_prefix), on the restored file.
    let text = text.replace(&*live.to_string_lossy(), &restored.to_string_lossy());
    let (config, port) = write_config(restored_dir.path(), &text);
    let mut gateway = GatewayProcess::start(&config, port).await;
    for id in &done {
        let answer = sender.deliver(&gateway.url("/hook"), &event(id)).await;
        assert!(answer.replayed(), "{id} replayed from the copy: {answer:?}");
        assert_eq!(upstream.count(id), 1, "{id} not forwarded again");
    }
    assert_eq!(gateway.stop("TERM").code(), Some(0));
}

#[test]
fn a_backup_of_a_shared_store_says_to_use_its_own_tools() {
    let dir = tempfile::tempdir().unwrap();
    let text = config_text("http://127.0.0.1:9/", &Backend::Memory, "", "");
    let (config, _) = write_config(dir.path(), &text);
    let (code, _, err) = backup(&config, &dir.path().join("x.db"));
    assert_eq!(code, Some(1));
    assert!(err.contains("the store is memory"), "{err}");
}
