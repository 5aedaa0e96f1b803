//! The query parameters the commands send: a selection (`route=`,
//! `state=`), the listing filters, `destination=`, and a path with them.

use super::encode;
use hookgate::clock::rfc3339;

/// One destination's deliveries, of a route with several (docs/guide/destinations.md,
/// "Several destinations").
#[derive(clap::Args)]
pub(super) struct DestinationArg {
    /// The destination (of a route with [[routes.destinations]]).
    #[arg(long)]
    pub(super) destination: Option<String>,
}

impl DestinationArg {
    pub(super) fn query(&self) -> Option<String> {
        (self.destination.as_ref()).map(|d| format!("destination={}", encode(d)))
    }
}

/// `path` with the query parameters `query`, if any.
pub(super) fn with_query(path: String, query: impl IntoIterator<Item = String>) -> String {
    let query: Vec<String> = query.into_iter().collect();
    match query.is_empty() {
        true => path,
        false => format!("{path}?{}", query.join("&")),
    }
}

/// Which events a listing keeps (docs/guide/dead-letters.md, "Failed events and dead letters").
#[derive(clap::Args)]
pub(super) struct FilterArgs {
    #[command(flatten)]
    pub(super) destination: DestinationArg,
    /// Changed since: a duration ago (`2h`, `30m`) or an RFC 3339 time.
    #[arg(long)]
    since: Option<String>,
    /// Changed until: a duration ago or an RFC 3339 time.
    #[arg(long)]
    until: Option<String>,
    /// The last failed attempt's upstream status (e.g. 503).
    #[arg(long)]
    status: Option<u16>,
    /// The last failed attempt's class: refused, not_delivered or unknown.
    #[arg(long)]
    error: Option<String>,
    /// SOURCE=VALUE on the stored request, like
    /// `json:/data/object/customer=cus_123` or `header:X-Shop-Domain=a.example`;
    /// repeatable, every one must hold.
    #[arg(long)]
    q: Vec<String>,
}

/// A `--state` as given, once it names a state (a usage error, exit 2,
/// otherwise).
pub(super) fn state(text: &str) -> Result<String, String> {
    match hookgate::store::RecordState::parse(text) {
        Some(_) => Ok(text.to_owned()),
        None => Err(format!(
            "{text:?} is not a state: {}",
            hookgate::store::RecordState::names()
        )),
    }
}

/// `route=` and `state=` of a listing or a bulk action, as query parameters.
pub(super) fn selection_query(route: Option<&String>, state: Option<&String>) -> Vec<String> {
    let route = route.map(|r| format!("route={}", encode(r)));
    let state = state.map(|s| format!("state={}", encode(s)));
    route.into_iter().chain(state).collect()
}

impl FilterArgs {
    /// `--since` as Unix ms (a duration ago counted from `now_ms`), when
    /// given and readable: the floor no walk of a listing goes below.
    pub(super) fn since_ms(&self, now_ms: u64) -> Option<u64> {
        let text = self.since.as_ref()?;
        match hookgate::config::parse_duration(text) {
            Ok(ago) => Some(now_ms.saturating_sub(ago.as_millis() as u64)),
            Err(_) => hookgate::clock::rfc3339_ms(text).ok(),
        }
    }

    /// Whether any filter is given.
    pub(super) fn is_empty(&self) -> bool {
        self.destination.destination.is_none()
            && self.since.is_none()
            && self.until.is_none()
            && self.status.is_none()
            && self.error.is_none()
            && self.q.is_empty()
    }

    /// As query parameters of `GET /admin/events`. A time given as a
    /// duration ago is resolved here, once, so every page of a walk has
    /// the same window.
    pub(super) fn query(&self) -> Vec<String> {
        self.query_at(hookgate::clock::unix_ms())
    }

    /// [`FilterArgs::query`] with durations ago counted from `now_ms`.
    pub(super) fn query_at(&self, now_ms: u64) -> Vec<String> {
        let at = |text: &String| match hookgate::config::parse_duration(text) {
            Ok(ago) => rfc3339(now_ms.saturating_sub(ago.as_millis() as u64)),
            Err(_) => text.clone(),
        };
        let mut query = Vec::new();
        query.extend(self.destination.query());
        query.extend(
            self.since
                .as_ref()
                .map(|t| format!("since={}", encode(&at(t)))),
        );
        query.extend(
            self.until
                .as_ref()
                .map(|t| format!("until={}", encode(&at(t)))),
        );
        query.extend(self.status.map(|status| format!("status={status}")));
        query.extend(self.error.as_ref().map(|e| format!("error={}", encode(e))));
        query.extend(self.q.iter().map(|q| format!("q={}", encode(q))));
        query
    }
}
