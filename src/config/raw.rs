//! The configuration file as written: serde structs that mirror the TOML one
//! to one. Nothing here is validated beyond TOML types and unknown keys
//! (`deny_unknown_fields` everywhere, so a typo can never silently disable a
//! protection); `${VAR}` references are still unexpanded.

use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub server: RawServer,
    pub admin: Option<RawAdmin>,
    #[serde(default)]
    pub store: RawStore,
    #[serde(default)]
    pub routes: Vec<RawRoute>,
    /// Senders described as data.
    #[serde(default)]
    pub schemes: Vec<crate::verify::RawScheme>,
    pub telemetry: Option<RawTelemetry>,
    /// `[[notify]]`: notification targets.
    #[serde(default)]
    pub notify: Vec<RawNotify>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNotify {
    pub name: String,
    pub kind: String,
    pub url: Option<String>,
    pub on: Option<Vec<String>>,
    pub routes: Option<Vec<String>>,
    /// webhook: the Standard Webhooks signing secret.
    pub secret: Option<String>,
    /// pagerduty: the integration's routing key.
    pub routing_key: Option<String>,
    pub console_url: Option<String>,
    pub group_within: Option<String>,
    /// At most this many messages (`"1/s"`), as a route's `upstream_rate`.
    pub rate: Option<String>,
    pub upstream_ca: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTelemetry {
    pub otlp_endpoint: String,
    pub service_name: Option<String>,
    pub sample_ratio: Option<f64>,
    pub record_keys: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    pub listen: String,
    pub max_body_bytes: Option<u64>,
    pub header_read_timeout: Option<String>,
    pub body_read_timeout: Option<String>,
    pub shutdown_grace: Option<String>,
    pub drain_delay: Option<String>,
    pub watch: Option<bool>,
    pub idle_timeout: Option<String>,
    pub max_connections: Option<u64>,
    pub trusted_proxies: Option<Vec<String>>,
    pub tls: Option<RawTls>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTls {
    pub cert: String,
    pub key: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    pub listen: String,
    pub token: Option<String>,
    pub read_token: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStore {
    pub backend: Option<String>,
    pub path: Option<String>,
    pub url: Option<String>,
    pub nodes: Option<Vec<String>>,
    /// redis-sentinel: the sentinels' URLs, and the primary's name.
    pub sentinels: Option<Vec<String>>,
    pub master: Option<String>,
    pub key_prefix: Option<String>,
    pub timeout: Option<String>,
    pub on_error: Option<String>,
    /// embedded: SQLite `synchronous`, "normal" or "full".
    pub synchronous: Option<String>,
    /// redis, redis-cluster: replicas that must acknowledge a claim.
    pub min_replicas_acked: Option<u32>,
    /// redis, redis-cluster: new sync claims packed into one `SET`.
    pub packed_claims: Option<bool>,
    /// redis, redis-cluster: a packed claim completed as one string.
    pub packed_completions: Option<bool>,
    /// postgres: connections per gateway.
    pub pool_size: Option<u64>,
    pub shards: Option<u64>,
    /// redis, redis-cluster, postgres: PEM CA bundle trusted for TLS servers.
    pub tls_ca: Option<String>,
    /// Bytes of completed records kept in process (0: off).
    pub replay_cache_bytes: Option<u64>,
    /// `[store.encryption]`: data at rest.
    pub encryption: Option<RawEncryption>,
    /// `[store.backup]`: embedded, scheduled backups inside the gateway.
    pub backup: Option<RawBackup>,
    /// What every async route together may hold queued in this store.
    pub max_queued_bytes: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBackup {
    pub every: Option<String>,
    pub dir: Option<String>,
    pub keep: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEncryption {
    /// 32-byte keys (hex or base64, usually `${file:…}`): the first seals.
    pub keys: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    pub name: String,
    pub path: String,
    pub methods: Option<Vec<String>>,
    /// One upstream, or `destinations`.
    pub upstream: Option<String>,
    pub upstream_timeout: Option<String>,
    pub upstream_ca: Option<String>,
    /// URL-signing schemes: the URL the sender posts to, as it signed it.
    pub public_url: Option<String>,
    pub processing_ttl: Option<String>,
    pub retention: Option<String>,
    pub idempotency_header: Option<String>,
    /// `raw` (the bare key) or `sf-string` (the IETF draft's quoted
    /// structured-field string).
    pub idempotency_header_format: Option<String>,
    pub key: Option<Vec<String>>,
    pub scope: Option<String>,
    pub on_mismatch: Option<String>,
    pub on_unknown: Option<String>,
    pub on_missing_key: Option<String>,
    pub replay_guard: Option<String>,
    pub max_cached_body_bytes: Option<u64>,
    pub max_attempts: Option<u64>,
    pub dead_letter_status: Option<u64>,
    pub dead_letter_retention: Option<String>,
    pub delivery: Option<String>,
    pub accept_status: Option<u64>,
    pub retry_backoff: Option<RawBackoff>,
    pub max_age: Option<String>,
    /// The oldest undelivered accepted event older than this pages.
    pub page_after: Option<String>,
    /// Events (and stored bytes) the route may hold undelivered.
    pub max_queued: Option<u64>,
    pub max_queued_bytes: Option<String>,
    pub max_in_flight: Option<u64>,
    pub respond_within: Option<String>,
    /// Ordered delivery per entity (`crate::order`).
    pub order_by: Option<String>,
    pub stale_by: Option<String>,
    pub reorder_window: Option<String>,
    pub on_blocked: Option<String>,
    pub allow_from: Option<Vec<String>>,
    pub circuit_breaker: Option<RawBreaker>,
    pub upstream_rate: Option<String>,
    pub upstream_burst: Option<u64>,
    pub verify: Option<RawVerify>,
    /// Which events the route takes (`crate::filter`).
    pub filter: Option<toml::Table>,
    /// Several consumers of one async route, each delivered on its own.
    pub destinations: Option<Vec<RawDestination>>,
    /// Reconciliation with the sender's API (`crate::reconcile`).
    pub reconcile: Option<RawReconcile>,
}

/// `[routes.reconcile]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawReconcile {
    pub sender: String,
    pub credentials_file: String,
    pub every: Option<String>,
    pub lookback: Option<String>,
    pub api_base: Option<String>,
    pub hook: Option<String>,
    pub types: Option<Vec<String>>,
}

/// One `[[routes.destinations]]`: its upstream and filter, and the delivery
/// settings it sets for itself (the route's are the default).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDestination {
    pub name: String,
    pub upstream: String,
    pub filter: Option<toml::Table>,
    pub upstream_timeout: Option<String>,
    pub upstream_ca: Option<String>,
    pub idempotency_header: Option<String>,
    pub max_in_flight: Option<u64>,
    pub max_attempts: Option<u64>,
    pub retry_backoff: Option<RawBackoff>,
    pub circuit_breaker: Option<RawBreaker>,
    pub upstream_rate: Option<String>,
    pub upstream_burst: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBreaker {
    pub failures: Option<u64>,
    pub window: Option<String>,
    pub open_for: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBackoff {
    pub initial: Option<String>,
    pub max: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawVerify {
    pub scheme: String,
    #[serde(default)]
    pub secrets: Vec<String>,
    pub tolerance: Option<String>,
    /// `hmac` scheme: the header carrying the signature.
    pub header: Option<String>,
    /// `hmac` scheme: `sha256` or `sha512`.
    pub algorithm: Option<String>,
    /// `hmac` scheme: `hex` or `base64`.
    pub encoding: Option<String>,
    /// `hmac` scheme: a literal prefix before the encoded signature (`sha256=`).
    pub prefix: Option<String>,
    /// Bytes of key material a secret needs at least (default 16).
    pub min_secret_bytes: Option<u64>,
    /// The token the sender's handshake carries (Meta's verify token).
    pub handshake_token: Option<String>,
    /// AWS SNS: the topic ARNs the route accepts.
    pub topics: Option<Vec<String>>,
    /// A scheme whose key is fetched: the hosts it may come from.
    pub cert_hosts: Option<Vec<String>>,
    /// A scheme whose key is fetched: a CA trusted beyond the Mozilla roots.
    pub cert_ca: Option<String>,
    /// What a described scheme's `{param:NAME}` is on this route.
    pub params: Option<std::collections::BTreeMap<String, String>>,
}
