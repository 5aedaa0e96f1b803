//! Configuration: the TOML file of SPEC §2, parsed and validated into typed
//! settings so the rest of hookgate never sees TOML, strings for durations, or
//! unexpanded `${VAR}`s.
//!
//! Two layers: [`raw`] mirrors the file (serde, unknown keys rejected), and
//! [`Config::parse`] validates it into [`Config`]. Every problem is reported
//! as `file:line:column: key.path: message`; validation collects all problems
//! instead of stopping at the first, so one `hookgate check` shows them all.

mod locate;
mod raw;
mod value;

use std::collections::HashSet;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, Method, Uri};

use self::locate::{line_col, KeyPath, Locator};
use self::raw::{RawAdmin, RawConfig, RawRoute, RawServer, RawStore, RawVerify};
use crate::key::KeySource;
use crate::verify::{Algorithm, Encoding, HmacVerifier, Scheme, Verifier};

pub use self::value::{interpolate, parse_duration, Secret};

/// The validated configuration of one gateway process.
#[derive(Debug)]
pub struct Config {
    /// The file this was loaded from, for messages.
    pub source: PathBuf,
    pub server: ServerSettings,
    pub admin: Option<AdminSettings>,
    pub store: StoreSettings,
    pub routes: Vec<Arc<RouteConfig>>,
    /// Legal but risky settings (`retention` shorter than the sender's retry
    /// horizon, no routes): printed by `check`, logged by `run`.
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct ServerSettings {
    pub listen: SocketAddr,
    /// Bodies larger than this get 413 before any other work.
    pub max_body_bytes: usize,
    /// Slow-header (slowloris) protection for HTTP/1.
    pub header_read_timeout: Duration,
    /// A sender that stalls mid-body is cut off after this (hookgate extension).
    pub body_read_timeout: Duration,
    /// How long SIGTERM waits for in-flight requests before releasing them.
    pub shutdown_grace: Duration,
    /// Open connections beyond this wait in the kernel's accept queue
    /// (hookgate extension; bounds memory under a connection flood).
    pub max_connections: usize,
    /// TLS termination; without it the listener speaks plain HTTP/1.1 + h2c.
    pub tls: Option<TlsSettings>,
}

/// `server.tls`: where the certificate lives, and what was loaded from it.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub config: Arc<rustls::ServerConfig>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AdminSettings {
    pub listen: SocketAddr,
    pub token: Option<Secret>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StoreSettings {
    pub backend: Backend,
    pub key_prefix: String,
    /// Deadline for each store operation.
    pub timeout: Duration,
    pub on_error: OnStoreError,
    /// redis, redis-cluster: replicas that must acknowledge a claim (`WAIT`).
    pub min_replicas_acked: u32,
    /// redis, redis-cluster: extra CA (PEM) for `rediss://` servers.
    pub tls_ca: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    Memory,
    /// One SQLite file, one gateway instance.
    Embedded {
        path: PathBuf,
        synchronous: Synchronous,
    },
    Redis {
        url: String,
    },
    /// Seed nodes of a Redis Cluster.
    RedisCluster {
        nodes: Vec<String>,
    },
}

impl Backend {
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::Embedded { .. } => "embedded",
            Backend::Redis { .. } => "redis",
            Backend::RedisCluster { .. } => "redis-cluster",
        }
    }
}

/// How hard the embedded store pushes each commit to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Synchronous {
    /// Survives a crash of hookgate; may lose the last commits on power loss.
    Normal,
    /// Also survives power loss, at one fsync per commit batch.
    Full,
}

/// What to do when the store cannot answer (SPEC §2 `on_error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnStoreError {
    /// 503 + Retry-After; nothing is forwarded. The sender retries later.
    Reject,
    /// Forward without deduplication: availability over exactly-once.
    Forward,
}

/// Same key, different body (SPEC §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnMismatch {
    Reject,
    Replay,
}

