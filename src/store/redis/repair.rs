//! A Redis Cluster connection that is replaced when it stops answering.
//!
//! The cluster client repairs itself after a failover as a rule, but
//! measured against a real cluster (BENCHMARKS.md, "One route over the
//! whole cluster") a burst of requests to a master that had just died left
//! the client answering nothing — not even for the live masters' slots —
//! for as long as it was watched, minutes after the replica had taken over.
//! So the store tells the connector how each operation went
//! ([`Repairing::observed`]), and a connection that has answered nothing
//! for [`Repairing::stall`] is dropped: the next operation connects afresh
//! from the configured nodes, learning the slots anew. Requests already
//! sent on the old connection end with it. While the whole cluster is down
//! this retries the connection once per stall; a real outage costs nothing
//! more than the failed connection attempts.

use std::sync::Mutex;
use std::time::Duration;

use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use tokio::time::Instant;

use super::backend;
use crate::store::StoreError;

pub(super) struct Repairing {
    state: Mutex<State>,
    /// One connection attempt at a time.
    connecting: tokio::sync::Mutex<()>,
    /// How long answering nothing makes a connection broken.
    stall: Duration,
    /// Bounds a connection attempt (the client's own may hang).
    timeout: Duration,
}

#[derive(Default)]
struct State {
    current: Option<ClusterConnection>,
    /// Since when every operation failed, if the last one did.
    failing_since: Option<Instant>,
}

impl Repairing {
    pub(super) fn new(timeout: Duration) -> Self {
        Self {
            state: Mutex::default(),
            connecting: tokio::sync::Mutex::new(()),
            stall: (timeout * 3).max(Duration::from_secs(1)),
            timeout: timeout.max(Duration::from_secs(1)),
        }
    }

    /// The connection to send on: the current one, or a new one when there
    /// is none or the current one stalled.
    pub(super) async fn get(
        &self,
        client: &ClusterClient,
    ) -> Result<ClusterConnection, StoreError> {
        if let Some(connection) = self.usable() {
            return Ok(connection);
        }
        let _connecting = self.connecting.lock().await;
        if let Some(connection) = self.usable() {
            return Ok(connection);
        }
        let replacing = self.lock().current.is_some();
        let connected = tokio::time::timeout(self.timeout, client.get_async_connection())
            .await
            .unwrap_or_else(|_| Err((redis::ErrorKind::Io, "connecting timed out").into()));
        let connection = match connected {
            Ok(connection) => connection,
            Err(error) => {
                // Keep the old one for another stall before trying again.
                self.lock().failing_since = Some(Instant::now());
                return Err(backend(error));
            }
        };
        if replacing {
            tracing::warn!(
                stall_ms = self.stall.as_millis() as u64,
                "the Redis Cluster connection answered nothing for its stall time; replaced it \
                 with a new one"
            );
        }
        let mut state = self.lock();
        state.current = Some(connection.clone());
        state.failing_since = None;
        Ok(connection)
    }

    /// How an operation on the connection went.
    pub(super) fn observed(&self, answered: bool) {
        let mut state = self.lock();
        match answered {
            true => state.failing_since = None,
            false => {
                state.failing_since.get_or_insert_with(Instant::now);
            }
        }
    }

    fn usable(&self) -> Option<ClusterConnection> {
        let state = self.lock();
        let stalled = state
            .failing_since
            .is_some_and(|since| since.elapsed() >= self.stall);
        state.current.clone().filter(|_| !stalled)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
