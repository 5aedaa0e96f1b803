//! `/admin/routes/{route}/reconcile` (docs/guide/reconciliation.md, "Reconciliation"): `GET` the
//! route's reconciliation as the fleet last recorded it; `POST` one pass
//! now (`?since=2d`, `?dry_run=true` lists what is missing and changes
//! nothing). A pass runs as a task of the gateway: a caller that hangs up
//! does not cut it short.

use http::StatusCode;

use super::api::{Answer, Call};
use super::query::{query_flag, query_param};
use super::Admin;
use crate::error::{json_response, AdminError, OpsError};
use crate::reconcile::{Report, RunError};

impl Admin {
    /// `GET`: the route's reconciliation as the fleet last recorded it.
    pub(super) async fn reconcile_status(&self, call: Call<'_>) -> Answer {
        let route = self.reconciled(&call)?;
        let status = self.reconciler.status(route).await.map_err(refused)?;
        Ok(json_response(StatusCode::OK, &status))
    }

    /// `POST`: one pass now.
    pub(super) async fn reconcile_now(&self, call: Call<'_>) -> Answer {
        let route = self.reconciled(&call)?;
        let request = call.request;
        let since = match query_param(request, "since") {
            Some(text) => Some(crate::clock::parse_duration(&text).map_err(|error| {
                AdminError::BadQuery(format!("since: {error} (a duration like 2d)"))
            })?),
            None => None,
        };
        let dry_run = query_flag(request, "dry_run");
        let (peer, via, role) = (call.peer, call.via, call.role);
        tracing::info!(target: "hookgate::admin", %peer, via, role, route, ?since, dry_run, "admin action: reconcile");
        match self.reconciler.run_now(route, since, dry_run).await {
            Ok(Report::Ran(status) | Report::DryRun(status)) => {
                Ok(json_response(StatusCode::OK, &status))
            }
            Err(error) => Err(refused(error)),
        }
    }

    /// The route a call names, if there is one.
    fn reconciled<'a>(&self, call: &Call<'a>) -> Result<&'a str, AdminError> {
        let route = call.param("route");
        self.parts
            .routes
            .named(route)
            .ok_or(AdminError::UnknownRoute)?;
        Ok(route)
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
