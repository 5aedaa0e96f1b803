//! The store backends a test runs on, as one list: [`every_backend!`]
//! names them, the gateway's scenarios run on them with [`on_backends!`],
//! and the store contract (`conformance/`) takes its list from the same
//! macro. Adding a backend is its name in that list and its opener here
//! (and one in `conformance/mod.rs`, which opens the store itself).

use super::{shared_cluster, shared_sentinels, Backend, RedisServer, TestDatabase};

/// Every store backend, by the name of its opener: `every_backend!(m {
/// args })` is `m! { args backends: [...] }`.
#[macro_export]
macro_rules! every_backend {
    ($($m:ident)::+ { $($args:tt)* }) => {
        $($m)::+! { $($args)* backends: [memory, embedded, redis, sentinel, cluster, postgres] }
    };
}

/// `on_backends!(scenario)`: a test of `scenario(backend)` on every
/// backend; `on_backends!(scenario: [memory, redis])` on those named. The
/// tests are `scenario::memory`, `scenario::redis`, …; a backend that
/// cannot run here (outside CI) skips.
#[macro_export]
macro_rules! on_backends {
    ($scenario:ident) => {
        $crate::every_backend!($crate::on_backends { $scenario: });
    };
    ($scenario:ident : backends: [$($backend:ident),* $(,)?]) => {
        $crate::on_backends!($scenario: [$($backend),*]);
    };
    ($scenario:ident : [$($backend:ident),* $(,)?]) => {
        mod $scenario {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $backend() {
                    let Some(opened) = $crate::support::stores::$backend().await else {
                        return;
                    };
                    super::$scenario(opened.backend.clone()).await;
                    drop(opened);
                }
            )*
        }
    };
}

/// A backend for one test, and what must live as long as it: a temp
/// dir, a `redis-server`, a database.
pub struct Opened {
    pub backend: Backend,
    _keep: Box<dyn std::any::Any + Send>,
}

fn opened(backend: Backend, keep: impl std::any::Any + Send) -> Option<Opened> {
    Some(Opened {
        backend,
        _keep: Box::new(keep),
    })
}

pub async fn memory() -> Option<Opened> {
    opened(Backend::Memory, ())
}

pub async fn embedded() -> Option<Opened> {
    let dir = tempfile::tempdir().unwrap();
    opened(Backend::Embedded(dir.path().join("hookgate.db")), dir)
}

pub async fn redis() -> Option<Opened> {
    let redis = RedisServer::start().await?;
    opened(Backend::Redis(redis.url()), redis)
}

/// The suite's one set of three sentinels over a primary and replica.
pub async fn sentinel() -> Option<Opened> {
    let set = shared_sentinels().await?;
    opened(Backend::RedisSentinel(set.toml()), ())
}

/// The suite's one cluster.
pub async fn cluster() -> Option<Opened> {
    let cluster = shared_cluster().await?;
    opened(Backend::RedisCluster(cluster.toml()), ())
}

/// A fresh database.
pub async fn postgres() -> Option<Opened> {
    let database = TestDatabase::create().await;
    opened(Backend::Postgres(database.url()), database)
}
