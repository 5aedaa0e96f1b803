//! Configuration: the TOML file of docs/reference/configuration.md, parsed and validated into typed
//! settings so the rest of hookgate never sees TOML, strings for durations, or
//! unexpanded `${VAR}`s.
//!
//! Two layers: [`raw`] mirrors the file (serde, unknown keys rejected), and
//! [`Config::parse`] validates it into [`Config`]. Every problem is reported
//! as `file:line:column: key.path: message`; validation collects all problems
//! instead of stopping at the first, so one `hookgate check` shows them all.
//!
//! - [`settings`] — the validated types, split into [`Fixed`] (restart-only)
//!   and [`Live`] (what a reload swaps in).
//! - `validate` — the validator core: locating problems, expanding `${VAR}`,
//!   durations, sizes, choices.
//! - `server`, `store`, `routes` — one file per section of the file.
//! - `summary` — what `hookgate check` prints.

mod claims;
mod delivery;
mod destinations;
mod locate;
mod notify;
mod raw;
mod reconcile;
mod route;
mod routes;
mod schemes;
mod server;
mod settings;
mod store;
mod summary;
mod validate;
mod value;
mod verification;

use std::fmt;
use std::path::{Path, PathBuf};

use self::raw::RawConfig;
use self::validate::Validator;

pub use self::destinations::delivery_name;
pub use self::notify::NOTIFY;
pub use self::reconcile::ReconcileSettings;
pub use self::route::{
    deliveries, AsyncDelivery, BreakerSettings, CallSettings, ClaimSettings, DeliveryMode,
    DestinationOf, FailureSettings, KeySettings, OnMismatch, OnUnknown, RateSettings, RouteConfig,
    TrafficSettings, UpstreamCa, VerifySettings, DEFAULT_QUEUE,
};
pub use self::settings::{
    AdminSettings, Backend, Fixed, Live, NoticeKind, NotifyKind, NotifyTarget, OnStoreError,
    RequestLimits, ServerSettings, StoreSettings, Synchronous, TelemetrySettings, TlsSettings,
};
pub use self::value::{interpolate, parse_rate, MIN_RATE};
pub use crate::clock::humanize;
pub use crate::clock::parse_duration;
pub use crate::key::OnMissingKey;

/// The validated configuration of one gateway process.
#[derive(Debug)]
pub struct Config {
    /// The file this was loaded from, for messages.
    pub source: PathBuf,
    /// Read once at start-up.
    pub fixed: Fixed,
    /// Swapped in by a reload.
    pub live: Live,
    /// Legal but risky settings (`retention` shorter than the sender's retry
    /// horizon, no routes): printed by `check`, logged by `run`.
    pub warnings: Vec<String>,
    /// Every file this config was built from: the config file itself,
    /// `${file:…}` secrets, the TLS certificate and key, CA bundles. A
    /// change to any of them is a reload (`server.watch`).
    pub files: Vec<PathBuf>,
}

/// One thing wrong with a config file, located.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub file: String,
    pub line: usize,
    pub column: usize,
    /// Rendered key path, e.g. `routes[1].verify.secrets[0]`; empty at the root.
    pub key: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: ", self.file, self.line, self.column)?;
        if !self.key.is_empty() {
            write!(f, "{}: ", self.key)?;
        }
        f.write_str(&self.message)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: cannot read config: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{}", render_problems(.0))]
    Invalid(Vec<Problem>),
}

fn render_problems(problems: &[Problem]) -> String {
    let lines: Vec<String> = problems.iter().map(Problem::to_string).collect();
    lines.join("\n")
}

impl Config {
    /// Read and validate `path`, expanding `${VAR}` from the process environment.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, path, &|name| std::env::var(name).ok())
    }

    /// Validate config `text`; `env` resolves `${VAR}` references.
    pub fn parse(
        text: &str,
        path: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let mut v = Validator::new(path, text, env);
        let raw: RawConfig = match toml::from_str(text) {
            Ok(raw) => raw,
            Err(err) => {
                let offset = err.span().map_or(0, |span| span.start);
                return Err(ConfigError::Invalid(vec![
                    v.problem_at_offset(offset, err.message().trim().to_owned())
                ]));
            }
        };
        let (fixed, live) = v.config(raw);
        let (problems, warnings, read) = v.finish();
        if problems.is_empty() {
            let mut files = vec![path.to_owned()];
            files.extend(read);
            Ok(Config {
                source: path.to_owned(),
                fixed,
                live,
                warnings,
                files,
            })
        } else {
            Err(ConfigError::Invalid(problems))
        }
    }

    pub fn route(&self, name: &str) -> Option<&std::sync::Arc<RouteConfig>> {
        self.live.routes.iter().find(|route| route.name == name)
    }
}

impl Validator<'_> {
    fn config(&mut self, raw: RawConfig) -> (Fixed, Live) {
        let root = locate::KeyPath::root();
        let (server, limits, trusted_proxies, tls) = self.server(&root.key("server"), raw.server);
        let admin = raw.admin.map(|admin| self.admin(&root.key("admin"), admin));
        if let Some(admin) = &admin {
            // Port 0 (any free port, as in tests) can never collide.
            if Validator::listeners_collide(server.listen, admin.listen) {
                self.fail(
                    &root.key("admin").key("listen"),
                    format!(
                        "the admin listener {} would share port {} with the public listener {}",
                        admin.listen,
                        admin.listen.port(),
                        server.listen
                    ),
                );
            }
        }
        let mut raw_store = raw.store;
        let encryption = (raw_store.encryption.take())
            .and_then(|raw| self.encryption(&root.key("store").key("encryption"), raw));
        let (store, key_prefix, on_store_error, max_queued_bytes) =
            self.store(&root.key("store"), raw_store);
        self.schemes = self.schemes(&root.key("schemes"), raw.schemes);
        let routes = self.routes(&root.key("routes"), raw.routes);
        self.orders_kept_by(&root.key("routes"), &routes, &store.backend);
        for route in &routes {
            if server.shutdown_grace < route.call.upstream_timeout {
                self.warn(format!(
                    "server.shutdown_grace ({}) is shorter than the upstream_timeout of route {} ({}): \
                     a shutdown can release a claim while its upstream call still runs, and the \
                     sender's retry is then forwarded beside it; make shutdown_grace longer",
                    humanize(server.shutdown_grace),
                    route.name,
                    humanize(route.call.upstream_timeout),
                ));
            }
        }
        let notify = self.notify(&root.key("notify"), raw.notify, &routes);
        let telemetry = raw
            .telemetry
            .map(|raw| self.telemetry(&root.key("telemetry"), raw));
        let fixed = Fixed {
            server,
            admin,
            store,
            key_prefix,
            telemetry,
        };
        let live = Live {
            routes,
            limits,
            on_store_error,
            max_queued_bytes,
            trusted_proxies,
            tls,
            encryption,
            notify,
        };
        (fixed, live)
    }
}

#[cfg(test)]
mod tests;
