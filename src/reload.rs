//! Live reload: re-read the config file and swap in what can change without
//! a restart — routes, secrets, request limits and the TLS certificate —
//! atomically. New connections and new requests use the new config;
//! requests already running finish on the one they started with.
//!
//! A reload is asked for by SIGHUP, by `POST /admin/reload` (what `hookgate
//! reload` sends, so the caller learns whether it was applied), or by a
//! change to any file the config was built from (`server.watch`, see
//! [`watch`]). All three take the same path, one at a time.
//!
//! An invalid file changes nothing: the error is logged with its location and
//! the old config keeps serving. What a reload may change is the config's
//! [`Live`](crate::config::Live) part; everything in
//! [`Fixed`](crate::config::Fixed) — listeners, connection limits, the admin
//! listener, the store, switching TLS on or off — is logged as needing a
//! restart and keeps its running value. Every attempt is counted in
//! `hookgate_config_reloads_total{result}`, and a success stamps
//! `hookgate_config_last_reload_success_timestamp_seconds`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use sha2::{Digest, Sha256};

use crate::config::{Config, Fixed};
use crate::delivery::{Engine, Parts};

/// How often `server.watch` looks at the config's files.
pub const WATCH_EVERY: Duration = Duration::from_secs(2);

/// Applies new configs to a running gateway.
pub struct Reloader {
    gateway: Arc<Engine>,
    parts: Parts,
    tls: Option<Arc<ArcSwap<rustls::ServerConfig>>>,
    /// The config file a reload reads.
    path: PathBuf,
    /// What the process runs with; held for the whole of a reload, so
    /// reloads never interleave.
    running: Mutex<Running>,
}

struct Running {
    /// The restart-only settings.
    fixed: Fixed,
    /// The files the running config was built from.
    files: Vec<PathBuf>,
    /// What those files held when they were last loaded (or a load was
    /// rejected): the watcher reloads when they hold something else.
    seen: Fingerprint,
}

impl Reloader {
    pub fn new(
        gateway: Arc<Engine>,
        parts: Parts,
        tls: Option<Arc<ArcSwap<rustls::ServerConfig>>>,
        config: &Config,
    ) -> Self {
        parts.metrics.reloaded_at(parts.clock.now_ms());
        Self {
            gateway,
            parts,
            tls,
            path: config.source.clone(),
            running: Mutex::new(Running {
                fixed: config.fixed.clone(),
                files: config.files.clone(),
                seen: fingerprint(&config.files),
            }),
        }
    }

    /// Load the config file again and apply it: the restart-only settings
    /// it would change (they keep their running values). On error nothing
    /// changes and the error (every problem, located) is returned.
    pub fn reload(&self) -> Result<Vec<String>, String> {
        let mut running = self.lock();
        let counter = &self.parts.metrics.config_reloads;
        // Taken before the load: a file that changes during it differs
        // from `seen` afterwards, and the watcher loads it again.
        let before = fingerprint(&running.files);
        let shards = self.parts.store.shards();
        let loaded = Config::load(&self.path)
            .map_err(|error| error.to_string())
            .and_then(|config| match config.live.refuses_layout(shards) {
                Some(refusal) => Err(refusal),
                None => Ok(config),
            });
        match loaded {
            Ok(config) => {
                let reloaded = self.apply_locked(&mut running, &config);
                for (path, digest) in running.seen.iter_mut() {
                    if let Some((_, earlier)) = before.iter().find(|(known, _)| known == path) {
                        *digest = *earlier;
                    }
                }
                counter.with_label_values(&["success"]).inc();
                self.parts.metrics.config_last_reload_ok.set(1);
                self.parts.metrics.reloaded_at(self.parts.clock.now_ms());
                Ok(reloaded)
            }
            Err(error) => {
                running.seen = before;
                counter.with_label_values(&["failure"]).inc();
                self.parts.metrics.config_last_reload_ok.set(0);
                tracing::error!(
                    "config reload rejected, the running config keeps serving:\n{error}"
                );
                Err(error)
            }
        }
    }

    /// Swap in everything live from `config`; the restart-only settings it
    /// would change.
    pub fn apply(&self, config: &Config) -> Vec<String> {
        let mut running = self.lock();
        self.apply_locked(&mut running, config)
    }

    /// Whether a file the running config was built from now holds
    /// something else than when it was last loaded; what it holds.
    fn changed(&self) -> Option<Fingerprint> {
        let (files, seen) = {
            let running = self.lock();
            (running.files.clone(), running.seen.clone())
        };
        let now = fingerprint(&files);
        (now != seen).then_some(now)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Running> {
        self.running
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    fn apply_locked(&self, running: &mut Running, config: &Config) -> Vec<String> {
        let needs_restart = config.fixed.changes_from(&running.fixed);
        for setting in &needs_restart {
            tracing::warn!(
                setting,
                "config change needs a restart; the running value stays"
            );
        }
        for warning in &config.warnings {
            tracing::warn!("{warning}");
        }
        running.files = config.files.clone();
        running.seen = fingerprint(&config.files);

        self.gateway.reload(&config.live);
        if let (Some(current), Some(new)) = (&self.tls, &config.live.tls) {
            current.store(Arc::clone(&new.config));
            self.parts.metrics.tls_cert_expires(new.not_after);
        }
        tracing::info!(routes = config.live.routes.len(), "config reloaded");
        needs_restart
    }
}

/// What the watched files hold: each one's SHA-256, `None` when unreadable
/// (a Kubernetes volume mid-swap, a file being replaced).
type Fingerprint = Vec<(PathBuf, Option<[u8; 32]>)>;

fn fingerprint(files: &[PathBuf]) -> Fingerprint {
    files
        .iter()
        .map(|path| {
            let digest = std::fs::read(path)
                .ok()
                .map(|bytes| Sha256::digest(bytes).into());
            (path.clone(), digest)
        })
        .collect()
}

/// `server.watch`: every [`WATCH_EVERY`], compare the content of every file
/// the running config was built from — the config itself, `${file:…}`
/// secrets, the TLS certificate and key, CA bundles — with what it held
/// when last loaded (by any reload: SIGHUP and the admin API count too). A
/// change that has held still for one interval (so a file caught mid-write
/// is not loaded) is reloaded exactly as SIGHUP would. Contents, not
/// modification times, are compared: a Kubernetes ConfigMap or Secret
/// update swaps a symlink and a cert-manager renewal rewrites in place, and
/// both show. A rejected reload is not retried until the files change again.
pub async fn watch(reloader: Arc<Reloader>, every: Duration) {
    let mut pending: Option<Fingerprint> = None;
    loop {
        tokio::time::sleep(every).await;
        let looking = Arc::clone(&reloader);
        let Ok(changed) = tokio::task::spawn_blocking(move || looking.changed()).await else {
            continue;
        };
        let Some(now) = changed else {
            pending = None;
            continue;
        };
        if pending.as_ref() != Some(&now) {
            pending = Some(now);
            continue;
        }
        pending = None;
        tracing::info!("config files changed: reloading");
        let reloading = Arc::clone(&reloader);
        let _ = tokio::task::spawn_blocking(move || reloading.reload()).await;
    }
}
