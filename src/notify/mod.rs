//! Notifications (docs/guide/notifications.md, "Notifications"): the on-call engineer hears of
//! the event itself — which route, key and entity, what the upstream said,
//! after how many attempts, and a link that opens it in the console — on
//! the `[[notify]]` targets configured for it.
//!
//! What happens, and where it is heard:
//! - an event parked as a dead letter (and, on an ordered route, its
//!   entity held behind it): said by the attempt that parked it
//!   (`delivery/`), once, since that attempt held the event's fenced claim;
//! - a reconciliation pass that found missing events: said by the pass,
//!   which runs on one gateway of a fleet at a time;
//! - a circuit breaker that opened: looked for here every second, each
//!   gateway's breaker its own;
//! - an async queue past 80% of a bound: looked for here, from the
//!   measurements every gateway takes; the first gateway to claim the
//!   notice's mark in the store (one an hour per route) says it.
//!
//! A notice is handed over with `try_send` and never waited for, so none
//! is on a sender's path. The notices a target takes within its
//! `group_within` of the first are one message, whose key is the digest of
//! their ids: that message is accepted into the target's own delivery
//! (`@notify/NAME`, an async route's queue) and the workers deliver it —
//! retried with backoff for a day, `rate` messages at most, each once.
//! A gateway killed while it groups loses the notices it held (at most
//! `group_within` of them); a notice is never sent twice.

mod render;

pub use crate::notice::Notice;

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, Method, StatusCode};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use crate::config::{NoticeKind, NotifyTarget, NOTIFY};
use crate::delivery::Parts;
use crate::headers::lower_hex;
use crate::replay::{BodyKept, RecordedResponse};
use crate::store::{ClaimMode, ClaimOutcome, ClaimRequest, StoreError, StoredRequest};

/// The most notices one message carries; more wait for the next.
const MOST_PER_MESSAGE: usize = 20;
/// How often breakers and queues are looked at, and groups flushed.
const LOOK_EVERY: Duration = Duration::from_secs(1);
/// How long a fleet-wide notice's mark holds: the same notice is said at
/// most once in this long.
const MARK_FOR: Duration = Duration::from_secs(3600);
/// A queue is near its bound at this share of it, and no longer below
/// the second.
const NEAR: f64 = 0.8;
const CLEAR: f64 = 0.7;

/// The notices a target holds until its group is due.
struct Group {
    since: Instant,
    notices: Vec<Notice>,
}

/// Group, mark and hand each target its messages, and look at breakers
/// and queues, until `stop` resolves (then what is grouped is sent).
pub async fn run(parts: Parts, stop: impl Future<Output = ()>) {
    let Some(mut received) = parts.notices.take() else {
        return;
    };
    tokio::pin!(stop);
    let mut groups: HashMap<String, Group> = HashMap::new();
    let mut watch = Watch::default();
    let mut look = tokio::time::interval(LOOK_EVERY);
    loop {
        tokio::select! {
            () = &mut stop => {
                flush(&parts, &mut groups, true).await;
                return;
            }
            Some(notice) = received.recv() => group(&parts, &mut groups, notice),
            _ = look.tick() => {
                for notice in watch.look(&parts) {
                    group(&parts, &mut groups, notice);
                }
                flush(&parts, &mut groups, false).await;
            }
        }
    }
}

/// Add `notice` to the group of every target that takes it.
fn group(parts: &Parts, groups: &mut HashMap<String, Group>, notice: Notice) {
    if notice.route == NOTIFY {
        return; // a notification's own trouble is in its route's metrics
    }
    for target in &parts.routes.load().notify {
        if target.wants(notice.kind, &notice.route) {
            let group = groups.entry(target.name.clone()).or_insert_with(|| Group {
                since: Instant::now(),
                notices: Vec::new(),
            });
            group.notices.push(notice.clone());
        }
    }
}

/// Send every group that is due (all of them when `all`); a group the
/// store refused waits for the next look.
async fn flush(parts: &Parts, groups: &mut HashMap<String, Group>, all: bool) {
    let runtime = parts.routes.load();
    for target in &runtime.notify {
        let Some(group) = groups.get_mut(&target.name) else {
            continue;
        };
        let due = all
            || group.since.elapsed() >= target.group_within
            || group.notices.len() >= MOST_PER_MESSAGE;
        if !due {
            continue;
        }
        let take = group.notices.len().min(MOST_PER_MESSAGE);
        let mut notices: Vec<Notice> = group.notices.drain(..take).collect();
        if let Err(error) = send(parts, target, &mut notices).await {
            tracing::warn!(target = %target.name, %error, "could not queue a notification; trying again");
            group.notices.splice(0..0, notices);
        }
        if group.notices.is_empty() {
            groups.remove(&target.name);
        } else if let Some(group) = groups.get_mut(&target.name) {
            group.since = Instant::now();
        }
    }
    // Targets a reload removed.
    groups.retain(|name, _| runtime.notify.iter().any(|target| &target.name == name));
}

