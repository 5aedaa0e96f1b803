//! One pass over a route's window (docs/guide/reconciliation.md, "Reconciliation"): page through
//! what the sender's API lists, newest first, and for each event the
//! gateway never completed — absent, failed, or held by a lease that
//! lapsed — recover it as the sender's [`Recover`] says: deliver it here
//! through the sender's stages, or ask the sender (once per delivery, the
//! ask remembered in the store for the fleet) to send it again. An event
//! completed, queued, in flight or parked as a dead letter is left alone;
//! whatever races this pass (a sender's late retry, another gateway) meets
//! the same claim, so the event still reaches the upstream once.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{self, StreamExt};
use http::header::{CONTENT_TYPE, USER_AGENT};
use http::{HeaderMap, HeaderValue};
use serde_json::value::RawValue;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::api::{Api, ApiError};
use crate::config::ReconcileSettings;
use crate::error::GatewayError;
use crate::headers::{lower_hex, percent_encode as encode};
use crate::ingress::{Gateway, Outcome};
use crate::route::Route;
use crate::sender_apis::{type_matches, Paging, Recover, Time};
use crate::store::{ClaimOutcome, ClaimRequest, Clock, Record, RecordState, Store, StoreError};

/// How long an ask's mark is held while the ask is on its way.
const ASK_TTL: Duration = Duration::from_secs(60);
/// Keys a dry run lists at most.
const MAX_LISTED: usize = 1000;
/// What one chunk of missing events may hold before the newest wait for
/// the next walk of the window.
const MAX_HELD_BYTES: usize = 64 << 20;
const MAX_HELD_EVENTS: usize = 10_000;
/// Store reads of one page in flight at once.
const READS_AT_ONCE: usize = 16;

/// The span of the sender's times a pass covers (Unix seconds, both ends
/// included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub since: u64,
    pub until: u64,
}

/// What a pass found and did.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// Events listed in the window (of the route's `types`).
    pub seen: u64,
    /// Of those, not completed at the gateway.
    pub missing: u64,
    pub delivered: u64,
    pub asked: u64,
    /// Events whose recovery failed (each tried again next pass).
    pub errors: u64,
    pub last_error: Option<String>,
    /// A dry run's missing keys (at most [`MAX_LISTED`]).
    pub missing_keys: Vec<String>,
    /// The pass's cost: API calls and store reads.
    pub calls: u32,
    pub reads: u32,
}

impl Tally {
    fn failed(&mut self, key: &str, error: impl std::fmt::Display) {
        self.errors += 1;
        self.last_error = Some(format!("{key}: {error}"));
    }
}

/// One pass's inputs.
pub struct Pass<'a> {
    pub gateway: &'a Arc<Gateway>,
    pub store: &'a Store,
    pub route: &'a Arc<Route>,
    pub settings: &'a ReconcileSettings,
    pub window: Window,
    pub dry_run: bool,
    /// Where the asks are remembered (`reconcile::scope`).
    pub marks: &'a str,
    pub clock: &'a Clock,
}

/// A missing event a walk found: what its recovery needs.
struct Found {
    /// The sender's time of it (Unix seconds).
    at: u64,
    key: String,
    /// The item's own id (what a redelivery is asked for).
    id: Option<String>,
    /// Deliver: the event as the API lists it, and the headers it is sent
    /// with (its signature is made when it is sent).
    body: Bytes,
    headers: HeaderMap,
}

/// What one walk of the window leaves to recover, oldest last.
#[derive(Default)]
struct Walked {
    found: VecDeque<Found>,
    bytes: usize,
    /// The walk found more than one chunk holds: the newest were left for
    /// the next walk.
    deferred: bool,
}

impl Walked {
    /// Keep `found` (older than every event held: the API lists newest
    /// first), leaving the newest for the next walk past the bounds.
    fn hold(&mut self, found: Found, max_bytes: usize, max_events: usize) {
        self.bytes += found.body.len();
        self.found.push_back(found);
        while self.bytes > max_bytes || self.found.len() > max_events {
            let Some(newest) = self.found.pop_front() else {
                break;
            };
            self.bytes -= newest.body.len();
            self.deferred = true;
        }
    }
}