/// One `[[routes]]` entry, validated.
#[derive(Debug)]
pub struct RouteConfig {
    pub name: String,
    pub path: String,
    pub methods: Vec<Method>,
    pub upstream: Uri,
    /// Extra CA file for an https upstream (shown by `check`).
    pub upstream_ca: Option<PathBuf>,
    /// TLS client config for an https upstream: webpki roots plus
    /// `upstream_ca`.
    pub upstream_tls: Arc<rustls::ClientConfig>,
    pub upstream_timeout: Duration,
    pub processing_ttl: Duration,
    pub retention: Duration,
    /// `None` when the operator disabled injection with `""`.
    pub idempotency_header: Option<HeaderName>,
    pub key: Vec<KeySource>,
    pub scope: String,
    pub on_mismatch: OnMismatch,
    /// Also claim the verified body's SHA-256, so a signed body re-sent under
    /// a new (unsigned) key is a duplicate of the first delivery.
    pub replay_guard: bool,
    pub max_cached_body_bytes: usize,
    pub scheme: Scheme,
    pub verifier: Verifier,
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

const DEFAULT_MAX_BODY_BYTES: u64 = 1024 * 1024;
const DEFAULT_MAX_CACHED_BODY_BYTES: u64 = 64 * 1024;
const DEFAULT_MAX_CONNECTIONS: u64 = 10_000;

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
        let mut v = Validator {
            file: path.display().to_string(),
            text,
            locator: Locator::new(text),
            env,
            problems: Vec::new(),
            warnings: Vec::new(),
            default_upstream_tls: None,
        };
        let raw: RawConfig = match toml::from_str(text) {
            Ok(raw) => raw,
            Err(err) => {
                let offset = err.span().map_or(0, |span| span.start);
                let key = v.locator.path_at(offset);
                let problem = v.problem_at(offset, &key, err.message().trim().to_owned());
                return Err(ConfigError::Invalid(vec![problem]));
            }
        };
        let config = v.config(raw, path);
        if v.problems.is_empty() {
            Ok(Config {
                warnings: v.warnings,
                ..config
            })
        } else {
            Err(ConfigError::Invalid(v.problems))
        }
    }

    pub fn route(&self, name: &str) -> Option<&Arc<RouteConfig>> {
        self.routes.iter().find(|route| route.name == name)
    }

    /// The human summary `hookgate check` prints.
    pub fn summary(&self) -> String {
        let backend = match &self.store.backend {
            Backend::Embedded { path, .. } => format!(
                "embedded {} (one gateway instance per file; use redis for several)",
                path.display()
            ),
            Backend::Redis { .. } => "redis".to_owned(),
            Backend::RedisCluster { nodes } => {
                format!("redis-cluster ({} seed nodes)", nodes.len())
            }
            Backend::Memory => "memory (nothing survives a restart)".to_owned(),
        };
        let mut out = format!(
            "config {} is valid\nlisten {} ({})\nstore {} (key prefix {:?}, timeout {}, on_error {})\n",
            self.source.display(),
            self.server.listen,
            match &self.server.tls {
                Some(tls) => format!("TLS 1.2/1.3 with {}, ALPN h2 + http/1.1", tls.cert.display()),
                None => "plain HTTP/1.1 + h2c".to_owned(),
            },
            backend,
            self.store.key_prefix,
            humanize(self.store.timeout),
            match self.store.on_error {
                OnStoreError::Reject => "reject",
                OnStoreError::Forward => "forward",
            },
        );
        if let Some(admin) = &self.admin {
            out += &format!(
                "admin {} (admin API {})\n",
                admin.listen,
                if admin.token.is_some() { "on" } else { "off" }
            );
        }
        out += &format!("{} route(s):\n", self.routes.len());
        for route in &self.routes {
            let methods: Vec<&str> = route.methods.iter().map(Method::as_str).collect();
            let keys: Vec<String> = route.key.iter().map(ToString::to_string).collect();
            out += &format!(
                "  {name:<16} {methods} {path} -> {upstream}\n  {pad:<16} verify {scheme}, key [{keys}], scope {scope}, ttl {ttl}, retention {retention}{guard}\n",
                name = route.name,
                methods = methods.join(","),
                path = route.path,
                upstream = route.upstream,
                pad = "",
                scheme = route.scheme.name(),
                keys = keys.join(", "),
                scope = route.scope,
                ttl = humanize(route.processing_ttl),
                retention = humanize(route.retention),
                guard = if route.replay_guard { ", replay guard on" } else { "" },
            );
        }
        for warning in &self.warnings {
            out += &format!("warning: {warning}\n");
        }
        out
    }
}

