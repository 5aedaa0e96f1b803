//! The reconciler's entrance (docs/guide/reconciliation.md, "Reconciliation"): an event hookgate
//! fetched from the sender's API, signed here as the sender signs, goes
//! through the stages a sender's delivery takes from its key on — the
//! route's filter, traffic control, the claim under the same key (so the
//! sender's own late retry is a duplicate) and the attempt, or an async
//! route's acceptance. Nothing is verified: hookgate signed it itself.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Request};
use sha2::{Digest, Sha256};

use super::{Gateway, Outcome, Verified};
use crate::delivery::fanout;
use crate::delivery::Kind;
use crate::error::GatewayError;
use crate::headers::{lower_hex, new_request_id};
use crate::key;
use crate::route::Route;
use crate::server::ConnectionInfo;
use crate::telemetry::SpanFacts;

/// What a fetched event's record holds before its body's SHA-256: the
/// API renders an event differently from the webhook (Stripe: at the
/// event's API version, not the endpoint's), so either matches the other
/// (`answer::check_body`). A sender's own is bare hex, never this.
pub(super) const FETCHED: &str = "fetched-";

impl Gateway {
    /// Deliver an event fetched from `route`'s sender: `headers` carry the
    /// signature hookgate made. Answers what the stages did, as they would
    /// have answered the sender.
    pub async fn deliver_fetched(
        self: &Arc<Self>,
        route: &Arc<Route>,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<Outcome, GatewayError> {
        let body_sha256 = lower_hex(&Sha256::digest(&body));
        let key = key::extract(&route.keying.key, &headers, &body, &body_sha256, |_| true)?;
        let verdict = fanout::judge(route, &headers, &body, &body_sha256);
        let (mut parts, ()) = Request::post(route.path.as_str())
            .body(())
            .map_err(|_| GatewayError::Internal)?
            .into_parts();
        parts.headers = headers;
        let event = Verified {
            route: Arc::clone(route),
            parts,
            body,
            key: Some(key.clone()),
            body_sha256: format!("{FETCHED}{body_sha256}"),
            verdict,
            admission: None,
            request_id: new_request_id(),
            connection: ConnectionInfo::new(SocketAddr::from(([127, 0, 0, 1], 0)), "https"),
            entrance: Kind::Reconcile,
        };
        let runtime = self.parts.routes.load();
        let trace = (self.parts.telemetry).delivery("reconciled delivery", &HeaderMap::new());
        let (done, store, upstream, trace) = self.deliver_apart(&runtime, event, trace).await?;
        let outcome = match &done {
            Ok((_, outcome)) => *outcome,
            Err(error) => Outcome::of_error(error),
        };
        let status = done.as_ref().ok().map(|(response, _)| response.status());
        tracing::info!(
            route = %route.name,
            key,
            outcome = outcome.as_str(),
            status = status.map(|status| status.as_u16()),
            store_ms = store.map(|d| d.as_secs_f64() * 1e3),
            upstream_ms = upstream.map(|d| d.as_secs_f64() * 1e3),
            "reconciled delivery"
        );
        trace.finish(SpanFacts {
            route: &route.name,
            outcome: outcome.as_str(),
            status: status.map(|status| status.as_u16()),
            key: Some(&key),
            store,
            upstream,
        });
        done.map(|(_, outcome)| outcome)
    }
}
