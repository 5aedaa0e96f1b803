//! Live reload (SIGHUP): re-read the config file and swap in what can change
//! without a restart — routes, secrets, request limits and the TLS
//! certificate — atomically. New connections and new requests use the new
//! config; requests already running finish on the one they started with.
//!
//! An invalid file changes nothing: the error is logged with its location and
//! the old config keeps serving. What a reload may change is the config's
//! [`Live`](crate::config::Live) part; everything in
//! [`Fixed`](crate::config::Fixed) — listeners, connection limits, the admin
//! listener, the store, switching TLS on or off — is logged as needing a
//! restart and keeps its running value. Every attempt is counted in
//! `hookgate_config_reloads_total{result}`.

use std::path::Path;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use crate::config::{Config, Fixed};
use crate::pipeline::Gateway;

/// Applies new configs to a running gateway.
pub struct Reloader {
    gateway: Arc<Gateway>,
    tls: Option<Arc<ArcSwap<rustls::ServerConfig>>>,
    /// The restart-only settings the process runs with.
    running: Mutex<Fixed>,
}

impl Reloader {
    pub fn new(
        gateway: Arc<Gateway>,
        tls: Option<Arc<ArcSwap<rustls::ServerConfig>>>,
        config: &Config,
    ) -> Self {
        Self {
            gateway,
            tls,
            running: Mutex::new(config.fixed.clone()),
        }
    }

    /// Load `path` and apply it; on error nothing changes.
    pub fn reload_file(&self, path: &Path) -> Result<(), String> {
        let counter = &self.gateway.metrics().config_reloads;
        match Config::load(path) {
            Ok(config) => {
                self.apply(&config);
                counter.with_label_values(&["success"]).inc();
                Ok(())
            }
            Err(error) => {
                counter.with_label_values(&["failure"]).inc();
                tracing::error!(
                    "config reload rejected, the running config keeps serving:\n{error}"
                );
                Err(error.to_string())
            }
        }
    }

    /// Swap in everything live from `config`; returns the restart-only
    /// settings it would change (also logged), which keep their running
    /// values.
    pub fn apply(&self, config: &Config) -> Vec<String> {
        let running = self
            .running
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let needs_restart = config.fixed.changes_from(&running);
        for setting in &needs_restart {
            tracing::warn!(
                setting,
                "config change needs a restart; the running value stays"
            );
        }
        for warning in &config.warnings {
            tracing::warn!("{warning}");
        }

        self.gateway.reload(&config.live);
        if let (Some(current), Some(new)) = (&self.tls, &config.live.tls) {
            current.store(Arc::clone(&new.config));
        }
        tracing::info!(routes = config.live.routes.len(), "config reloaded");
        needs_restart
    }
}
