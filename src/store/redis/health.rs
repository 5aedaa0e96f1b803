//! Whether Redis serves — a write under the key prefix, so a read-only
//! replica or a user without write rights shows — and the Redis settings
//! that would silently lose claims.

use std::time::Duration;

use super::{backend, Connector, RedisStore};
use crate::store::{Health, StoreError};

impl<C: Connector> Health for RedisStore<C> {
    fn observed(&self, answered: bool) {
        self.connector.observed(answered);
    }

    async fn ping(&self, space: &str) -> Result<(), StoreError> {
        let mut connection = self.connector.connection().await?;
        self.probe
            .key(format!("{space}readyz"))
            .invoke_async::<i64>(&mut connection)
            .await
            .map(drop)
            .map_err(backend)
    }

    /// Redis settings that would silently lose claims: eviction (a claim or
    /// recording evicted under memory pressure is a forgotten event) and, for
    /// retentions over a day, no persistence (a Redis restart forgets
    /// everything). `CONFIG` may be refused on managed Redis; then nothing is
    /// reported.
    async fn risks(&self, longest_retention: Duration) -> Vec<String> {
        let mut risks = Vec::new();
        let Ok(connection) = self.connector.connection().await else {
            return risks;
        };
        let config = |name: &'static str| {
            let mut connection = connection.clone();
            async move {
                redis::cmd("CONFIG")
                    .arg("GET")
                    .arg(name)
                    .query_async::<Vec<String>>(&mut connection)
                    .await
                    .ok()
                    .and_then(|pair| pair.get(1).cloned())
            }
        };
        if let Some(policy) = config("maxmemory-policy")
            .await
            .filter(|p| p != "noeviction")
        {
            risks.push(format!(
                "Redis maxmemory-policy is {policy:?}: under memory pressure Redis may evict claims and \
                 recordings, and evicted events are processed again; set it to \"noeviction\""
            ));
        }
        if longest_retention > Duration::from_secs(86_400) {
            let aof = config("appendonly").await;
            let save = config("save").await;
            if aof.as_deref() == Some("no") && save.as_deref() == Some("") {
                risks.push(
                    "Redis persistence is off (appendonly no, no save points): a Redis restart forgets every \
                     claim and recording; enable AOF (appendonly yes)"
                        .to_owned(),
                );
            }
        }
        risks
    }
}
