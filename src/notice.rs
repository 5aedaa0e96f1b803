//! A notice — one thing the on-call engineer should hear of — and
//! [`Notices`], the handle every part that sees one says it through.

use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use crate::config::{NoticeKind, RouteConfig};
use crate::order::OnBlocked;
use crate::store::{PastAttempt, StoredRequest};

/// Notices waiting to be grouped, at most; past it new ones are dropped
/// (and logged), never waited for.
const BACKLOG: usize = 4096;

/// One thing the on-call engineer should hear of.
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    pub kind: NoticeKind,
    /// The route (a destination's route) it concerns.
    pub route: String,
    /// The destination, `""` for a route with one upstream.
    pub destination: String,
    pub key: Option<String>,
    pub entity: Option<String>,
    pub attempts: Option<u32>,
    /// What the upstream last said, or why it was not called.
    pub error: Option<String>,
    /// One line that says what happened.
    pub summary: String,
    /// When (Unix ms).
    pub at_ms: u64,
    /// Names the fact: the same fact seen twice has the same id.
    pub id: String,
    /// Whether every gateway of a fleet may see it (then the first to
    /// claim its mark in the store says it).
    pub fleet_wide: bool,
}

impl Notice {
    /// An event of `delivery` (a route, or `route/destination`) parked as
    /// a dead letter after `attempts`.
    pub fn dead_letter(
        delivery: &str,
        key: &str,
        attempts: u32,
        error: String,
        entity: Option<String>,
        at_ms: u64,
    ) -> Notice {
        let summary = format!("parked as a dead letter after {attempts} attempt(s)");
        let id = format!("dead_letter:{delivery}:{key}:{attempts}");
        Notice {
            key: Some(key.to_owned()),
            entity,
            attempts: Some(attempts),
            error: Some(error),
            ..Notice::about(NoticeKind::DeadLetter, delivery, summary, at_ms, id)
        }
    }

    /// The entity of an ordered route's dead event, held behind it.
    pub fn entity_blocked(dead: &Notice) -> Notice {
        Notice {
            kind: NoticeKind::EntityBlocked,
            summary: format!(
                "entity {} waits behind its dead event",
                dead.entity.as_deref().unwrap_or_default()
            ),
            id: dead.id.replacen("dead_letter", "entity_blocked", 1),
            ..dead.clone()
        }
    }

    /// A reconciliation pass of `route` found `missing` events the gateway
    /// never completed.
    pub fn reconcile_missing(route: &str, missing: u64, delivered: u64, at_ms: u64) -> Notice {
        let summary = format!(
            "reconciliation found {missing} event(s) the sender sent and the gateway never completed; {delivered} recovered"
        );
        let id = format!("reconcile_missing:{route}:{at_ms}");
        Notice::about(NoticeKind::ReconcileMissing, route, summary, at_ms, id)
    }

    /// A notice about `delivery` (a route, or `route/destination`) as a
    /// whole, no event's.
    pub fn about(
        kind: NoticeKind,
        delivery: &str,
        summary: String,
        at_ms: u64,
        id: String,
    ) -> Notice {
        let (route, destination) = crate::metrics::delivery_labels(delivery);
        Notice {
            kind,
            route: route.to_owned(),
            destination: destination.to_owned(),
            key: None,
            entity: None,
            attempts: None,
            error: None,
            summary,
            at_ms,
            id,
            fleet_wide: false,
        }
    }
}

/// Where notices are said: a handle every part that sees one holds.
#[derive(Clone)]
pub struct Notices {
    sender: mpsc::Sender<Notice>,
    receiver: Arc<Mutex<Option<mpsc::Receiver<Notice>>>>,
}

impl Default for Notices {
    fn default() -> Self {
        let (sender, receiver) = mpsc::channel(BACKLOG);
        Notices {
            sender,
            receiver: Arc::new(Mutex::new(Some(receiver))),
        }
    }
}

impl Notices {
    /// Say `notice`, never waiting: notices are not on a sender's path.
    pub fn say(&self, notice: Notice) {
        if let Err(error) = self.sender.try_send(notice) {
            tracing::warn!(%error, "notification dropped: {BACKLOG} notices already wait");
        }
    }

    pub(crate) fn take(&self) -> Option<mpsc::Receiver<Notice>> {
        self.receiver
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
    }
    /// `route`'s event `key` was parked as a dead letter after `attempts`,
    /// the last of which is `last`; on an ordered route that holds its
    /// entity (`on_blocked = "wait"`), that is said too.
    pub fn dead_letter(
        &self,
        route: &RouteConfig,
        key: &str,
        attempts: u32,
        last: &PastAttempt,
        request: &StoredRequest,
    ) {
        let order = route.order();
        let entity = order.and_then(|order| order.place(&request.headers, &request.body, ""));
        let notice = Notice::dead_letter(
            &route.name,
            key,
            attempts,
            what_was_said(last),
            entity.map(|place| place.entity),
            last.at,
        );
        if order.is_some_and(|order| order.on_blocked == OnBlocked::Wait) && notice.entity.is_some()
        {
            self.say(Notice::entity_blocked(&notice));
        }
        self.say(notice);
    }
}

/// What `attempt` met, in a line: the upstream's status and the start of
/// its answer, or the error when it never answered.
pub fn what_was_said(attempt: &PastAttempt) -> String {
    let class = attempt.class.as_str();
    match (attempt.status, &attempt.error, &attempt.body) {
        (Some(status), _, Some(body)) if !body.is_empty() => format!("{status} ({class}): {body}"),
        (Some(status), _, _) => format!("{status} ({class})"),
        (None, Some(error), _) => format!("{class}: {error}"),
        (None, None, _) => class.to_owned(),
    }
}
