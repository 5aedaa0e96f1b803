//! The embedded store on a disk that fills up (docs/operations/deploying.md,
//! "Sizing"): deliveries answer 503 and nothing is forwarded or lost,
//! `/readyz` and `hookgate_store_up` say the store cannot write, and once
//! space is freed the gateway recovers by itself and the senders' retries
//! go through once.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use http::StatusCode;

use crate::support::*;

/// A tmpfs of a few MiB mounted on a new directory, unmounted when
/// dropped. Mounting needs root (CI's machine runs the tests as root).
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(bytes: u64) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={bytes}"))
            .arg("tmpfs")
            .arg(dir.path())
            .status()
            .is_ok_and(|status| status.success());
        if !mounted {
            assert!(
                std::env::var_os("CI").is_none(),
                "cannot mount a tmpfs (CI runs the tests as root)"
            );
            eprintln!("skipped: mounting a tmpfs needs root");
            return None;
        }
        Some(SmallDisk { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Write a file until the disk is full; its path.
    fn fill(&self) -> PathBuf {
        let path = self.path().join("filler");
        let mut file = std::fs::File::create(&path).unwrap();
        let chunk = vec![0u8; 16 * 1024];
        while file.write_all(&chunk).and_then(|()| file.flush()).is_ok() {}
        // Down to the last bytes.
        while file.write_all(&[0u8; 512]).is_ok() {}
        path
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

async fn store_up(gateway: &TestGateway) -> Option<f64> {
    let metrics = scrape(&gateway.admin_url("/metrics")).await;
    sample(&metrics, "hookgate_store_up", &[])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_is_503_not_ready_and_recovers_losing_nothing() {
    let Some(disk) = SmallDisk::mount(8 << 20) else {
        return;
    };
    let upstream = Upstream::start().await;
    let path = disk.path().join("hookgate.db");
    let text = with_admin(
        &config_text(&upstream.url("/"), &Backend::Embedded(path), "", ""),
        false,
    );
    let gateway = TestGateway::start(&text).await;
    let (sender, url) = (Sender::new(), gateway.url("/hook"));
    for i in 0..20 {
        let answer = sender
            .deliver(&url, &event(&format!("evt_before_{i}")))
            .await;
        assert_eq!(answer.status, StatusCode::OK);
    }
    let filler = disk.fill();

    // Deliveries go on until the store cannot write; every one is either
    // done or refused, never answered 2xx without its record.
    let mut refused = Vec::new();
    for i in 0..2000 {
        let id = format!("evt_full_{i}");
        let answer = sender.deliver(&url, &event(&id)).await;
        match answer.status {
            StatusCode::OK => {}
            StatusCode::SERVICE_UNAVAILABLE => {
                assert_eq!(answer.code(), "store_unavailable", "{:?}", answer.json());
                refused.push(id);
                if refused.len() == 3 {
                    break;
                }
            }
            other => panic!("{id}: {other}"),
        }
    }
    assert_eq!(refused.len(), 3, "the full disk refused writes");
    for id in &refused {
        assert_eq!(upstream.count(id), 0, "{id}: refused before the upstream");
    }
    let not_ready = eventually(Duration::from_secs(5), || async {
        let ready = get(&gateway.admin_url("/readyz"), None).await;
        ready.status == StatusCode::SERVICE_UNAVAILABLE
    });
    assert!(not_ready.await, "/readyz says the store cannot write");
    let ready = get(&gateway.admin_url("/readyz"), None).await;
    let said = ready.json()["store"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(said.contains("full"), "{said}");
    assert_eq!(store_up(&gateway).await, Some(0.0));

    // Space comes back: the gateway recovers by itself.
    std::fs::remove_file(filler).unwrap();
    let recovered = eventually(Duration::from_secs(10), || async {
        get(&gateway.admin_url("/readyz"), None).await.status == StatusCode::OK
    });
    assert!(recovered.await, "ready again once space is freed");
    assert_eq!(store_up(&gateway).await, Some(1.0));
    for id in &refused {
        let answer = sender.deliver(&url, &event(id)).await;
        assert_eq!(answer.status, StatusCode::OK, "{id}: the sender's retry");
        assert_eq!(upstream.count(id), 1, "{id}");
    }
    for i in 0..20 {
        let answer = sender
            .deliver(&url, &event(&format!("evt_before_{i}")))
            .await;
        assert!(answer.replayed(), "evt_before_{i} kept through it all");
    }
    gateway.shutdown().await;
}
