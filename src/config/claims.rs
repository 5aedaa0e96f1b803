//! The claims a route asks of the store, built in one place from its
//! settings: how long a claim holds (`processing_ttl`), how long its
//! record lives (`retention`; `dead_letter_retention` for an accepted
//! event, which outlives its attempts) and what the record keeps. Every
//! entrance that claims a route's event — a sender's delivery, an
//! acceptance into the queue, a destination's hand-out, an operator's
//! redelivery or replay, a notification — takes its claim from here.

use super::route::RouteConfig;
use crate::store::{ClaimMode, ClaimRequest, StoreKey, Stored, StoredRequest};

impl RouteConfig {
    /// A sender's delivery of `key`, held `processing_ttl` while the
    /// upstream works and kept `retention` once settled.
    pub fn claim_delivery<'a>(&self, key: &'a StoreKey, body_sha256: &'a str) -> ClaimRequest<'a> {
        ClaimRequest::delivery(
            key,
            body_sha256,
            self.claim.processing_ttl,
            self.claim.retention,
        )
    }

    /// `request` accepted into the route's queue (`mode`: `Accept`, or a
    /// hybrid's claim that owes the queue what it cannot finish), kept
    /// `dead_letter_retention`: an accepted event outlives its attempts.
    pub fn claim_acceptance<'a>(
        &'a self,
        key: &'a StoreKey,
        body_sha256: &'a str,
        request: &'a StoredRequest,
        mode: ClaimMode,
    ) -> ClaimRequest<'a> {
        ClaimRequest {
            mode,
            stored: Some(self.stored(request, None)),
            ..ClaimRequest::delivery(
                key,
                body_sha256,
                self.claim.processing_ttl,
                self.failures.dead_letter_retention,
            )
        }
    }

    /// An operator's send of a stored event again under its own key
    /// (`mode`: a redelivery, forced or not).
    pub fn claim_again<'a>(
        &self,
        key: &'a StoreKey,
        body_sha256: &'a str,
        mode: ClaimMode,
    ) -> ClaimRequest<'a> {
        ClaimRequest {
            mode,
            ..self.claim_delivery(key, body_sha256)
        }
    }

    /// An operator's replay: `request` as a new event under `key`,
    /// recorded as a replay of `of`.
    pub fn claim_replay<'a>(
        &'a self,
        key: &'a StoreKey,
        body_sha256: &'a str,
        request: &'a StoredRequest,
        of: &'a str,
    ) -> ClaimRequest<'a> {
        ClaimRequest {
            stored: Some(self.stored(request, Some(of))),
            ..self.claim_delivery(key, body_sha256)
        }
    }

    fn stored<'a>(&'a self, request: &'a StoredRequest, replay_of: Option<&'a str>) -> Stored<'a> {
        Stored {
            request,
            route: &self.name,
            replay_of,
        }
    }
}
