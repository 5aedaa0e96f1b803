//! [`Records`]: claims, and the records they leave.

use std::time::Duration;

use super::Records;
use crate::store::backend;
use crate::store::backends::on;
use crate::store::{
    new_token, ClaimMode, ClaimOutcome, ClaimRequest, Deleted, Failure, ForceRelease, Lease,
    Record, RecordState, RecordedResponse, StoreError, StoreKey, Stored,
};

impl Records<'_> {
    /// Claim a key. A claim whose answer does not arrive in time may still
    /// have been applied — the store was merely slow — and would then block
    /// every retry of the event, 409, for `processing_ttl` under a token
    /// nobody holds: so a failed claim is released again with its token (a
    /// no-op when it was not applied).
    pub async fn claim(&self, request: ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        let cache = self
            .store
            .cache
            .as_ref()
            .filter(|_| request.mode == ClaimMode::Deliver);
        if let Some(record) = cache.and_then(|_| self.store.replayed(request.key)) {
            return Ok(ClaimOutcome::Completed(Record::clone(&record)));
        }
        let epoch = cache.map(|cache| cache.epoch());
        let result = self.claim_in_store(request).await;
        if matches!(request.mode, ClaimMode::Redeliver { .. }) {
            // A forced redelivery has taken a completed record over.
            self.store.invalidate(request.key).await;
        }
        if let (Some(cache), Some(epoch), Ok(ClaimOutcome::Completed(record))) =
            (cache, epoch, &result)
        {
            cache.insert(request.key, record, request.retention, epoch);
        }
        result
    }

    pub(super) async fn claim_in_store(
        &self,
        request: ClaimRequest<'_>,
    ) -> Result<ClaimOutcome, StoreError> {
        let token = new_token();
        let kept = request
            .stored
            .and_then(|stored| self.store.kept_request(request.key, stored.request));
        let request = match (&kept, request.stored) {
            (Some(kept), Some(stored)) => ClaimRequest {
                stored: Some(Stored {
                    request: kept,
                    ..stored
                }),
                ..request
            },
            _ => request,
        };
        let result = self
            .store
            .deadline_at("claim", request.key.source(), async {
                on!(self.store.backend, b => backend::Records::claim(b, request, &token).await)
            })
            .await;
        let result = match result {
            Ok(ClaimOutcome::Completed(record)) => self
                .store
                .opened(request.key, record)
                .map(ClaimOutcome::Completed),
            Ok(ClaimOutcome::Dead(record)) => self
                .store
                .opened(request.key, record)
                .map(ClaimOutcome::Dead),
            other => other,
        };
        if result.is_err() {
            // Boxed, as every store operation is (`Store::deadline_at`).
            let undo = Box::pin(async {
                on!(self.store.backend, b => backend::Records::release(b, request.key, &token).await)
            });
            if let Ok(Ok(true)) = tokio::time::timeout(self.store.timeout, undo).await {
                tracing::info!(key = %request.key, "released a claim whose answer was lost");
            }
        }
        result
    }

    pub async fn renew(
        &self,
        key: &StoreKey,
        lease: &Lease,
        processing_ttl: Duration,
    ) -> Result<bool, StoreError> {
        self.store.deadline_at("renew", key.source(), async {
            on!(self.store.backend, b => backend::Records::renew(b, key, &lease.token, processing_ttl).await)
        })
        .await
    }

    pub async fn complete(
        &self,
        key: &StoreKey,
        lease: &Lease,
        response: &RecordedResponse,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        let kept = self.store.kept_response(key, response);
        let response = kept.as_ref().unwrap_or(response);
        let op = async {
            on!(self.store.backend, b => backend::Records::complete(b, key, &lease.token, response, retention).await)
        };
        self.store.deadline_at("complete", key.source(), op).await
    }

    pub async fn fail(
        &self,
        key: &StoreKey,
        lease: &Lease,
        failure: &Failure<'_>,
    ) -> Result<Option<RecordState>, StoreError> {
        let kept = self.store.kept_request(key, failure.request);
        let attempt = self.store.kept_attempt(key, failure.attempt);
        let failure = Failure {
            request: kept.as_ref().unwrap_or(failure.request),
            attempt: attempt.as_ref().unwrap_or(failure.attempt),
            ..*failure
        };
        let op = async {
            on!(self.store.backend, b => backend::Records::fail(b, key, &lease.token, &failure).await)
        };
        self.store.deadline_at("fail", key.source(), op).await
    }

    pub async fn release(&self, key: &StoreKey, lease: &Lease) -> Result<bool, StoreError> {
        self.store
            .deadline_at("release", key.source(), async {
                on!(self.store.backend, b => backend::Records::release(b, key, &lease.token).await)
            })
            .await
    }

    pub async fn get(&self, key: &StoreKey) -> Result<Option<Record>, StoreError> {
        let record = self
            .store
            .deadline("get", async {
                on!(self.store.backend, b => backend::Records::get(b, key).await)
            })
            .await?;
        record
            .map(|record| self.store.opened(key, record))
            .transpose()
    }

    /// Forget `key` unless it is in flight (or `force`); see [`Records::delete`](backend::Records::delete).
    pub async fn delete(&self, key: &StoreKey, force: bool) -> Result<Deleted, StoreError> {
        let deleted = self
            .store
            .deadline_at("delete", key.source(), async {
                on!(self.store.backend, b => backend::Records::delete(b, key, force).await)
            })
            .await;
        self.store.invalidate(key).await;
        deleted
    }

    /// Release a claim whatever its holder (admin): compare-and-set on the
    /// token it holds now, so a claim that completes meanwhile is left alone.
    pub async fn force_release(&self, key: &StoreKey) -> Result<ForceRelease, StoreError> {
        let Some(record) = self.get(key).await? else {
            return Ok(ForceRelease::NotFound);
        };
        let Some(token) = record.token else {
            return Ok(ForceRelease::NotInFlight);
        };
        let lease = Lease {
            token,
            attempt: record.attempts,
        };
        Ok(if self.release(key, &lease).await? {
            ForceRelease::Released
        } else {
            ForceRelease::NotInFlight
        })
    }
}
