//! A Redis primary with replicas under Sentinel: the sentinels name the
//! primary, and the store talks to it as to one Redis (`connect.rs`'s
//! shared connection and pool of its own for writes that `WAIT`).
//!
//! A failover is followed without a restart. Once an operation fails — the
//! old primary is gone, or it was demoted and answers `READONLY` — the next
//! operation asks the sentinels again, at most once per [`RECHECK`] while
//! failures go on. The sentinels' answer is checked by the client (`ROLE`
//! on the server they name must say master); a new address gets fresh
//! connections, and requests already sent on the old ones end with them.
//! While the sentinels still name the old primary (before they agree it is
//! down, `down-after-milliseconds`), operations fail and the sender is
//! answered 503: nothing is forwarded unclaimed.
//!
//! What a failover can lose is Redis's, not the gateway's: replication is
//! asynchronous, so a claim the primary acknowledged but had not yet
//! replicated is gone on the promoted replica, and its retry is forwarded
//! again. `store.min_replicas_acked = 1` closes that window (docs/guide/guarantee.md,
//! "The guarantee, honestly").

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionManager, MultiplexedConnection};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, TlsMode};
use tokio::time::Instant;

use super::connect::{shared, tls_roots, Connector, Dedicated, Subscriber};
use super::{backend, RedisStore};
use crate::store::{StoreError, StoreSettings};

/// How often the sentinels are asked again while operations keep failing.
const RECHECK: Duration = Duration::from_millis(250);

/// The primary the sentinels name, and the connections to it.
pub struct Sentinel {
    inner: Arc<Inner>,
}

struct Inner {
    /// The sentinels, asked one lookup at a time.
    sentinels: tokio::sync::Mutex<SentinelClient>,
    state: Mutex<State>,
    timeout: Duration,
    master: String,
}

#[derive(Default)]
struct State {
    primary: Option<Arc<Primary>>,
    /// Since when operations fail, if the last one did.
    failing_since: Option<Instant>,
    /// When the sentinels were last asked.
    asked: Option<Instant>,
}

struct Primary {
    /// `host:port`, as the sentinels named it.
    address: String,
    client: redis::Client,
    shared: ConnectionManager,
    acked: bb8::Pool<Dedicated>,
}

impl Connector for Sentinel {
    type Connection = ConnectionManager;
    type Acked = bb8::PooledConnection<'static, Dedicated>;
    type AckedConnection = MultiplexedConnection;
    const NAME: &'static str = "redis-sentinel";
    const HASH_TAGS: bool = false;

    async fn connection(&self) -> Result<ConnectionManager, StoreError> {
        Ok(self.inner.primary().await?.shared.clone())
    }

    async fn acked(&self) -> Result<Self::Acked, StoreError> {
        Dedicated::take(&self.inner.primary().await?.acked).await
    }

    /// The feed follows the primary: a demoted one keeps receiving what the
    /// new one publishes (pub/sub is replicated), a dead one ends the feed
    /// and the next subscription asks for the primary again.
    fn subscriber(&self) -> Option<Subscriber> {
        let inner = Arc::clone(&self.inner);
        Some(Box::new(move || {
            let inner = Arc::clone(&inner);
            Box::pin(async move { Some(inner.primary().await.ok()?.client.clone()) })
        }))
    }

    fn observed(&self, answered: bool) {
        let mut state = self.inner.lock();
        match answered {
            true => state.failing_since = None,
            false => {
                state.failing_since.get_or_insert_with(Instant::now);
            }
        }
    }
}

impl Inner {
    /// The primary to send on: the one known, unless operations have been
    /// failing and the sentinels were not asked within [`RECHECK`].
    async fn primary(&self) -> Result<Arc<Primary>, StoreError> {
        match self.known() {
            Some(primary) => Ok(primary),
            // Boxed: asking is rare, and its future (the sentinel client's)
            // would otherwise make every operation's future 2.8 KiB larger,
            // on every backend (they share one dispatch).
            None => Box::pin(self.ask()).await,
        }
    }

