//! `/admin/routes/{route}/reconcile` (README, "Reconciliation"): `GET` the
//! route's reconciliation as the fleet last recorded it; `POST` one pass
//! now (`?since=2d`, `?dry_run=true` lists what is missing and changes
//! nothing). A pass runs as a task of the gateway: a caller that hangs up
//! does not cut it short.

use std::net::SocketAddr;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;

use super::query::{query_flag, query_param};
use super::Admin;
use crate::error::{json_response, AdminError, OpsError};
use crate::reconcile::{Report, RunError};

impl Admin {
    pub(super) async fn reconcile(
        &self,
        request: &Request<Incoming>,
        route: &str,
        peer: SocketAddr,
        (via, role): (&'static str, &'static str),
    ) -> Result<Response<Full<Bytes>>, AdminError> {
        self.parts
            .routes
            .named(route)
            .ok_or(AdminError::UnknownRoute)?;
        let method = request.method();
        if method == Method::GET {
            let status = self.reconciler.status(route).await.map_err(refused)?;
            return Ok(json_response(StatusCode::OK, &status));
        }
        if method != Method::POST {
            return Err(AdminError::MethodNotAllowed);
        }
        let since = match query_param(request, "since") {
            Some(text) => Some(crate::clock::parse_duration(&text).map_err(|error| {
                AdminError::BadQuery(format!("since: {error} (a duration like 2d)"))
            })?),
            None => None,
        };
        let dry_run = query_flag(request, "dry_run");
        tracing::info!(target: "hookgate::admin", %peer, via, role, route, ?since, dry_run, "admin action: reconcile");
        match self.reconciler.run_now(route, since, dry_run).await {
            Ok(Report::Ran(status) | Report::DryRun(status)) => {
                Ok(json_response(StatusCode::OK, &status))
            }
            Err(error) => Err(refused(error)),
        }
    }
}

fn refused(error: RunError) -> AdminError {
    match error {
        RunError::NotConfigured => AdminError::NotReconciled,
        RunError::Busy | RunError::NotDue(_) => AdminError::ReconcileRunning,
        RunError::Since(message) => AdminError::BadQuery(message),
        RunError::Store(error) => AdminError::Ops(OpsError::StoreUnavailable(error.to_string())),
    }
}