impl Pass<'_> {
    /// Walk the window, then recover what is missing oldest first (an
    /// ordered route's entities get their events in their order); a
    /// window with more missing than [`MAX_HELD_BYTES`] or
    /// [`MAX_HELD_EVENTS`] is walked again for the next (newer) chunk. An
    /// API that fails ends the pass (what was recovered stays recovered),
    /// an event that fails is counted, tried once a pass, and the pass goes
    /// on.
    pub async fn run(&self, api: &mut Api<'_>, tally: &mut Tally) -> Result<(), ApiError> {
        let mut tried = HashSet::new();
        let mut first = true;
        loop {
            let walked = self.walk(api, tally, &tried, first).await?;
            first = false;
            if self.dry_run {
                return Ok(());
            }
            // The API lists newest first, near enough: by the sender's time.
            let mut found = Vec::from(walked.found);
            found.sort_by_key(|found| found.at);
            for found in found {
                tried.insert(found.key.clone());
                self.recover(found, api, tally).await;
            }
            if !walked.deferred {
                return Ok(());
            }
        }
    }

    /// Page through the window, newest first, keeping the oldest missing
    /// events not `tried` yet; the first walk counts what it sees.
    async fn walk(
        &self,
        api: &mut Api<'_>,
        tally: &mut Tally,
        tried: &HashSet<String>,
        counting: bool,
    ) -> Result<Walked, ApiError> {
        let list = &self.settings.sender.list;
        let first = self.first_url();
        let mut url = first.clone();
        // Newest first: an event's first listing decides (GitHub lists
        // each redelivery beside the delivery it repeats).
        let mut decided = HashSet::new();
        let mut walked = Walked::default();
        loop {
            let answer = api.get(&url).await?;
            let (items, page) = read_page(&answer.body, list.items)?;
            let (mut last_id, mut older) = (None, false);
            let mut candidates = Vec::new();
            for raw in &items {
                let item: Value = serde_json::from_str(raw.get())
                    .map_err(|error| ApiError::Malformed(error.to_string()))?;
                last_id = text_at(&item, list.id);
                let at = time_of(&item, &list.at)?;
                if at < self.window.since {
                    older = true;
                    continue;
                }
                if at > self.window.until || !self.takes(&item) {
                    continue;
                }
                let Some(key) = text_at(&item, list.key) else {
                    return Err(ApiError::Malformed(format!("an item without {}", list.key)));
                };
                if !decided.insert(key.clone()) {
                    continue;
                }
                tally.seen += u64::from(counting);
                let settled = (list.status.and_then(|at| item.pointer(at)))
                    .and_then(Value::as_u64)
                    .is_some_and(|status| (200..300).contains(&status));
                if settled {
                    continue;
                }
                if let Some(found) = self.found(raw, &item, at, key, tally) {
                    if !tried.contains(&found.key) {
                        candidates.push(found);
                    }
                }
            }
            // The page's records, read a few at a time (a remote store's
            // round trips are most of a pass), kept in the API's order.
            let read = stream::iter(candidates)
                .map(|found| async move {
                    let key = self.store.key(&self.route.keying.scope, &found.key);
                    let record = self.store.records().get(&key).await;
                    (found, record)
                })
                .buffered(READS_AT_ONCE)
                .collect::<Vec<_>>()
                .await;
            for (found, record) in read {
                if self.needed(&found.key, record, tally, counting) {
                    walked.hold(found, MAX_HELD_BYTES, MAX_HELD_EVENTS);
                }
            }
            let next = match &list.paging {
                Paging::After { has_more, param } => {
                    let more = page.pointer(has_more).and_then(Value::as_bool) == Some(true);
                    match (more, last_id) {
                        (true, Some(id)) => Some(format!("{first}&{param}={}", encode(&id))),
                        _ => None,
                    }
                }
                Paging::Link => next_link(&answer.headers),
            };
            // Without a time filter, the first page older than the window
            // is the last one read.
            let past = older && list.since_param.is_none();
            match next {
                Some(next) if !past && !items.is_empty() => url = next,
                _ => return Ok(walked),
            }
        }
    }

    fn first_url(&self) -> String {
        let settings = self.settings;
        let list = &settings.sender.list;
        let path = list
            .path
            .replace("{hook}", settings.hook.as_deref().unwrap_or_default());
        let mut url = format!("{}{path}?{}", settings.api_base, list.query);
        if let Some(param) = list.since_param {
            url.push_str(&format!("&{}={}", encode(param), self.window.since));
        }
        if let Some(param) = list.until_param {
            url.push_str(&format!("&{}={}", encode(param), self.window.until));
        }
        url
    }

    /// Whether the item is of a type the route's `types` takes.
    fn takes(&self, item: &Value) -> bool {
        let types = &self.settings.types;
        let Some(at) = self.settings.sender.list.kind else {
            return true;
        };
        let kind = item.pointer(at).and_then(Value::as_str).unwrap_or_default();
        types.is_empty() || types.iter().any(|pattern| type_matches(pattern, kind))
    }

    /// What a listed item's recovery needs, and the key the gateway keeps
    /// it under: for an event delivered here, the key the route reads from
    /// it, as a sender's delivery of it would give it.
    fn found(
        &self,
        raw: &RawValue,
        item: &Value,
        at: u64,
        key: String,
        tally: &mut Tally,
    ) -> Option<Found> {
        let id = text_at(item, self.settings.sender.list.id);
        let Recover::Deliver = self.settings.sender.recover else {
            let (body, headers) = (Bytes::new(), HeaderMap::new());
            return Some(Found {
                at,
                key,
                id,
                body,
                headers,
            });
        };
        let body = Bytes::copy_from_slice(raw.get().as_bytes());
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(USER_AGENT, HeaderValue::from_static("hookgate-reconcile"));
        let sha = lower_hex(&Sha256::digest(&body));
        match crate::key::extract(&self.route.keying.key, &headers, &body, &sha, |_| true) {
            Ok(key) => Some(Found {
                at,
                key,
                id,
                body,
                headers,
            }),
            Err(error) => {
                tally.failed(&key, error);
                None
            }
        }
    }

    async fn recover(&self, found: Found, api: &mut Api<'_>, tally: &mut Tally) {
        let Found {
            key,
            id,
            body,
            mut headers,
            ..
        } = found;
        match self.settings.sender.recover {
            Recover::Deliver => {
                let Some(secret) = &self.settings.signing_secret else {
                    return tally.failed(&key, "the route has no secret to sign with");
                };
                let now = self.clock.now_ms() / 1000;
                let signed = match self.route.verify.scheme.sign(secret, now, &body) {
                    Ok(signed) => signed,
                    Err(why) => return tally.failed(&key, &why),
                };
                for (name, value) in signed {
                    match HeaderValue::from_str(&value) {
                        Ok(value) => headers.insert(name, value),
                        Err(_) => return tally.failed(&key, "the signature is no header value"),
                    };
                }
                let delivered = self.gateway.deliver_fetched(self.route, headers, body);
                self.count(&key, delivered.await, tally);
            }
            Recover::AskAgain { path } => match id {
                Some(id) => self.ask(path, &id, &key, api, tally).await,
                None => tally.failed(&key, "the delivery has no id"),
            },
        }
    }

    /// Whether the gateway never completed `key`, by its `record`: counted
    /// missing (and a dry run lists it).
    fn needed(
        &self,
        key: &str,
        record: Result<Option<Record>, StoreError>,
        tally: &mut Tally,
        counting: bool,
    ) -> bool {
        tally.reads += 1;
        let needed = match record {
            Ok(record) => needs(record.as_ref(), self.clock.now_ms()),
            Err(error) => {
                tally.failed(key, error);
                return false;
            }
        };
        if needed && counting {
            tally.missing += 1;
            if self.dry_run && tally.missing_keys.len() < MAX_LISTED {
                tally.missing_keys.push(key.to_owned());
            }
        }
        needed
    }

    fn count(&self, key: &str, delivered: Result<Outcome, GatewayError>, tally: &mut Tally) {
        match delivered {
            Ok(Outcome::Forwarded | Outcome::Accepted | Outcome::Filtered) => tally.delivered += 1,
            // Someone else's delivery got there first: the claim held.
            Ok(Outcome::Replayed | Outcome::DeadLetter) | Err(GatewayError::InFlight { .. }) => {}
            Ok(Outcome::UpstreamError) => tally.failed(
                key,
                "the upstream did not take it; the next pass tries again",
            ),
            Ok(other) => tally.failed(key, other.as_str()),
            Err(error) => tally.failed(key, error.code()),
        }
    }

    /// Ask the sender to send delivery `id` again, once: the ask takes a
    /// mark in the store first, kept for the sender's retention, so no
    /// pass on any gateway asks for it twice.
    async fn ask(&self, path: &str, id: &str, key: &str, api: &mut Api<'_>, tally: &mut Tally) {
        let mark = self.store.key(self.marks, &format!("asked:{id}"));
        let retention = self.settings.sender.retention;
        let claim = ClaimRequest::delivery(&mark, "", ASK_TTL, retention);
        let lease = match self.store.records().claim(claim).await {
            Ok(ClaimOutcome::New(lease)) => lease,
            // Asked already, or being asked.
            Ok(_) => return,
            Err(error) => return tally.failed(key, error),
        };
        let url = format!(
            "{}{}",
            self.settings.api_base,
            path.replace("{hook}", self.settings.hook.as_deref().unwrap_or_default())
                .replace("{id}", &encode(id))
        );
        match api.post(&url).await {
            Ok(_) => {
                tally.asked += 1;
                let asked = super::note(Bytes::new());
                if let Err(error) = self
                    .store
                    .records()
                    .complete(&mark, &lease, &asked, retention)
                    .await
                {
                    // The ask went out; a second one is a duplicate the
                    // claim answers.
                    tracing::warn!(route = %self.route.name, key, %error, "could not remember a redelivery asked for");
                }
            }
            Err(error) => {
                let _ = self.store.records().release(&mark, &lease).await;
                tally.failed(key, error);
            }
        }
    }
}

