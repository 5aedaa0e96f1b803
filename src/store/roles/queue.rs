//! [`Queue`]: leases of due async events, and what a scope holds queued.

use std::time::Duration;

use super::Queue;
use crate::store::backend;
use crate::store::backends::on;
use crate::store::{new_token, Due, Leased, Queued, Rules, StoreError, StoreKey};

impl Queue<'_> {
    /// Lease up to `limit` due async events of `scope` for `processing_ttl`
    /// (see [`Queue::lease_due`](backend::Queue::lease_due)). Leases applied after their answer was
    /// lost to the deadline hold their events under tokens nobody has; those
    /// events are due again when the leases run out, so they are delayed by
    /// `processing_ttl`, never lost.
    pub async fn lease_due(
        &self,
        scope: &str,
        limit: usize,
        processing_ttl: Duration,
    ) -> Result<Vec<Due>, StoreError> {
        let mut leased = Vec::new();
        // Each pass starts at the next shard, so none waits behind another.
        for shard in self.store.shards.rotation() {
            let room = limit - leased.len();
            if room == 0 {
                break;
            }
            let source = self.store.source(scope, shard);
            let tokens: Vec<String> = (0..room).map(|_| new_token()).collect();
            let op = async {
                on!(self.store.backend, b => backend::Queue::lease_due(b, &source, &tokens, processing_ttl).await)
            };
            leased.extend(self.opened_due(
                &source,
                self.store.deadline_at("lease_due", &source, op).await?,
            ));
        }
        Ok(leased)
    }

    /// As [`Queue::lease_due`](Self::lease_due), keeping each entity's order (see
    /// [`Queue::lease_ordered`](backend::Queue::lease_ordered)).
    pub async fn lease_ordered(
        &self,
        scope: &str,
        limit: usize,
        processing_ttl: Duration,
        rules: Rules,
    ) -> Result<Leased, StoreError> {
        let mut leased = Leased::default();
        for shard in self.store.shards.rotation() {
            let room = limit - leased.due.len();
            if room == 0 {
                break;
            }
            let source = self.store.source(scope, shard);
            let tokens: Vec<String> = (0..room).map(|_| new_token()).collect();
            let op = async {
                on!(self.store.backend, b => backend::Queue::lease_ordered(b, &source, &tokens, processing_ttl, rules).await)
            };
            let more = self.store.deadline_at("lease_ordered", &source, op).await?;
            leased.due.extend(self.opened_due(&source, more.due));
            leased.stale.extend(more.stale);
        }
        Ok(leased)
    }

    /// The leased events whose records open; one that does not is left to
    /// its lease (counted and logged by [`Store::opened`](crate::store::Store::opened)): it is due again
    /// when the lease runs out, kept, never delivered as garbage.
    fn opened_due(&self, source: &str, due: Vec<Due>) -> Vec<Due> {
        (due.into_iter())
            .filter_map(|due| {
                let key = StoreKey::event(source, &due.id);
                let record = self.store.opened(&key, due.record).ok()?;
                Some(Due { record, ..due })
            })
            .collect()
    }

    /// What `scope` holds queued (`Listing::queued`), every shard's.
    pub async fn queued(&self, scope: &str) -> Result<Queued, StoreError> {
        let mut queued = Queued::default();
        for source in self.store.sources(scope) {
            queued += (self.store.deadline("queued", async {
                on!(self.store.backend, b => backend::Listing::queued(b, &source).await)
            }))
            .await?;
        }
        Ok(queued)
    }
}
