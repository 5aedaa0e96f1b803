//! `hookgate backup` of the embedded store while its gateway serves
//! (docs/operations/stores.md, "Backups"): taken under load, verified, and
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
    let flowing = eventually(std::time::Duration::from_secs(30), || {
        ready(upstream.total() >= 250)
    });
    assert!(flowing.await, "deliveries flow while the backup runs");
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

/// The backup files `dir` holds, by name (oldest first).
fn backups_in(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = (std::fs::read_dir(dir).unwrap().flatten())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("hookgate-") && name.ends_with(".db"))
        .collect();
    names.sort();
    names
}

/// `[store.backup]` as documented, with the real binary: backups every
/// second into `dir`, the newest two kept and nothing else there touched;
/// `/metrics` says when the last good one was written; a restart picks
/// the time up from `dir`; and the newest copy restores: a gateway on it
/// replays what was done, forwarding none of it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_backups_are_taken_kept_and_restore() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (live, kept) = (dir.path().join("live.db"), dir.path().join("backups"));
    std::fs::create_dir_all(&kept).unwrap();
    std::fs::write(kept.join("notes.txt"), "mine").unwrap();
    let admin_port = free_port();
    let text = with_admin_on(
        &config_text(&upstream.url("/"), &Backend::Embedded(live.clone()), "", ""),
        admin_port,
    )
    .replace(
        "[[routes]]",
        &format!(
            "[store.backup]\nevery = \"1s\"\ndir = \"{}\"\nkeep = 2\n\n[[routes]]",
            kept.display()
        ),
    );
    let (config, port) = write_config(dir.path(), &text);
    let mut gateway = GatewayProcess::start(&config, port).await;
    let sender = Sender::new();
    let done: Vec<String> = (0..20).map(|i| format!("evt_kept_{i}")).collect();
    for id in &done {
        let answer = sender
            .deliver_until_settled(&gateway.url("/hook"), &event(id))
            .await;
        assert_eq!(answer.status, StatusCode::OK);
    }
    let metrics_url = format!("http://127.0.0.1:{admin_port}/metrics");
    let ok = [("result", "ok")];
    let three_more = eventually(std::time::Duration::from_secs(20), || async {
        let metrics = scrape(&metrics_url).await;
        sample(&metrics, "hookgate_backups_total", &ok).unwrap_or(0.0) >= 3.0
    });
    assert!(three_more.await, "{}", gateway.logs());
    let metrics = scrape(&metrics_url).await;
    assert_eq!(
        sample(&metrics, "hookgate_backup_every_seconds", &[]),
        Some(1.0)
    );
    let now = hookgate::clock::wall()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let last = sample(
        &metrics,
        "hookgate_backup_last_success_timestamp_seconds",
        &[],
    )
    .unwrap();
    assert!(
        (now - last).abs() < 10.0,
        "last good backup at {last}, now {now}"
    );
    let names = backups_in(&kept);
    assert_eq!(names.len(), 2, "keep = 2: {names:?}");
    assert_eq!(
        std::fs::read_to_string(kept.join("notes.txt")).unwrap(),
        "mine"
    );
    assert_eq!(gateway.stop("TERM").code(), Some(0));

    // A restart knows the newest backup's time before it takes one.
    let slow =
        (std::fs::read_to_string(&config).unwrap()).replace("every = \"1s\"", "every = \"1h\"");
    std::fs::write(&config, &slow).unwrap();
    let mut gateway = GatewayProcess::start(&config, port).await;
    let metrics = scrape(&metrics_url).await;
    let known = sample(
        &metrics,
        "hookgate_backup_last_success_timestamp_seconds",
        &[],
    );
    assert!(known.is_some_and(|at| (now - at).abs() < 10.0), "{known:?}");
    assert_eq!(
        sample(&metrics, "hookgate_backups_total", &ok),
        None,
        "none due yet"
    );
    assert_eq!(gateway.stop("TERM").code(), Some(0));

    // The newest copy restores.
    let newest = kept.join(backups_in(&kept).pop().unwrap());
    let restored_dir = tempfile::tempdir().unwrap();
    let restored = restored_dir.path().join("restored.db");
    std::fs::copy(&newest, &restored).unwrap();
    // The same config (the same key_prefix), on the restored file.
    let text = (text.replace(&*live.to_string_lossy(), &restored.to_string_lossy())).replace(
        &*kept.to_string_lossy(),
        &restored_dir.path().to_string_lossy(),
    );
    let (config, port) = write_config(restored_dir.path(), &text);
    let mut gateway = GatewayProcess::start(&config, port).await;
    for id in &done {
        let answer = sender.deliver(&gateway.url("/hook"), &event(id)).await;
        assert!(answer.replayed(), "{id} replayed from the copy: {answer:?}");
        assert_eq!(upstream.count(id), 1, "{id} not forwarded again");
    }
    assert_eq!(gateway.stop("TERM").code(), Some(0));
}
