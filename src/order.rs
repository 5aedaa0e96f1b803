//! Ordered delivery per entity (docs/guide/ordering.md, "Ordered delivery"): what an async
//! route's `order_by`, `stale_by`, `reorder_window` and `on_blocked` make
//! of one accepted event — its entity and its place among the entity's
//! events — before the store keeps it.
//!
//! The order itself lives in the store, beside the queue (`Queue::lease_ordered`):
//! of one entity's pending events only the first in order is ever leased,
//! and only while no other event of the entity is in flight; so every
//! instance of a fleet, a restart and a SIGKILL keep it. This module only
//! reads the delivery.

use std::time::Duration;

use http::HeaderMap;
use serde_json::Value;

use crate::key::{self, KeySource};

/// The most blocked entities counted per route (`hookgate_blocked_entities`,
/// the admin API's route list): past it they read "at least"; the admin
/// API's `/blocked` pages list them.
pub const BLOCKED_COUNTED: usize = 1_000;

/// What a dead event does to its entity's later events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnBlocked {
    /// They wait until an operator redelivers or forgets the dead one.
    Wait,
    /// They go on; the dead one stays a dead letter.
    Skip,
}

impl OnBlocked {
    /// As configured (`on_blocked`), and as the admin API shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            OnBlocked::Wait => "wait",
            OnBlocked::Skip => "skip",
        }
    }
}

/// A route's ordering, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct OrderSettings {
    /// The ordering key: one entity's events are delivered one at a time.
    pub by: KeySource,
    /// The event's own time or version: an event older than the newest one
    /// already delivered for its entity is not delivered (`stale`).
    pub stale_by: Option<KeySource>,
    /// How long each event waits after its acceptance before it may be
    /// leased, so that an older sibling arriving late goes first.
    pub reorder_window: Duration,
    pub on_blocked: OnBlocked,
}

/// Where one event stands in its entity's order.
#[derive(Debug, Clone, PartialEq)]
pub struct Place {
    /// The ordering key, as keys are kept: as sent when it is 1–255 bytes
    /// of visible ASCII, else `sha256:<hex>` of it.
    pub entity: String,
    /// Its `stale_by` value (a number, or an RFC 3339 time in Unix
    /// seconds); `None` when the route has none or the event lacks it.
    pub value: Option<f64>,
}

/// How a store orders a scope's leases (the rules of its route).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// A dead event no longer holds its entity (`on_blocked = "skip"`).
    pub skip_dead: bool,
}

impl OrderSettings {
    /// The event's place, or `None` when it carries no ordering key (it is
    /// delivered unordered).
    pub fn place(&self, headers: &HeaderMap, body: &[u8], body_sha256: &str) -> Option<Place> {
        let entity = key::extract(
            std::slice::from_ref(&self.by),
            headers,
            body,
            body_sha256,
            |_| true,
        )
        .ok()?;
        let value = self
            .stale_by
            .as_ref()
            .and_then(|source| stale_value(source, headers, body, body_sha256));
        Some(Place { entity, value })
    }

    pub fn rules(&self) -> Rules {
        Rules {
            skip_dead: self.on_blocked == OnBlocked::Skip,
        }
    }
}

/// A `stale_by` value: a JSON number (integer or not), or text holding a
/// number or an RFC 3339 time (as Unix seconds, so that a time compares
/// with Stripe's `created`). Anything else is no value: such an event is
/// never stale.
fn stale_value(
    source: &KeySource,
    headers: &HeaderMap,
    body: &[u8],
    body_sha256: &str,
) -> Option<f64> {
    if let KeySource::JsonPointer(pointer) = source {
        let document: Value = serde_json::from_slice(body).ok()?;
        return match document.pointer(pointer)? {
            Value::Number(number) => number.as_f64().filter(|v| v.is_finite()),
            Value::String(text) => parse_value(text),
            _ => None,
        };
    }
    let raw = key::value_of(source, headers, body, body_sha256)?;
    parse_value(std::str::from_utf8(&raw).ok()?)
}

/// A number, or an RFC 3339 time as Unix seconds.
pub fn parse_value(text: &str) -> Option<f64> {
    let text = text.trim();
    if let Ok(number) = text.parse::<f64>() {
        return number.is_finite().then_some(number);
    }
    crate::clock::rfc3339_ms(text)
        .ok()
        .map(|ms| ms as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(stale_by: Option<&str>) -> OrderSettings {
        OrderSettings {
            by: KeySource::parse("json:/data/object/id").unwrap(),
            stale_by: stale_by.map(|source| KeySource::parse(source).unwrap()),
            reorder_window: Duration::ZERO,
            on_blocked: OnBlocked::Wait,
        }
    }

    fn place(settings: &OrderSettings, body: &str) -> Option<Place> {
        settings.place(&HeaderMap::new(), body.as_bytes(), "00")
    }

    #[test]
    fn the_entity_is_the_ordering_key_and_an_event_without_one_is_unordered() {
        let by_id = settings(None);
        let body = r#"{"data":{"object":{"id":"sub_1"}}}"#;
        assert_eq!(
            place(&by_id, body),
            Some(Place {
                entity: "sub_1".into(),
                value: None
            })
        );
        assert_eq!(place(&by_id, r#"{"data":{}}"#), None);
        assert_eq!(place(&by_id, "not json"), None);
        let odd = place(&by_id, r#"{"data":{"object":{"id":"a b"}}}"#).unwrap();
        assert!(odd.entity.starts_with(key::HASHED_PREFIX), "{odd:?}");
    }

    #[test]
    fn stale_values_are_numbers_or_rfc3339_times_in_seconds() {
        let by_created = settings(Some("json:/created"));
        let at = |created: &str| {
            let body = format!(r#"{{"created":{created},"data":{{"object":{{"id":"x"}}}}}}"#);
            place(&by_created, &body).unwrap().value
        };
        assert_eq!(at("1733140800"), Some(1_733_140_800.0));
        assert_eq!(at("2.5"), Some(2.5));
        assert_eq!(at("\"17\""), Some(17.0));
        assert_eq!(at("\"2024-12-02T12:00:00Z\""), Some(1_733_140_800.0));
        assert_eq!(
            at("\"2024-12-02T13:00:00.500+01:00\""),
            Some(1_733_140_800.5)
        );
        assert_eq!(at("\"yesterday\""), None);
        assert_eq!(at("true"), None);
        assert_eq!(at("null"), None);
    }
}