/// Render a duration the way the config writes them.
pub fn humanize(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms >= size && ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

/// Collects problems while turning raw sections into settings. Each method
/// returns a usable placeholder on error so validation can continue and
/// report everything at once.
struct Validator<'a> {
    file: String,
    text: &'a str,
    locator: Locator,
    env: &'a dyn Fn(&str) -> Option<String>,
    problems: Vec<Problem>,
    warnings: Vec<String>,
    /// Built once, shared by every route without `upstream_ca`.
    default_upstream_tls: Option<Arc<rustls::ClientConfig>>,
}

impl Validator<'_> {
    fn problem_at(&self, offset: usize, key: &KeyPath, message: String) -> Problem {
        let (line, column) = line_col(self.text, offset);
        Problem {
            file: self.file.clone(),
            line,
            column,
            key: key.to_string(),
            message,
        }
    }

    fn fail(&mut self, key: &KeyPath, message: impl Into<String>) {
        let offset = self.locator.span_of(key).map_or(0, |span| span.start);
        let problem = self.problem_at(offset, key, message.into());
        self.problems.push(problem);
    }

    /// Expand `${VAR}`s; on error record it and return `None`.
    fn string(&mut self, key: &KeyPath, raw: &str) -> Option<String> {
        match interpolate(raw, self.env) {
            Ok(value) => Some(value),
            Err(message) => {
                self.fail(key, message);
                None
            }
        }
    }

    fn duration(&mut self, key: &KeyPath, raw: Option<&String>, default: Duration) -> Duration {
        let Some(raw) = raw else { return default };
        let Some(text) = self.string(key, raw) else {
            return default;
        };
        match parse_duration(&text) {
            Ok(d) if d.is_zero() => {
                self.fail(key, "must be greater than zero");
                default
            }
            Ok(d) => d,
            Err(message) => {
                self.fail(key, message);
                default
            }
        }
    }

    fn size(&mut self, key: &KeyPath, raw: Option<u64>, default: u64, max: u64) -> usize {
        let value = raw.unwrap_or(default);
        if value == 0 || value > max {
            self.fail(key, format!("must be between 1 and {max}"));
            return default as usize;
        }
        value as usize
    }

    fn addr(&mut self, key: &KeyPath, raw: &str) -> SocketAddr {
        let fallback = SocketAddr::from(([127, 0, 0, 1], 0));
        let Some(text) = self.string(key, raw) else {
            return fallback;
        };
        text.parse().unwrap_or_else(|_| {
            self.fail(
                key,
                format!("{text:?} is not a socket address like \"0.0.0.0:8443\""),
            );
            fallback
        })
    }

    fn choice<T: Copy>(
        &mut self,
        key: &KeyPath,
        raw: Option<&String>,
        options: &[(&str, T)],
        default: T,
    ) -> T {
        let Some(raw) = raw else { return default };
        let Some(text) = self.string(key, raw) else {
            return default;
        };
        if let Some((_, value)) = options.iter().find(|(name, _)| *name == text) {
            return *value;
        }
        let names: Vec<String> = options.iter().map(|(n, _)| format!("{n:?}")).collect();
        self.fail(key, format!("{text:?} is not one of {}", names.join(", ")));
        default
    }

    fn config(&mut self, raw: RawConfig, path: &Path) -> Config {
        let root = KeyPath::root();
        let server = self.server(&root.key("server"), raw.server);
        let admin = raw.admin.map(|admin| self.admin(&root.key("admin"), admin));
        if let Some(admin) = &admin {
            // Port 0 (any free port, as in tests) can never collide.
            if admin.listen == server.listen && admin.listen.port() != 0 {
                self.fail(
                    &root.key("admin").key("listen"),
                    "the admin listener must not share the public listen address",
                );
            }
        }
        let store = self.store(&root.key("store"), raw.store);
        let routes = self.routes(&root.key("routes"), raw.routes);
        Config {
            source: path.to_owned(),
            server,
            admin,
            store,
            routes,
            warnings: Vec::new(),
        }
    }

    fn server(&mut self, at: &KeyPath, raw: RawServer) -> ServerSettings {
        let tls = raw.tls.as_ref().and_then(|tls| {
            let at = at.key("tls");
            let cert = PathBuf::from(self.string(&at.key("cert"), &tls.cert)?);
            let key = PathBuf::from(self.string(&at.key("key"), &tls.key)?);
            match crate::tls::server_config(&cert, &key) {
                Ok(config) => Some(TlsSettings { cert, key, config }),
                Err(message) => {
                    self.fail(&at, message);
                    None
                }
            }
        });
        ServerSettings {
            tls,
            listen: self.addr(&at.key("listen"), &raw.listen),
            max_body_bytes: self.size(
                &at.key("max_body_bytes"),
                raw.max_body_bytes,
                DEFAULT_MAX_BODY_BYTES,
                1 << 30,
            ),
            header_read_timeout: self.duration(
                &at.key("header_read_timeout"),
                raw.header_read_timeout.as_ref(),
                Duration::from_secs(10),
            ),
            body_read_timeout: self.duration(
                &at.key("body_read_timeout"),
                raw.body_read_timeout.as_ref(),
                Duration::from_secs(30),
            ),
            shutdown_grace: self.duration(
                &at.key("shutdown_grace"),
                raw.shutdown_grace.as_ref(),
                Duration::from_secs(30),
            ),
            max_connections: self.size(
                &at.key("max_connections"),
                raw.max_connections,
                DEFAULT_MAX_CONNECTIONS,
                1 << 20,
            ),
        }
    }

    fn admin(&mut self, at: &KeyPath, raw: RawAdmin) -> AdminSettings {
        let token = raw.token.as_ref().and_then(|token| {
            let value = self.string(&at.key("token"), token)?;
            if value.len() < 16 {
                self.fail(
                    &at.key("token"),
                    "the admin token must be at least 16 characters",
                );
                return None;
            }
            Some(Secret::new(value))
        });
        AdminSettings {
            listen: self.addr(&at.key("listen"), &raw.listen),
            token,
        }
    }

    fn store(&mut self, at: &KeyPath, raw: RawStore) -> StoreSettings {
        let backend_name = match &raw.backend {
            Some(name) => self.string(&at.key("backend"), name).unwrap_or_default(),
            None => "embedded".to_owned(),
        };
        let backend = match backend_name.as_str() {
            "memory" => Backend::Memory,
            "embedded" => Backend::Embedded {
                path: PathBuf::from(match &raw.path {
                    Some(path) => self.string(&at.key("path"), path).unwrap_or_default(),
                    None => "hookgate.db".to_owned(),
                }),
                synchronous: self.choice(
                    &at.key("synchronous"),
                    raw.synchronous.as_ref(),
                    &[("normal", Synchronous::Normal), ("full", Synchronous::Full)],
                    Synchronous::Normal,
                ),
            },
            "redis" => match &raw.url {
                Some(url) => {
                    let url = self.string(&at.key("url"), url).unwrap_or_default();
                    if let Err(err) = redis::Client::open(url.as_str()) {
                        self.fail(&at.key("url"), format!("not a valid Redis URL: {err}"));
                    }
                    Backend::Redis { url }
                }
                None => {
                    self.fail(
                        at,
                        "backend \"redis\" needs `url = \"redis://host:6379/0\"`",
                    );
                    Backend::Memory
                }
            },
            "redis-cluster" => {
                let nodes: Vec<String> = raw
                    .nodes
                    .iter()
                    .flatten()
                    .enumerate()
                    .filter_map(|(i, node)| {
                        let node = self.string(&at.key("nodes").index(i), node)?;
                        if let Err(err) = redis::Client::open(node.as_str()) {
                            self.fail(
                                &at.key("nodes").index(i),
                                format!("not a valid Redis URL: {err}"),
                            );
                        }
                        Some(node)
                    })
                    .collect();
                if raw.nodes.as_ref().is_none_or(Vec::is_empty) {
                    self.fail(
                        at,
                        "backend \"redis-cluster\" needs `nodes = [\"redis://host:7000\", ...]`",
                    );
                }
                Backend::RedisCluster { nodes }
            }
            "" => Backend::Memory,
            other => {
                self.fail(
                    &at.key("backend"),
                    format!("{other:?} is not one of \"embedded\", \"memory\", \"redis\", \"redis-cluster\""),
                );
                Backend::Memory
            }
        };
        let applies = |key: &str| match key {
            "path" | "synchronous" => backend_name == "embedded",
            "url" => backend_name == "redis",
            "min_replicas_acked" | "tls_ca" => backend_name.starts_with("redis"),
            _ => backend_name == "redis-cluster",
        };
        for (name, present) in [
            ("path", raw.path.is_some()),
            ("synchronous", raw.synchronous.is_some()),
            ("url", raw.url.is_some()),
            ("nodes", raw.nodes.is_some()),
            ("min_replicas_acked", raw.min_replicas_acked.is_some()),
            ("tls_ca", raw.tls_ca.is_some()),
        ] {
            if present && !applies(name) {
                self.fail(
                    &at.key(name),
                    format!("`{name}` does not apply to backend {backend_name:?}"),
                );
            }
        }
        let key_prefix = match &raw.key_prefix {
            Some(prefix) => self
                .string(&at.key("key_prefix"), prefix)
                .unwrap_or_default(),
            None => "hookgate:".to_owned(),
        };
        StoreSettings {
            backend,
            key_prefix,
            timeout: self.duration(
                &at.key("timeout"),
                raw.timeout.as_ref(),
                Duration::from_millis(500),
            ),
            on_error: self.choice(
                &at.key("on_error"),
                raw.on_error.as_ref(),
                &[
                    ("reject", OnStoreError::Reject),
                    ("forward", OnStoreError::Forward),
                ],
                OnStoreError::Reject,
            ),
            min_replicas_acked: raw.min_replicas_acked.unwrap_or(0),
            tls_ca: raw.tls_ca.as_ref().and_then(|path| {
                let path = PathBuf::from(self.string(&at.key("tls_ca"), path)?);
                if let Err(message) = crate::tls::load_certs(&path) {
                    self.fail(&at.key("tls_ca"), message);
                }
                Some(path)
            }),
        }
    }

    fn routes(&mut self, at: &KeyPath, raw: Vec<RawRoute>) -> Vec<Arc<RouteConfig>> {
        if raw.is_empty() {
            self.warnings
                .push("no [[routes]] configured: every request will get 404".to_owned());
        }
        let mut names = HashSet::new();
        let mut paths = HashSet::new();
        let mut routes = Vec::with_capacity(raw.len());
        for (i, raw_route) in raw.into_iter().enumerate() {
            let at = at.index(i);
            let route = self.route(&at, raw_route);
            if !names.insert(route.name.clone()) {
                self.fail(
                    &at.key("name"),
                    format!("route name {:?} is used twice", route.name),
                );
            }
            if !paths.insert(route.path.clone()) {
                self.fail(
                    &at.key("path"),
                    format!("path {:?} is used by two routes", route.path),
                );
            }
            routes.push(Arc::new(route));
        }
        routes
    }

    fn identifier(&mut self, key: &KeyPath, raw: &str) -> String {
        let value = self.string(key, raw).unwrap_or_default();
        let ok = !value.is_empty()
            && value
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if !ok {
            self.fail(key, format!("{value:?} must match [a-z0-9_-]+"));
        }
        value
    }

    fn route(&mut self, at: &KeyPath, raw: RawRoute) -> RouteConfig {
        let name = self.identifier(&at.key("name"), &raw.name);
        let path = self.string(&at.key("path"), &raw.path).unwrap_or_default();
        if !path.starts_with('/') || path.contains(['?', '#']) {
            self.fail(
                &at.key("path"),
                format!("{path:?} must be an absolute path without query"),
            );
        }
        let methods = self.methods(&at.key("methods"), raw.methods.as_deref());
        let upstream = self.upstream(&at.key("upstream"), &raw.upstream);
        let upstream_ca = raw
            .upstream_ca
            .as_ref()
            .and_then(|path| self.string(&at.key("upstream_ca"), path))
            .map(PathBuf::from);
        let upstream_tls = self.upstream_tls(&at.key("upstream_ca"), upstream_ca.as_deref());
        if upstream_ca.is_some() && upstream.scheme_str() != Some("https") {
            self.fail(
                &at.key("upstream_ca"),
                "upstream_ca only applies to an https:// upstream",
            );
        }

        let (scheme, verifier) = match raw.verify {
            Some(verify) => self.verify(&at.key("verify"), verify),
            None => {
                self.fail(
                    at,
                    "route has no [routes.verify]; write `scheme = \"none\"` to accept unsigned traffic on purpose",
                );
                (Scheme::None, Verifier::None)
            }
        };

        let processing_ttl = self.duration(
            &at.key("processing_ttl"),
            raw.processing_ttl.as_ref(),
            Duration::from_secs(30),
        );
        let retention = self.duration(
            &at.key("retention"),
            raw.retention.as_ref(),
            scheme.default_retention(),
        );
        if retention <= processing_ttl {
            self.fail(
                &at.key("retention"),
                "retention must be longer than processing_ttl",
            );
        }
        if let Some(horizon) = scheme.retry_horizon().filter(|h| retention < *h) {
            self.warnings.push(format!(
                "{at}.retention: {} is shorter than {}'s retry horizon of {}; a late retry would be processed again",
                humanize(retention),
                scheme.name(),
                humanize(horizon),
            ));
        }

        let idempotency_header = match &raw.idempotency_header {
            None => Some(HeaderName::from_static("idempotency-key")),
            Some(raw) => match self.string(&at.key("idempotency_header"), raw) {
                Some(text) if text.is_empty() => None,
                Some(text) => HeaderName::from_bytes(text.as_bytes()).map_or_else(
                    |_| {
                        self.fail(
                            &at.key("idempotency_header"),
                            format!("{text:?} is not a valid header name"),
                        );
                        None
                    },
                    Some,
                ),
                None => None,
            },
        };

        let key = self.key_sources(&at.key("key"), raw.key.as_deref(), scheme);
        let scope = match &raw.scope {
            Some(scope) => self.identifier(&at.key("scope"), scope),
            None => name.clone(),
        };
        let on_mismatch = self.choice(
            &at.key("on_mismatch"),
            raw.on_mismatch.as_ref(),
            &[
                ("reject", OnMismatch::Reject),
                ("replay", OnMismatch::Replay),
            ],
            OnMismatch::Reject,
        );
        let replay_guard = self.choice(
            &at.key("replay_guard"),
            raw.replay_guard.as_ref(),
            &[("body", true), ("off", false)],
            scheme.default_replay_guard(),
        );
        let max_cached_body_bytes = self.size(
            &at.key("max_cached_body_bytes"),
            raw.max_cached_body_bytes,
            DEFAULT_MAX_CACHED_BODY_BYTES,
            16 << 20,
        );

        RouteConfig {
            name,
            path,
            methods,
            upstream,
            upstream_ca,
            upstream_tls,
            upstream_timeout: self.duration(
                &at.key("upstream_timeout"),
                raw.upstream_timeout.as_ref(),
                Duration::from_secs(30),
            ),
            processing_ttl,
            retention,
            idempotency_header,
            key,
            scope,
            on_mismatch,
            replay_guard,
            max_cached_body_bytes,
            scheme,
            verifier,
        }
    }

    fn methods(&mut self, at: &KeyPath, raw: Option<&[String]>) -> Vec<Method> {
        let Some(raw) = raw else {
            return vec![Method::POST];
        };
        if raw.is_empty() {
            self.fail(at, "list at least one method");
        }
        raw.iter()
            .enumerate()
            .filter_map(|(i, text)| {
                let text = self.string(&at.index(i), text)?;
                match Method::from_bytes(text.as_bytes()) {
                    Ok(method) if text.bytes().all(|b| b.is_ascii_uppercase()) => Some(method),
                    _ => {
                        self.fail(
                            &at.index(i),
                            format!("{text:?} is not an HTTP method like \"POST\""),
                        );
                        None
                    }
                }
            })
            .collect()
    }

    fn upstream(&mut self, at: &KeyPath, raw: &str) -> Uri {
        let fallback = Uri::from_static("http://127.0.0.1/");
        let Some(text) = self.string(at, raw) else {
            return fallback;
        };
        let uri: Uri = match text.parse() {
            Ok(uri) => uri,
            Err(err) => {
                self.fail(at, format!("{text:?} is not a URL: {err}"));
                return fallback;
            }
        };
        match uri.scheme_str() {
            Some("http" | "https") if uri.authority().is_some() => uri,
            _ => {
                self.fail(
                    at,
                    format!("{text:?} must be an absolute http:// or https:// URL"),
                );
                fallback
            }
        }
    }

    /// The TLS client config of a route: shared when it adds no CA.
    fn upstream_tls(&mut self, at: &KeyPath, ca: Option<&Path>) -> Arc<rustls::ClientConfig> {
        let built = match ca {
            None => {
                if let Some(shared) = &self.default_upstream_tls {
                    return Arc::clone(shared);
                }
                crate::tls::client_config(&[])
            }
            Some(path) => {
                crate::tls::load_certs(path).and_then(|certs| crate::tls::client_config(&certs))
            }
        };
        match built {
            Ok(config) => {
                if ca.is_none() {
                    self.default_upstream_tls = Some(Arc::clone(&config));
                }
                config
            }
            Err(message) => {
                self.fail(at, message);
                Arc::new(
                    rustls::ClientConfig::builder_with_provider(Arc::new(
                        rustls::crypto::ring::default_provider(),
                    ))
                    .with_safe_default_protocol_versions()
                    .expect("ring supports the default versions")
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth(),
                )
            }
        }
    }

    fn key_sources(
        &mut self,
        at: &KeyPath,
        raw: Option<&[String]>,
        scheme: Scheme,
    ) -> Vec<KeySource> {
        let texts: Vec<(KeyPath, String)> = match raw {
            Some(list) => list
                .iter()
                .enumerate()
                .filter_map(|(i, text)| Some((at.index(i), self.string(&at.index(i), text)?)))
                .collect(),
            None => match scheme.default_key() {
                Some(defaults) => defaults
                    .iter()
                    .map(|d| (at.clone(), (*d).to_owned()))
                    .collect(),
                None => {
                    self.fail(
                        at,
                        format!(
                            "scheme {:?} has no default key; set `key = [...]`",
                            scheme.name()
                        ),
                    );
                    Vec::new()
                }
            },
        };
        if raw.is_some_and(<[String]>::is_empty) {
            self.fail(at, "list at least one key source");
        }
        texts
            .into_iter()
            .filter_map(|(key, text)| match KeySource::parse(&text) {
                Ok(source) => Some(source),
                Err(message) => {
                    self.fail(&key, message);
                    None
                }
            })
            .collect()
    }

    fn verify(&mut self, at: &KeyPath, raw: RawVerify) -> (Scheme, Verifier) {
        let scheme_text = self
            .string(&at.key("scheme"), &raw.scheme)
            .unwrap_or_default();
        let Some(scheme) = Scheme::parse(&scheme_text) else {
            let names: Vec<String> = Scheme::ALL
                .iter()
                .map(|s| format!("{:?}", s.name()))
                .collect();
            self.fail(
                &at.key("scheme"),
                format!("{scheme_text:?} is not one of {}", names.join(", ")),
            );
            return (Scheme::None, Verifier::None);
        };
        let tolerance = raw.tolerance.as_ref().map(|text| {
            if !scheme.is_timestamped() {
                self.fail(
                    &at.key("tolerance"),
                    format!("scheme {scheme_text:?} has no timestamp to check"),
                );
            }
            self.duration(
                &at.key("tolerance"),
                Some(text),
                crate::verify::DEFAULT_TOLERANCE,
            )
        });
        if scheme != Scheme::Hmac {
            for (name, present) in [
                ("header", raw.header.is_some()),
                ("algorithm", raw.algorithm.is_some()),
                ("encoding", raw.encoding.is_some()),
                ("prefix", raw.prefix.is_some()),
            ] {
                if present {
                    self.fail(
                        &at.key(name),
                        format!("`{name}` only applies to scheme \"hmac\""),
                    );
                }
            }
        }
        let secrets: Vec<String> = raw
            .secrets
            .iter()
            .enumerate()
            .filter_map(|(i, text)| {
                let value = self.string(&at.key("secrets").index(i), text)?;
                if value.is_empty() {
                    self.fail(&at.key("secrets").index(i), "secret is empty");
                    return None;
                }
                Some(value)
            })
            .collect();
        match (scheme, raw.secrets.is_empty()) {
            (Scheme::None, false) => self.fail(
                &at.key("secrets"),
                "scheme \"none\" verifies nothing; remove the secrets or pick a scheme",
            ),
            (Scheme::None, true) => {}
            (_, true) => self.fail(&at.key("secrets"), "list at least one secret"),
            (_, false) => {}
        }
        let hmac = (scheme == Scheme::Hmac).then(|| self.hmac_options(at, &raw, &secrets));
        match Verifier::build(scheme, &secrets, tolerance, hmac) {
            Ok(verifier) => (scheme, verifier),
            Err(message) => {
                self.fail(&at.key("secrets"), message);
                (scheme, Verifier::None)
            }
        }
    }

    /// The operator-defined header of `scheme = "hmac"`.
    fn hmac_options(&mut self, at: &KeyPath, raw: &RawVerify, secrets: &[String]) -> HmacVerifier {
        let header = match &raw.header {
            Some(text) => {
                let text = self.string(&at.key("header"), text).unwrap_or_default();
                HeaderName::from_bytes(text.as_bytes()).unwrap_or_else(|_| {
                    self.fail(
                        &at.key("header"),
                        format!("{text:?} is not a valid header name"),
                    );
                    HeaderName::from_static("x-signature")
                })
            }
            None => {
                self.fail(at, "scheme \"hmac\" needs `header = \"X-Signature\"`");
                HeaderName::from_static("x-signature")
            }
        };
        let prefix = match &raw.prefix {
            Some(text) => self.string(&at.key("prefix"), text).unwrap_or_default(),
            None => String::new(),
        };
        HmacVerifier {
            header,
            algorithm: self.choice(
                &at.key("algorithm"),
                raw.algorithm.as_ref(),
                &[("sha256", Algorithm::Sha256), ("sha512", Algorithm::Sha512)],
                Algorithm::Sha256,
            ),
            encoding: self.choice(
                &at.key("encoding"),
                raw.encoding.as_ref(),
                &[("hex", Encoding::Hex), ("base64", Encoding::Base64)],
                Encoding::Hex,
            ),
            prefix,
            secrets: secrets.iter().map(|s| Secret::new(s.as_bytes())).collect(),
        }
    }
}

#[cfg(test)]
mod tests;