/// Whether a record (or none) leaves the event to reconciliation: absent,
/// failed, or held by a lease that lapsed. Completed, queued, in flight,
/// dead and stale events are the gateway's own.
pub fn needs(record: Option<&Record>, now_ms: u64) -> bool {
    let Some(record) = record else { return true };
    let held = record
        .lease_expires_at_ms
        .is_some_and(|until| until > now_ms);
    match record.state {
        RecordState::Failed | RecordState::Processing => !held && !record.accepted,
        RecordState::Completed | RecordState::Queued | RecordState::Dead | RecordState::Stale => {
            false
        }
    }
}

/// The page's items (their bytes as the API sent them) and the page.
fn read_page(body: &[u8], items: &str) -> Result<(Vec<Box<RawValue>>, Value), ApiError> {
    let malformed = |error: serde_json::Error| ApiError::Malformed(error.to_string());
    let page: Value = serde_json::from_slice(body).map_err(malformed)?;
    let array = match items.strip_prefix('/') {
        None => serde_json::from_slice(body).map_err(malformed)?,
        Some(field) => {
            let mut fields: std::collections::HashMap<String, Box<RawValue>> =
                serde_json::from_slice(body).map_err(malformed)?;
            let raw = fields
                .remove(field)
                .ok_or_else(|| ApiError::Malformed(format!("a page without {items}")))?;
            serde_json::from_str(raw.get()).map_err(malformed)?
        }
    };
    Ok((array, page))
}

