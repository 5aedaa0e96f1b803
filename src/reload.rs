//! Live reload (SIGHUP): re-read the config file and swap in what can change
//! without a restart — routes, secrets, request limits and the TLS
//! certificate — atomically. New connections and new requests use the new
//! config; requests already running finish on the one they started with.
//!
//! An invalid file changes nothing: the error is logged with its location and
//! the old config keeps serving. Listen addresses, the admin listener, the
//! store, and switching TLS on or off are logged as needing a restart and
//! keep their running values. Every attempt is counted in
//! `hookgate_config_reloads_total{result}`.

use std::path::Path;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use crate::config::{AdminSettings, Config, StoreSettings};
use crate::pipeline::Gateway;

/// Applies new configs to a running gateway.
pub struct Reloader {
    gateway: Arc<Gateway>,
    tls: Option<Arc<ArcSwap<rustls::ServerConfig>>>,
    running: Mutex<RestartOnly>,
}

/// The settings a reload cannot change, as the process runs with them.
#[derive(PartialEq)]
struct RestartOnly {
    listen: std::net::SocketAddr,
    admin: Option<AdminSettings>,
    store: StoreSettings,
    tls: bool,
}

impl RestartOnly {
    fn of(config: &Config) -> Self {
        Self {
            listen: config.server.listen,
            admin: config.admin.clone(),
            store: config.store.clone(),
            tls: config.server.tls.is_some(),
        }
    }
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
            running: Mutex::new(RestartOnly::of(config)),
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

    /// Swap in everything reloadable from `config`; returns what needs a
    /// restart (also logged).
    pub fn apply(&self, config: &Config) -> Vec<String> {
        let running = self
            .running
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let wanted = RestartOnly::of(config);
        let mut needs_restart = Vec::new();
        if wanted.listen != running.listen {
            needs_restart.push(format!(
                "server.listen ({} -> {})",
                running.listen, wanted.listen
            ));
        }
        if wanted.admin != running.admin {
            needs_restart.push("[admin]".to_owned());
        }
        if wanted.store != running.store {
            needs_restart.push("[store]".to_owned());
        }
        if wanted.tls != running.tls {
            needs_restart.push("server.tls on/off".to_owned());
        }
        for setting in &needs_restart {
            tracing::warn!(
                setting,
                "config change needs a restart; the running value stays"
            );
        }
        for warning in &config.warnings {
            tracing::warn!("{warning}");
        }

        self.gateway.reload(config);
        if let (Some(current), Some(new)) = (&self.tls, &config.server.tls) {
            current.store(Arc::clone(&new.config));
        }
        tracing::info!(routes = config.routes.len(), "config reloaded");
        needs_restart
    }
}
