//! A backend whose answers come late, for the facade's unit tests: every
//! operation is applied (to a memory store) and answered 300 ms later, as
//! a store under load does — the claim is in the store, its answer past
//! the deadline.

use std::time::Duration;

/// A backend that applies every operation and then answers late, as a
/// store under load does: the claim is in the store, its answer is not.
pub struct LateAnswers(crate::store::MemoryStore);

impl crate::store::Backend for LateAnswers {
    const NAME: &'static str = "late";
}

impl crate::store::Records for LateAnswers {
    async fn claim(
        &self,
        request: crate::store::ClaimRequest<'_>,
        token: &str,
    ) -> Result<crate::store::ClaimOutcome, crate::store::StoreError> {
        let applied = self.0.claim(request, token).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        applied
    }

    async fn renew(
        &self,
        key: &crate::store::StoreKey,
        token: &str,
        ttl: Duration,
    ) -> Result<bool, crate::store::StoreError> {
        self.0.renew(key, token, ttl).await
    }

    async fn complete(
        &self,
        key: &crate::store::StoreKey,
        token: &str,
        response: &crate::store::RecordedResponse,
        retention: Duration,
    ) -> Result<bool, crate::store::StoreError> {
        self.0.complete(key, token, response, retention).await
    }

    async fn fail(
        &self,
        key: &crate::store::StoreKey,
        token: &str,
        failure: &crate::store::Failure<'_>,
    ) -> Result<Option<crate::store::RecordState>, crate::store::StoreError> {
        self.0.fail(key, token, failure).await
    }

    async fn release(
        &self,
        key: &crate::store::StoreKey,
        token: &str,
    ) -> Result<bool, crate::store::StoreError> {
        self.0.release(key, token).await
    }

    async fn get(
        &self,
        key: &crate::store::StoreKey,
    ) -> Result<Option<crate::store::Record>, crate::store::StoreError> {
        self.0.get(key).await
    }

    async fn delete(
        &self,
        key: &crate::store::StoreKey,
        force: bool,
    ) -> Result<crate::store::Deleted, crate::store::StoreError> {
        self.0.delete(key, force).await
    }
}

impl crate::store::Queue for LateAnswers {
    async fn lease_due(
        &self,
        source: &str,
        tokens: &[String],
        processing_ttl: Duration,
    ) -> Result<Vec<crate::store::Due>, crate::store::StoreError> {
        self.0.lease_due(source, tokens, processing_ttl).await
    }
}

impl crate::store::Transfer for LateAnswers {
    async fn export(
        &self,
        key: &crate::store::StoreKey,
    ) -> Result<Option<(crate::store::Record, u64)>, crate::store::StoreError> {
        self.0.export(key).await
    }

    async fn import(
        &self,
        key: &crate::store::StoreKey,
        record: &crate::store::Record,
        expires_at_ms: u64,
        guard: Option<&crate::store::StoreKey>,
    ) -> Result<bool, crate::store::StoreError> {
        self.0.import(key, record, expires_at_ms, guard).await
    }

    async fn reseal(
        &self,
        key: &crate::store::StoreKey,
        was: &crate::store::Record,
        now: &crate::store::Record,
    ) -> Result<bool, crate::store::StoreError> {
        self.0.reseal(key, was, now).await
    }
}

impl crate::store::Listing for LateAnswers {
    async fn list(
        &self,
        query: &crate::store::ListQuery<'_>,
    ) -> Result<Vec<(String, crate::store::Record)>, crate::store::StoreError> {
        self.0.list(query).await
    }

    async fn oldest(
        &self,
        source: &str,
        state: crate::store::RecordState,
    ) -> Result<Option<u64>, crate::store::StoreError> {
        self.0.oldest(source, state).await
    }

    async fn count(
        &self,
        source: &str,
        state: crate::store::RecordState,
    ) -> Result<u64, crate::store::StoreError> {
        self.0.count(source, state).await
    }

    async fn blocked(
        &self,
        source: &str,
        limit: usize,
    ) -> Result<Vec<crate::store::Blocked>, crate::store::StoreError> {
        self.0.blocked(source, limit).await
    }
}

impl crate::store::Fleet for LateAnswers {
    async fn set_control(
        &self,
        space: &str,
        route: &str,
        value: Option<&str>,
    ) -> Result<(), crate::store::StoreError> {
        self.0.set_control(space, route, value).await
    }

    async fn controls(
        &self,
        space: &str,
    ) -> Result<Vec<(String, String)>, crate::store::StoreError> {
        self.0.controls(space).await
    }
}

impl crate::store::Health for LateAnswers {
    async fn ping(&self, space: &str) -> Result<(), crate::store::StoreError> {
        self.0.ping(space).await
    }
}

/// A claim whose answer arrives after the store timeout was applied all the
/// same (a store under load); it is released again with its token, so the
/// event's retry is claimed at once instead of meeting 409 for
/// `processing_ttl` under a token nobody holds. (Seen in CI: a cluster claim
/// slower than 300 ms under load left its event answering 409 for 30 s.)
#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_claim_whose_answer_was_lost_is_released_again() {
        use crate::store::{ClaimRequest, MemoryStore, RecordState, Store};
        let backend = LateAnswers(MemoryStore::new(crate::clock::Clock::for_test()));
        let metrics = crate::metrics::StoreMetrics::unregistered();
        let store = Store::new(backend, "late:", Duration::from_millis(100), metrics);
        let key = store.key("s", "evt_late");
        let request = ClaimRequest::delivery(
            &key,
            "00",
            Duration::from_secs(60),
            Duration::from_secs(600),
        );
        let lost = store.records().claim(request).await;
        assert!(lost.is_err(), "the answer did not come in time: {lost:?}");
        let record = store
            .records()
            .get(&key)
            .await
            .unwrap()
            .expect("the claim was applied");
        assert_eq!(record.state, RecordState::Failed, "and released again");
        // The retry is a claim, not a 409 for the next 60 s (its answer is late
        // too, so it fails as well, and is released too).
        assert!(store.records().claim(request).await.is_err());
        assert_eq!(
            store.records().get(&key).await.unwrap().unwrap().attempts,
            2,
            "the retry claimed the key"
        );
    }
}