/// Mark the fleet-wide notices, and accept one message of those this
/// gateway says into the target's queue. On an error `said` keeps what is
/// still this gateway's to say: a notice whose mark it took is its own
/// from then on, so a retry does not meet its own mark and drop it.
async fn send(
    parts: &Parts,
    target: &NotifyTarget,
    said: &mut Vec<Notice>,
) -> Result<(), StoreError> {
    let mut i = 0;
    while i < said.len() {
        if !said[i].fleet_wide {
            i += 1;
        } else if marked(parts, target, &said[i]).await? {
            said[i].fleet_wide = false;
            i += 1;
        } else {
            said.remove(i); // another gateway said it
        }
    }
    if said.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = said.iter().map(|notice| notice.id.as_str()).collect();
    let key = format!("ntf_{}", &lower_hex(&Sha256::digest(ids.join("\n")))[..32]);
    let body = render::message(target, said, &key);
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let request = StoredRequest {
        method: Method::POST,
        query: None,
        headers,
        body: Bytes::from(body),
    };
    let delivery = &target.delivery;
    let store_key = parts.store.key(&delivery.keying.scope, &key);
    let body_sha256 = lower_hex(&Sha256::digest(&request.body));
    let accept = delivery.claim_acceptance(&store_key, &body_sha256, &request, ClaimMode::Accept);
    parts.store.records().claim(accept).await?;
    parts.places.wake();
    tracing::info!(target = %target.name, key, notices = said.len(), "notification queued");
    Ok(())
}

/// Whether this gateway is the one to say `notice`: it claimed the
/// notice's mark first, and completed it, so it stands for [`MARK_FOR`].
async fn marked(parts: &Parts, target: &NotifyTarget, notice: &Notice) -> Result<bool, StoreError> {
    let mark = format!("mark_{}", &lower_hex(&Sha256::digest(&notice.id))[..32]);
    let key = parts.store.key(&target.delivery.keying.scope, &mark);
    let claim = ClaimRequest::delivery(&key, "mark", MARK_FOR, MARK_FOR);
    let ClaimOutcome::New(lease) = parts.store.records().claim(claim).await? else {
        return Ok(false);
    };
    let said = RecordedResponse {
        status: StatusCode::OK,
        headers: HeaderMap::new(),
        body: Bytes::from(notice.id.clone()),
        body_kept: BodyKept::Whole,
    };
    parts
        .store
        .records()
        .complete(&key, &lease, &said, MARK_FOR)
        .await?;
    Ok(true)
}

/// What was last seen of each breaker and queue, so a notice is said when
/// one opens or fills, not while it stays so.
#[derive(Default)]
struct Watch {
    open: HashMap<String, bool>,
    near: HashMap<String, bool>,
}

impl Watch {
    fn look(&mut self, parts: &Parts) -> Vec<Notice> {
        let mut notices = Vec::new();
        let now_ms = parts.clock.now_ms();
        let runtime = parts.routes.load();
        let store_held = (parts.queues.total_bytes(), runtime.max_queued_bytes);
        for route in runtime.routes.all() {
            let open = route.controls.breaker_state() == Some("open");
            if open && !self.open.get(&route.name).copied().unwrap_or(false) {
                notices.push(breaker_open(&route.name, now_ms));
            }
            self.open.insert(route.name.clone(), open);
            if !route.delivery.is_async() {
                continue;
            }
            let queue = route.delivery.queue();
            let held = parts.queues.of(&route.keying.scope);
            let share = [
                (held.events, queue.max_queued),
                (held.bytes, queue.max_queued_bytes),
                store_held,
            ]
            .iter()
            .filter(|(_, bound)| *bound > 0)
            .map(|(held, bound)| *held as f64 / *bound as f64)
            .fold(0.0, f64::max);
            let was = self.near.get(&route.name).copied().unwrap_or(false);
            let near = share >= NEAR || (was && share >= CLEAR);
            if near && !was {
                notices.push(queue_near_bound(&route.name, share, held.events, now_ms));
            }
            self.near.insert(route.name.clone(), near);
        }
        notices
    }
}

fn breaker_open(delivery: &str, at_ms: u64) -> Notice {
    let summary = "circuit breaker opened on this gateway: upstream calls are held".to_owned();
    let id = format!("breaker_open:{delivery}:{at_ms}:{}", std::process::id());
    Notice::about(NoticeKind::BreakerOpen, delivery, summary, at_ms, id)
}

fn queue_near_bound(delivery: &str, share: f64, events: u64, at_ms: u64) -> Notice {
    let summary = format!(
        "queue at {:.0}% of its bound ({events} event(s) queued): past it new events are refused 503 queue_full",
        share * 100.0
    );
    // The same id every time: its mark, while it stands, says it was said.
    let id = format!("queue_near_bound:{delivery}");
    Notice {
        fleet_wide: true,
        ..Notice::about(NoticeKind::QueueNearBound, delivery, summary, at_ms, id)
    }
}
