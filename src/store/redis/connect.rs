//! How the Redis store reaches Redis: one server (a shared
//! `ConnectionManager`, plus a pool of connections of their own for writes
//! that `WAIT`) or a cluster (the crate's slot-aware client), and the
//! settings that build them (`rediss://` roots from `store.tls_ca`).

use std::future::Future;
use std::ops::DerefMut;
use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{AsyncConnectionConfig, Cmd, Value};

use super::repair::Repairing;
use super::{backend, RedisStore};
use crate::store::{StoreError, StoreSettings};

/// Connections of their own for claims and completions that `WAIT` (single
/// Redis): each `WAIT` holds up only its own connection.
const ACKED_CONNECTIONS: u32 = 32;

/// How the store reaches Redis: one server or a cluster.
pub trait Connector: Send + Sync + 'static {
    type Connection: ConnectionLike + Clone + Send + Sync;
    /// A connection of its own for a write followed by `WAIT`: `WAIT` holds
    /// up the connection it is sent on until the replicas answer, so it must
    /// never run on the shared one that every other operation uses.
    type Acked: DerefMut<Target = Self::AckedConnection> + Send;
    type AckedConnection: ConnectionLike + Send;
    /// The backend's name in `[store]`.
    const NAME: &'static str;
    /// Whether keys are spread over slots, so a scope must be a hash tag
    /// (see [`Backend::namespace`](super::super::Backend::namespace)).
    const HASH_TAGS: bool;

    /// The shared connection to send one operation on.
    fn connection(&self) -> impl Future<Output = Result<Self::Connection, StoreError>> + Send;

    /// A connection for a write followed by `WAIT`, see [`Connector::Acked`].
    fn acked(&self) -> impl Future<Output = Result<Self::Acked, StoreError>> + Send;

    /// Where the replay cache's invalidation feed subscribes: each call
    /// names the server for one (re)subscription. `None`: no feed.
    fn subscriber(&self) -> Option<Subscriber>;

    /// How an operation went, for a connection that repairs itself.
    fn observed(&self, answered: bool) {
        let _ = answered;
    }

    /// Route `cmd` (which names no key) to the master serving `key`: on
    /// one server, the connection's own.
    fn send_to_master_of(
        connection: &mut Self::AckedConnection,
        key: &str,
        cmd: Cmd,
    ) -> impl Future<Output = redis::RedisResult<Value>> + Send {
        let _ = key;
        async move { cmd.query_async(connection).await }
    }
}

/// Names the server the replay cache's feed subscribes on next (see
/// [`Connector::subscriber`]).
pub type Subscriber =
    Box<dyn FnMut() -> BoxFuture<'static, Option<redis::Client>> + Send + 'static>;

/// A subscriber taking `clients` in turn, any one of which will do.
fn in_turn(clients: Vec<redis::Client>) -> Option<Subscriber> {
    if clients.is_empty() {
        return None;
    }
    let mut next = 0;
    Some(Box::new(move || {
        let client = clients[next % clients.len()].clone();
        next += 1;
        Box::pin(std::future::ready(Some(client)))
    }))
}

/// Connections of their own to one Redis server, for [`Connector::Acked`],
/// answering within the store `timeout` (a `WAIT` takes up to half of it).
pub struct Dedicated {
    client: redis::Client,
    timeout: Duration,
}

impl bb8::ManageConnection for Dedicated {
    type Connection = MultiplexedConnection;
    type Error = redis::RedisError;

    async fn connect(&self) -> redis::RedisResult<MultiplexedConnection> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        self.client
            .get_multiplexed_async_connection_with_config(&config)
            .await
    }

    async fn is_valid(&self, connection: &mut MultiplexedConnection) -> redis::RedisResult<()> {
        redis::cmd("PING").query_async(connection).await
    }

    fn has_broken(&self, _: &mut MultiplexedConnection) -> bool {
        false
    }
}

impl Dedicated {
    /// Up to [`ACKED_CONNECTIONS`] connections to `client`'s server, opened
    /// on first use: with `min_replicas_acked = 0` the pool stays empty.
    pub(super) fn pool(client: &redis::Client, timeout: Duration) -> bb8::Pool<Dedicated> {
        bb8::Pool::builder()
            .max_size(ACKED_CONNECTIONS)
            .connection_timeout(timeout)
            .build_unchecked(Dedicated {
                client: client.clone(),
                timeout,
            })
    }

    /// A connection of the pool, for [`Connector::acked`].
    pub(super) async fn take(
        pool: &bb8::Pool<Dedicated>,
    ) -> Result<bb8::PooledConnection<'static, Dedicated>, StoreError> {
        pool.get_owned().await.map_err(|error| match error {
            bb8::RunError::User(error) => backend(error),
            bb8::RunError::TimedOut => StoreError::Timeout,
        })
    }
}

/// The connection every operation on one Redis server shares: it
/// pipelines concurrent requests and reconnects by itself, in the
/// background between requests.
pub(super) fn shared(
    client: &redis::Client,
    timeout: Duration,
) -> Result<ConnectionManager, StoreError> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        // Keep each reconnect attempt short so a returning Redis is picked
        // up quickly.
        .set_number_of_retries(2)
        .set_max_delay(Duration::from_millis(500));
    ConnectionManager::new_lazy_with_config(client.clone(), config).map_err(backend)
}

