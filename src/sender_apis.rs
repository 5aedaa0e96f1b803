//! The senders whose APIs hookgate reconciles with, as data
//! (docs/guide/reconciliation.md; `crate::reconcile` reads them, `config`
//! checks a route against them): where each lists what it sent, how its pages chain,
//! where an item keeps its time, its key and the sender's own outcome, and
//! how a missing one is recovered — delivered here, signed in the sender's
//! format, or asked of the sender again. A sender whose API fits these
//! shapes is one more [`SenderApi`] in [`SENDERS`].

use std::time::Duration;

const DAY: u64 = 86_400;

/// One sender's API, as reconciliation reads it.
#[derive(Debug)]
pub struct SenderApi {
    /// `[routes.reconcile] sender`.
    pub name: &'static str,
    /// The route's `scheme` this sender's deliveries arrive under.
    pub scheme: &'static str,
    /// The API's own base URL (`api_base` overrides it).
    pub api_base: &'static str,
    /// How far back the API lists (the longest `lookback`).
    pub retention: Duration,
    /// `lookback` when the route does not set it.
    pub default_lookback: Duration,
    /// Whether the listing is of one webhook (`hook`, GitHub's) rather than
    /// of the account (Stripe's).
    pub needs_hook: bool,
    pub list: List,
    pub recover: Recover,
}

/// How the API lists what it sent.
#[derive(Debug)]
pub struct List {
    /// Under `api_base`; `{hook}` is the route's `hook`.
    pub path: &'static str,
    /// Always sent: the page size.
    pub query: &'static str,
    /// Query parameters bounding the items' times (Unix seconds), when the
    /// API filters by time; otherwise pages are read until one is older
    /// than the window (the API lists newest first).
    pub since_param: Option<&'static str>,
    pub until_param: Option<&'static str>,
    /// JSON pointer to the page's items (`""`: the page is the array).
    pub items: &'static str,
    pub paging: Paging,
    /// JSON pointer to an item's time.
    pub at: Time,
    /// JSON pointer to an item's own id (what a page continues after, and
    /// what a redelivery is asked for).
    pub id: &'static str,
    /// JSON pointer to the idempotency key the item arrives under.
    pub key: &'static str,
    /// JSON pointer to the HTTP status the sender got when it delivered the
    /// item, where the API tells it: a 2xx needs nothing.
    pub status: Option<&'static str>,
    /// JSON pointer to the item's type (Stripe's `type`), matched against
    /// `types`.
    pub kind: Option<&'static str>,
}

/// How one page leads to the next.
#[derive(Debug)]
pub enum Paging {
    /// `has_more` in the page, and the next page asked with
    /// `{param}={last item's id}` (Stripe).
    After {
        has_more: &'static str,
        param: &'static str,
    },
    /// RFC 8288 `Link: <…>; rel="next"` (GitHub).
    Link,
}

/// How an item keeps its time.
#[derive(Debug)]
pub enum Time {
    UnixSeconds(&'static str),
    Rfc3339(&'static str),
}

/// What becomes of an item the gateway never completed.
#[derive(Debug)]
pub enum Recover {
    /// The item is the event: delivered here, through the claim and the
    /// attempt a sender's delivery takes, signed with the route's first
    /// secret as its scheme describes (Stripe's `/v1/events`).
    Deliver,
    /// The sender is asked to deliver it again (`POST` to this path under
    /// `api_base`; `{hook}` and `{id}` filled in): it arrives through the
    /// sender's entrance, signed by the sender (GitHub).
    AskAgain { path: &'static str },
}

pub static STRIPE: SenderApi = SenderApi {
    name: "stripe",
    scheme: "stripe",
    api_base: "https://api.stripe.com",
    retention: Duration::from_secs(30 * DAY),
    // Stripe retries for 3 days: an event older than that is no longer
    // retried, and one within it is found either way.
    default_lookback: Duration::from_secs(3 * DAY),
    needs_hook: false,
    list: List {
        path: "/v1/events",
        query: "limit=100",
        since_param: Some("created[gte]"),
        until_param: Some("created[lte]"),
        items: "/data",
        paging: Paging::After {
            has_more: "/has_more",
            param: "starting_after",
        },
        at: Time::UnixSeconds("/created"),
        id: "/id",
        key: "/id",
        status: None,
        kind: Some("/type"),
    },
    recover: Recover::Deliver,
};

pub static GITHUB: SenderApi = SenderApi {
    name: "github",
    scheme: "github",
    api_base: "https://api.github.com",
    // GitHub redelivers deliveries of the past 3 days.
    retention: Duration::from_secs(3 * DAY),
    default_lookback: Duration::from_secs(3 * DAY),
    needs_hook: true,
    list: List {
        path: "/{hook}/deliveries",
        query: "per_page=100",
        since_param: None,
        until_param: None,
        items: "",
        paging: Paging::Link,
        at: Time::Rfc3339("/delivered_at"),
        id: "/id",
        key: "/guid",
        status: Some("/status_code"),
        kind: None,
    },
    recover: Recover::AskAgain {
        path: "/{hook}/deliveries/{id}/attempts",
    },
};

/// Every sender reconciliation knows.
pub static SENDERS: &[&SenderApi] = &[&STRIPE, &GITHUB];

impl SenderApi {
    pub fn named(name: &str) -> Option<&'static SenderApi> {
        SENDERS.iter().copied().find(|sender| sender.name == name)
    }
}

/// Whether Stripe-style `pattern` (`"charge.succeeded"`, `"charge.*"`,
/// `"*"`) takes event type `kind`.
pub fn type_matches(pattern: &str, kind: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => kind.starts_with(prefix),
        None => pattern == kind,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_match_as_stripe_enabled_events_do() {
        assert!(type_matches("*", "charge.succeeded"));
        assert!(type_matches("charge.*", "charge.succeeded"));
        assert!(!type_matches("charge.*", "customer.created"));
        assert!(type_matches("charge.succeeded", "charge.succeeded"));
        assert!(!type_matches("charge.succeeded", "charge.succeeded.x"));
    }

    #[test]
    fn senders_are_found_by_name() {
        assert_eq!(SenderApi::named("stripe").map(|s| s.scheme), Some("stripe"));
        assert_eq!(SenderApi::named("github").map(|s| s.needs_hook), Some(true));
        assert!(SenderApi::named("shopify").is_none());
    }
}