    /// Ask the sentinels for the primary, once at a time.
    async fn ask(&self) -> Result<Arc<Primary>, StoreError> {
        let mut sentinels = self.sentinels.lock().await;
        if let Some(primary) = self.known() {
            return Ok(primary);
        }
        self.lock().asked = Some(Instant::now());
        let found = tokio::time::timeout(
            self.timeout.max(Duration::from_secs(1)),
            sentinels.async_get_client(),
        )
        .await
        .unwrap_or_else(|_| Err((redis::ErrorKind::Io, "asking the sentinels timed out").into()));
        drop(sentinels);
        let client = match found {
            Ok(client) => client,
            // Keep sending to the one known: the sentinels may be the ones
            // failing, or not yet agreed that it is down.
            Err(error) => {
                return match self.lock().primary.clone() {
                    Some(primary) => Ok(primary),
                    None => Err(StoreError::Backend(format!(
                        "no primary named {:?} from the sentinels: {error}",
                        self.master
                    ))),
                };
            }
        };
        let address = client.get_connection_info().addr().to_string();
        let mut state = self.lock();
        if let Some(primary) = state.primary.as_ref().filter(|p| p.address == address) {
            return Ok(Arc::clone(primary));
        }
        match &state.primary {
            Some(old) => tracing::warn!(
                master = %self.master,
                from = %old.address,
                to = %address,
                "the sentinels name a new Redis primary; following it"
            ),
            None => {
                tracing::info!(master = %self.master, %address, "Redis primary found through the sentinels")
            }
        }
        let primary = Arc::new(Primary {
            shared: shared(&client, self.timeout)?,
            acked: Dedicated::pool(&client, self.timeout),
            client,
            address,
        });
        state.primary = Some(Arc::clone(&primary));
        Ok(primary)
    }

    fn known(&self) -> Option<Arc<Primary>> {
        let state = self.lock();
        let recheck = state.failing_since.is_some()
            && state.asked.is_none_or(|asked| asked.elapsed() >= RECHECK);
        state.primary.clone().filter(|_| !recheck)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl RedisStore<Sentinel> {
    /// Prepare a store for the primary that `sentinels` know as `master`,
    /// reached as `url` says (scheme, user, password, database; its host is
    /// ignored). Nothing is asked until the first operation.
    pub fn connect_sentinel(
        sentinels: &[String],
        master: &str,
        url: Option<&str>,
        settings: &StoreSettings,
    ) -> Result<Self, StoreError> {
        let (timeout, min_replicas_acked) = (settings.timeout, settings.min_replicas_acked);
        let client =
            sentinel_client(sentinels, master, url, tls_roots(settings)?).map_err(backend)?;
        let sentinel = Sentinel {
            inner: Arc::new(Inner {
                sentinels: tokio::sync::Mutex::new(client),
                state: Mutex::default(),
                timeout,
                master: master.to_owned(),
            }),
        };
        let store = Self::with(sentinel, timeout, min_replicas_acked);
        Ok(store.packing(settings.packed_claims, settings.packed_completions))
    }
}

/// Whether `sentinels` and `url` make a Sentinel client (`check` and
/// start-up): every sentinel is reached alike (all `rediss://` or none, one
/// user and password), and `url` is a Redis URL.
pub fn check_sentinels(sentinels: &[String], url: Option<&str>) -> Result<(), String> {
    sentinel_client(sentinels, "-", url, None)
        .map(drop)
        .map_err(|error| error.to_string())
}

fn sentinel_client(
    sentinels: &[String],
    master: &str,
    url: Option<&str>,
    roots: Option<redis::TlsCertificates>,
) -> redis::RedisResult<SentinelClient> {
    let invalid = |message: String| {
        redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "", message))
    };
    let infos = (sentinels.iter())
        .map(|url| url.as_str().into_connection_info())
        .collect::<redis::RedisResult<Vec<ConnectionInfo>>>()?;
    let Some(first) = infos.first() else {
        return Err(invalid("no sentinels".into()));
    };
    let tls = |info: &ConnectionInfo| matches!(info.addr(), ConnectionAddr::TcpTls { .. });
    let login = |info: &ConnectionInfo| {
        let redis = info.redis_settings();
        (
            redis.username().map(str::to_owned),
            redis.password().map(str::to_owned),
        )
    };
    if infos.iter().any(|info| tls(info) != tls(first)) {
        return Err(invalid(
            "the sentinels are all rediss:// or all redis://".into(),
        ));
    }
    if infos.iter().any(|info| login(info) != login(first)) {
        return Err(invalid(
            "every sentinel URL carries the same user and password".into(),
        ));
    }
    let addresses = infos.iter().map(|info| info.addr().clone());
    let mut builder = SentinelClientBuilder::new(addresses, master, SentinelServerType::Master)?;
    if let (username, Some(password)) = login(first) {
        if let Some(username) = username {
            builder = builder.set_client_to_sentinel_username(username);
        }
        builder = builder.set_client_to_sentinel_password(password);
    }
    if let (true, Some(roots)) = (tls(first), &roots) {
        builder = builder.set_client_to_sentinel_certificates(roots.clone());
    }
    if let Some(url) = url {
        let info = url.into_connection_info()?;
        let redis = info.redis_settings();
        builder = builder.set_client_to_redis_db(redis.db());
        if let Some(username) = redis.username() {
            builder = builder.set_client_to_redis_username(username);
        }
        if let Some(password) = redis.password() {
            builder = builder.set_client_to_redis_password(password);
        }
        if tls(&info) {
            builder = builder.set_client_to_redis_tls_mode(TlsMode::Secure);
            if let Some(roots) = roots {
                builder = builder.set_client_to_redis_certificates(roots);
            }
        }
    }
    builder.build()
}