/// One Redis server: a `ConnectionManager` shared by every operation, and a
/// small pool of connections of their own for writes that `WAIT`.
pub struct Single {
    shared: ConnectionManager,
    acked: bb8::Pool<Dedicated>,
    client: redis::Client,
}

impl Connector for Single {
    type Connection = ConnectionManager;
    type Acked = bb8::PooledConnection<'static, Dedicated>;
    type AckedConnection = MultiplexedConnection;
    const NAME: &'static str = "redis";
    const HASH_TAGS: bool = false;

    async fn connection(&self) -> Result<ConnectionManager, StoreError> {
        Ok(self.shared.clone())
    }

    fn subscriber(&self) -> Option<Subscriber> {
        in_turn(vec![self.client.clone()])
    }

    async fn acked(&self) -> Result<Self::Acked, StoreError> {
        Dedicated::take(&self.acked).await
    }
}

/// A Redis Cluster, connected on first use: one connection for every
/// operation, and one of its own for the writes that `WAIT`, each replaced
/// when it stops answering (`repair.rs`).
pub struct Cluster {
    client: ClusterClient,
    connection: Repairing,
    acked: Repairing,
    /// One client per configured node, for the replay cache's feed: a
    /// `PUBLISH` on any node reaches subscribers on every node.
    nodes: Vec<redis::Client>,
}

impl Connector for Cluster {
    fn subscriber(&self) -> Option<Subscriber> {
        in_turn(self.nodes.clone())
    }

    type Connection = ClusterConnection;
    type Acked = Box<ClusterConnection>;
    type AckedConnection = ClusterConnection;
    const NAME: &'static str = "redis-cluster";
    const HASH_TAGS: bool = true;

    async fn connection(&self) -> Result<ClusterConnection, StoreError> {
        self.connection.get(&self.client).await
    }

    async fn acked(&self) -> Result<Box<ClusterConnection>, StoreError> {
        self.acked.get(&self.client).await.map(Box::new)
    }

    fn observed(&self, answered: bool) {
        self.connection.observed(answered);
        self.acked.observed(answered);
    }

    async fn send_to_master_of(
        connection: &mut ClusterConnection,
        key: &str,
        cmd: Cmd,
    ) -> redis::RedisResult<Value> {
        let route = Route::with_key(key.as_bytes(), SlotAddr::Master);
        connection
            .route_command(
                cmd,
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
            )
            .await
    }
}

impl RedisStore<Single> {
    /// Prepare a lazily connecting store for one Redis at `url`.
    pub fn connect(url: &str, settings: &StoreSettings) -> Result<Self, StoreError> {
        let (timeout, min_replicas_acked) = (settings.timeout, settings.min_replicas_acked);
        let client = match tls_roots(settings)? {
            Some(certs) => redis::Client::build_with_tls(url, certs),
            None => redis::Client::open(url),
        }
        .map_err(backend)?;
        let store = Self::with(
            Single {
                shared: shared(&client, timeout)?,
                acked: Dedicated::pool(&client, timeout),
                client,
            },
            timeout,
            min_replicas_acked,
        );
        Ok(store.packing(settings.packed_claims, settings.packed_completions))
    }
}

impl RedisStore<Cluster> {
    /// Prepare a store for the cluster reachable through `nodes`.
    pub fn connect_cluster(nodes: &[String], settings: &StoreSettings) -> Result<Self, StoreError> {
        let (timeout, min_replicas_acked) = (settings.timeout, settings.min_replicas_acked);
        let mut builder = ClusterClient::builder(nodes.to_vec());
        let roots = tls_roots(settings)?;
        if let Some(certs) = roots.clone() {
            builder = builder.certs(certs);
        }
        let node_clients = nodes
            .iter()
            .map(|url| match roots.clone() {
                Some(certs) => redis::Client::build_with_tls(url.as_str(), certs),
                None => redis::Client::open(url.as_str()),
            })
            .collect::<Result<_, _>>()
            .map_err(backend)?;
        let client = builder
            .connection_timeout(timeout)
            .response_timeout(timeout)
            .retries(3)
            .min_retry_wait(10)
            .max_retry_wait(200)
            .build()
            .map_err(backend)?;
        let cluster = Cluster {
            client,
            connection: Repairing::new(timeout),
            acked: Repairing::new(timeout),
            nodes: node_clients,
        };
        let store = Self::with(cluster, timeout, min_replicas_acked);
        Ok(store.packing(settings.packed_claims, settings.packed_completions))
    }
}

/// Whether `url` is a Redis URL the client accepts (`check` and start-up).
pub fn check_url(url: &str) -> Result<(), String> {
    redis::Client::open(url)
        .map(drop)
        .map_err(|err| format!("not a valid Redis URL: {err}"))
}

/// `store.tls_ca` as the root certificates of `rediss://` connections.
pub(super) fn tls_roots(
    settings: &StoreSettings,
) -> Result<Option<redis::TlsCertificates>, StoreError> {
    let Some(path) = &settings.tls_ca else {
        return Ok(None);
    };
    let pem = std::fs::read(path)
        .map_err(|e| StoreError::Backend(format!("cannot read {}: {e}", path.display())))?;
    Ok(Some(redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(pem),
    }))
}
