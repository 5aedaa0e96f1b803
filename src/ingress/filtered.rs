//! An event the route's filter does not take (docs/reference/configuration.md, `filter`): never
//! forwarded, answered — 200 `{"filtered":true}` on a sync route,
//! `accept_status` and the same body on an async one — and recorded as a
//! completed event with that answer for the route's retention, so a
//! duplicate is answered as a duplicate (`Idempotent-Replayed: true`).

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, Response, StatusCode};
use http_body_util::Full;

use super::{Claimed, Gateway, Outcome};
use crate::config::DeliveryMode;
use crate::error::GatewayError;
use crate::replay::{BodyKept, RecordedResponse};
use crate::route::{Route, Runtime};

/// The body of a filtered event's answer.
const FILTERED: &[u8] = br#"{"filtered":true}"#;

impl Gateway {
    pub(super) async fn filtered(
        &self,
        runtime: &Runtime,
        route: &Route,
        key: &str,
        body_sha256: &str,
    ) -> Result<(Response<Full<Bytes>>, Outcome), GatewayError> {
        let status = match &route.delivery {
            DeliveryMode::Async(settings) => settings.accept_status,
            DeliveryMode::Sync => StatusCode::OK,
        };
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let answer = RecordedResponse {
            status,
            headers,
            body: Bytes::from_static(FILTERED),
            body_kept: BodyKept::Whole,
        };
        match self.claim(runtime, route, key, body_sha256).await? {
            Claimed::New(claimed) => {
                self.engine.record(route, claimed, &answer).await;
            }
            Claimed::Duplicate(recorded) => return Ok((recorded, Outcome::Replayed)),
            Claimed::Dead(answer) => return Ok((answer, Outcome::DeadLetter)),
            Claimed::Unprotected => {}
        }
        let mut response = Response::new(Full::new(answer.body));
        *response.status_mut() = answer.status;
        *response.headers_mut() = answer.headers;
        Ok((response, Outcome::Filtered))
    }
}
