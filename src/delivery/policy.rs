//! What comes after an attempt: a pure function of the route's rules, the
//! entrance, the attempt number, how the call ended, the event's age and a
//! random number — no clock and no RNG inside, so a table test pins it.
//!
//! One failed attempt has two possible futures, and which one applies is
//! the record's, not the route's (docs/operations/fleets.md, "The record's life"):
//! a **sync** record is retried by its sender (failed, or dead after
//! `max_attempts`), an **accepted** record by its queue (due again after a
//! backoff, or dead after `max_attempts` or `max_age`). [`next`] gives both;
//! the store applies the one that fits the record in the same write that
//! ends the claim, so a reload or an acceptance that changes the record's
//! duty during the call cannot strand it.

use std::time::Duration;

use http::StatusCode;

use crate::config::{AsyncDelivery, OnUnknown, RouteConfig};
use crate::store::FailureClass;
pub use crate::store::{Next, SyncNext};
use crate::upstream::{UpstreamError, UpstreamResponse};

/// 2xx and 4xx (but 408 and 429) are the upstream's final word. Everything
/// else — 5xx, 408, 429, and 3xx, which a webhook sender treats as a failed
/// delivery — lets a retry through.
pub fn is_final(status: StatusCode) -> bool {
    status.is_success()
        || (status.is_client_error()
            && status != StatusCode::REQUEST_TIMEOUT
            && status != StatusCode::TOO_MANY_REQUESTS)
}

/// How a call ended, by what the upstream is known to have done: `None`
/// for a final answer, else why it did not finish.
pub fn class_of(result: &Result<UpstreamResponse, UpstreamError>) -> Option<FailureClass> {
    match result {
        Ok(answer) if is_final(answer.status) => None,
        Ok(_) => Some(FailureClass::Refused),
        Err(error) => Some(error.class()),
    }
}

/// Who made the attempt, as far as the rules care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entrance {
    /// A sender's own delivery, the hybrid's call, or a worker's lease.
    Delivery,
    /// An operator's redelivery or replay. An operator's action never uses
    /// up a sender's retries: a failed record stays failed, a dead letter
    /// is dead again.
    Operator { was_dead: bool },
}

/// The rules of one route that [`next`] reads.
#[derive(Debug, Clone, Copy)]
pub struct Rules<'a> {
    pub max_attempts: u32,
    pub on_unknown: OnUnknown,
    pub processing_ttl: Duration,
    /// The queue's backoff and `max_age`: the route's own when it is async,
    /// the defaults otherwise (a sync route can hold accepted records after
    /// a reload, or share a scope with an async one).
    pub queue: &'a AsyncDelivery,
}

impl<'a> Rules<'a> {
    pub fn of(route: &'a RouteConfig) -> Self {
        Self {
            max_attempts: route.failures.max_attempts,
            on_unknown: route.claim.on_unknown,
            processing_ttl: route.claim.processing_ttl,
            queue: route.delivery.queue(),
        }
    }
}

/// What follows failed attempt number `attempt` (1 for the first) of an
/// event first seen at `first_seen_ms`, at `now_ms`; `random` draws the
/// backoff's jitter.
pub fn next(
    rules: &Rules<'_>,
    entrance: Entrance,
    attempt: u32,
    class: FailureClass,
    first_seen_ms: u64,
    now_ms: u64,
    random: u64,
) -> Next {
    let attempts_spent = rules.max_attempts > 0 && attempt >= rules.max_attempts;
    let sync = match entrance {
        Entrance::Operator { was_dead: true } => SyncNext::Dead,
        Entrance::Delivery if attempts_spent => SyncNext::Dead,
        _ => SyncNext::Failed {
            hold: class == FailureClass::Unknown && rules.on_unknown == OnUnknown::Hold,
        },
    };
    let too_old = past_max_age(rules.queue, first_seen_ms, now_ms);
    let queued = match entrance {
        Entrance::Operator { was_dead: true } => None,
        _ if attempts_spent || too_old => None,
        _ => {
            let wait = backoff(rules.queue, attempt, random);
            // An unknown outcome waits out the lease at least: the upstream
            // may still be working on the first call.
            Some(match class {
                FailureClass::Unknown => wait.max(rules.processing_ttl),
                _ => wait,
            })
        }
    };
    Next { sync, queued }
}

/// Why a leased event must not be attempted again, if it must not: its
/// earlier attempts all ended without a settlement (their gateways died
/// mid-call), so this lease is past `max_attempts`; or it has waited past
/// `max_age` (workers were down, say).
pub fn spent(
    rules: &Rules<'_>,
    attempt: u32,
    first_seen_ms: u64,
    now_ms: u64,
) -> Option<&'static str> {
    if rules.max_attempts > 0 && attempt > rules.max_attempts {
        Some("leased more often than max_attempts")
    } else if past_max_age(rules.queue, first_seen_ms, now_ms) {
        Some("older than max_age")
    } else {
        None
    }
}

/// Whether an event accepted at `first_seen_ms` has waited `max_age`.
fn past_max_age(queue: &AsyncDelivery, first_seen_ms: u64, now_ms: u64) -> bool {
    Duration::from_millis(now_ms.saturating_sub(first_seen_ms)) >= queue.max_age
}