/// A string or number at `pointer`, as text.
fn text_at(item: &Value, pointer: &str) -> Option<String> {
    match item.pointer(pointer)? {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        _ => None,
    }
}

fn time_of(item: &Value, at: &Time) -> Result<u64, ApiError> {
    let missing =
        |pointer: &str| ApiError::Malformed(format!("an item without a time at {pointer}"));
    match at {
        Time::UnixSeconds(pointer) => item
            .pointer(pointer)
            .and_then(Value::as_u64)
            .ok_or_else(|| missing(pointer)),
        Time::Rfc3339(pointer) => item
            .pointer(pointer)
            .and_then(Value::as_str)
            .and_then(|text| crate::clock::rfc3339_ms(text).ok())
            .map(|ms| ms / 1000)
            .ok_or_else(|| missing(pointer)),
    }
}

/// The `rel="next"` target of an RFC 8288 `Link` header.
fn next_link(headers: &HeaderMap) -> Option<String> {
    let link = headers.get(http::header::LINK)?.to_str().ok()?;
    link.split(',').find_map(|part| {
        let (target, params) = part.split_once(';')?;
        let next = params
            .split(';')
            .any(|param| matches!(param.trim(), "rel=\"next\"" | "rel=next"));
        let target = target.trim().strip_prefix('<')?.strip_suffix('>')?;
        next.then(|| target.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_link_is_read_from_any_position() {
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::LINK,
            HeaderValue::from_static(
                "<https://api.github.com/x?cursor=a&per_page=100>; rel=\"prev\", <https://api.github.com/x?cursor=b&per_page=100>; rel=\"next\"",
            ),
        );
        assert_eq!(
            next_link(&headers).as_deref(),
            Some("https://api.github.com/x?cursor=b&per_page=100")
        );
        headers.insert(
            http::header::LINK,
            HeaderValue::from_static("<https://x/y>; rel=\"last\""),
        );
        assert_eq!(next_link(&headers), None);
    }

    #[test]
    fn pages_keep_their_items_bytes() {
        let body =
            br#"{"object":"list","data":[{"id":"evt_1","created":5, "b":1}],"has_more":true}"#;
        let (items, page) = read_page(body, "/data").unwrap();
        assert_eq!(items[0].get(), r#"{"id":"evt_1","created":5, "b":1}"#);
        assert_eq!(page.pointer("/has_more"), Some(&Value::Bool(true)));
        let (items, _) = read_page(br#"[{"id":1},{"id":2}]"#, "").unwrap();
        assert_eq!(items.len(), 2);
        assert!(read_page(br#"{"data":1}"#, "/data").is_err());
    }

    #[test]
    fn encoding_keeps_ids_and_escapes_brackets() {
        assert_eq!(encode("created[gte]"), "created%5Bgte%5D");
        assert_eq!(encode("evt_1Abc"), "evt_1Abc");
    }

    #[test]
    fn a_chunk_keeps_the_oldest_and_leaves_the_newest_for_the_next_walk() {
        let found = |at: u64, bytes: usize| Found {
            at,
            key: format!("evt_{at}"),
            id: None,
            body: Bytes::from(vec![b'x'; bytes]),
            headers: HeaderMap::new(),
        };
        let mut walked = Walked::default();
        // Newest first, as the API lists them.
        for at in (1..=5).rev() {
            walked.hold(found(at, 10), 1000, 3);
        }
        let kept: Vec<u64> = walked.found.iter().map(|f| f.at).collect();
        assert_eq!(kept, [3, 2, 1]);
        assert!(walked.deferred);
        let mut by_bytes = Walked::default();
        for at in (1..=4).rev() {
            by_bytes.hold(found(at, 40), 100, 100);
        }
        assert_eq!(by_bytes.found.len(), 2);
        assert_eq!(by_bytes.bytes, 80);
        let mut all = Walked::default();
        all.hold(found(1, 10), 100, 100);
        assert!(!all.deferred);
    }

    #[test]
    fn only_what_the_gateway_never_completed_is_needed() {
        let now = 10_000;
        let mut record = Record::claimed("t", "sha", 1, now);
        record.lease_expires_at_ms = Some(now + 1);
        assert!(!needs(Some(&record), now), "in flight");
        record.lease_expires_at_ms = Some(now - 1);
        assert!(needs(Some(&record), now), "a lapsed lease");
        record.state = RecordState::Failed;
        record.lease_expires_at_ms = None;
        assert!(needs(Some(&record), now));
        record.accepted = true;
        assert!(!needs(Some(&record), now), "the queue owes it");
        for state in [
            RecordState::Completed,
            RecordState::Queued,
            RecordState::Dead,
        ] {
            record.state = state;
            assert!(!needs(Some(&record), now));
        }
        assert!(needs(None, now));
    }
}