/// The wait before attempt `attempt + 1`: exponential from
/// `backoff_initial`, capped at `backoff_max`, with full jitter (`random`
/// picks a wait below the ceiling, so a burst of failures does not retry in
/// step).
pub fn backoff(queue: &AsyncDelivery, attempt: u32, random: u64) -> Duration {
    let doublings = attempt.saturating_sub(1).min(30);
    let ceiling = queue
        .backoff_initial
        .saturating_mul(1 << doublings)
        .min(queue.backoff_max);
    let millis = ceiling.as_millis().max(1) as u64;
    Duration::from_millis(random % millis + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn queue() -> AsyncDelivery {
        AsyncDelivery {
            backoff_initial: S,
            backoff_max: 10 * S,
            max_age: 3600 * S,
            ..AsyncDelivery::default()
        }
    }

    fn rules(queue: &AsyncDelivery, max_attempts: u32, on_unknown: OnUnknown) -> Rules<'_> {
        Rules {
            max_attempts,
            on_unknown,
            processing_ttl: 30 * S,
            queue,
        }
    }

    #[test]
    fn final_statuses_follow_the_contract() {
        for code in [200, 201, 204, 400, 401, 404, 409, 410, 422] {
            assert!(is_final(StatusCode::from_u16(code).unwrap()), "{code}");
        }
        for code in [301, 302, 408, 429, 500, 502, 503, 504] {
            assert!(!is_final(StatusCode::from_u16(code).unwrap()), "{code}");
        }
    }

    /// Every row: rules, entrance, attempt, class, age → both futures.
    /// `random` is fixed at 0, so a queued wait is 1 ms unless the lease
    /// is longer (an unknown outcome).
    #[test]
    fn what_comes_next_table() {
        use FailureClass::{NotDelivered, Refused, Unknown};
        use OnUnknown::{Hold, Release};
        let q = queue();
        let op = |was_dead| Entrance::Operator { was_dead };
        let d = Entrance::Delivery;
        let ms = Duration::from_millis;
        let failed = |hold| SyncNext::Failed { hold };
        /// max_attempts, on_unknown, entrance, attempt, class, age (s) →
        /// sync, queued.
        type Row = (
            u32,
            OnUnknown,
            Entrance,
            u32,
            FailureClass,
            u64,
            SyncNext,
            Option<Duration>,
        );
        #[rustfmt::skip]
        let table: &[Row] = &[
            // unlimited attempts: always failed / queued again
            (0, Hold,    d,         1,  Refused,      0,    failed(false), Some(ms(1))),
            (0, Hold,    d,         99, NotDelivered, 0,    failed(false), Some(ms(1))),
            // an unknown outcome holds (per on_unknown) and waits the lease out
            (0, Hold,    d,         1,  Unknown,      0,    failed(true),  Some(30 * S)),
            (0, Release, d,         1,  Unknown,      0,    failed(false), Some(30 * S)),
            // max_attempts: dead at the last attempt, on both futures
            (3, Hold,    d,         2,  Refused,      0,    failed(false), Some(ms(1))),
            (3, Hold,    d,         3,  Refused,      0,    SyncNext::Dead, None),
            (3, Hold,    d,         4,  Refused,      0,    SyncNext::Dead, None),
            // max_age ends the queue's retries only
            (0, Hold,    d,         1,  Refused,      3600, failed(false), None),
            (0, Hold,    d,         1,  Refused,      3599, failed(false), Some(ms(1))),
            // an operator never spends a sender's attempts...
            (3, Hold,    op(false), 3,  Refused,      0,    failed(false), None),
            (3, Hold,    op(false), 1,  Refused,      0,    failed(false), Some(ms(1))),
            (0, Hold,    op(false), 1,  Unknown,      0,    failed(true),  Some(30 * S)),
            // ...and a dead letter that fails again is dead again
            (0, Hold,    op(true),  1,  Refused,      0,    SyncNext::Dead, None),
        ];
        for &(max, on_unknown, entrance, attempt, class, age_s, sync, queued) in table {
            let rules = rules(&q, max, on_unknown);
            let got = next(&rules, entrance, attempt, class, 0, age_s * 1000, 0);
            assert_eq!(
                got,
                Next { sync, queued },
                "max_attempts {max}, {on_unknown:?}, {entrance:?}, attempt {attempt}, {class:?}, age {age_s}s"
            );
        }
    }

    #[test]
    fn a_lease_past_max_attempts_or_max_age_is_spent() {
        let q = queue();
        let rules = rules(&q, 3, OnUnknown::Hold);
        assert_eq!(spent(&rules, 3, 0, 0), None);
        assert!(spent(&rules, 4, 0, 0).is_some());
        assert!(spent(&rules, 1, 0, 3_600_000).is_some());
        let unlimited = Rules {
            max_attempts: 0,
            ..rules
        };
        assert_eq!(spent(&unlimited, 1000, 0, 0), None);
    }

    #[test]
    fn backoff_doubles_up_to_its_cap_with_full_jitter() {
        let q = queue();
        for (attempt, ceiling) in [
            (1, 1_000),
            (2, 2_000),
            (3, 4_000),
            (4, 8_000),
            (5, 10_000),
            (40, 10_000),
        ] {
            assert_eq!(backoff(&q, attempt, 0), Duration::from_millis(1));
            assert_eq!(
                backoff(&q, attempt, ceiling - 1),
                Duration::from_millis(ceiling),
                "the ceiling of attempt {attempt}"
            );
            assert_eq!(
                backoff(&q, attempt, ceiling),
                Duration::from_millis(1),
                "wraps"
            );
        }
    }
}
