//! How a claim changes the memory store's record, by the decision the
//! record's life (`store/record.rs`, `decide`) made: adopted into the
//! queue, queued, or taken by a new holder.

use super::millis;
use crate::store::{ClaimMode, ClaimRequest, Record, RecordState};

/// What the request keeps on its record: the stored request, the route
/// and what it replays.
fn keep(record: &mut Record, request: &ClaimRequest<'_>) {
    if let Some(stored) = request.stored {
        record.request = Some(stored.request.clone());
        record.route = Some(stored.route.to_owned());
        record.replay_of = stored.replay_of.map(str::to_owned);
    }
}

/// `Decision::Adopt`: a record a delivery holds (or that failed) is owed
/// to the queue from now on.
pub(super) fn adopt(record: &mut Record, request: &ClaimRequest<'_>, now: u64) {
    record.accepted = true;
    record.next_attempt_ms = record.lease_expires_at_ms;
    if record.state == RecordState::Failed {
        record.state = RecordState::Queued;
        record.token = None;
        record.lease_expires_at_ms = None;
        record.updated_ms = now;
    }
    keep(record, request);
}

/// `Decision::Queue`: the record queued, due now.
pub(super) fn queue(record: &mut Record, request: &ClaimRequest<'_>, now: u64) {
    record.state = RecordState::Queued;
    record.accepted = true;
    record.token = None;
    record.lease_expires_at_ms = None;
    record.next_attempt_ms = Some(now);
    record.body_sha256 = request.body_sha256.to_owned();
    record.updated_ms = now;
    keep(record, request);
}

/// The record a claim takes: new, or the `existing` one taken over, held
/// by `token` (or queued, when the claim accepts).
pub(super) fn taken(
    existing: Option<Record>,
    token: &str,
    request: &ClaimRequest<'_>,
    now: u64,
) -> Record {
    let lease_until = now + millis(request.processing_ttl);
    let mut record = match existing {
        Some(previous) => Record {
            state: RecordState::Processing,
            token: Some(token.to_owned()),
            body_sha256: request.body_sha256.to_owned(),
            attempts: previous.attempts + 1,
            updated_ms: now,
            completed_at_ms: None,
            response: None,
            ..previous
        },
        None => Record::claimed(token, request.body_sha256, 1, now),
    };
    record.lease_expires_at_ms = Some(lease_until);
    record.accepted |= request.mode.accepts();
    match request.mode {
        ClaimMode::Accept => {
            record.state = RecordState::Queued;
            record.token = None;
            record.lease_expires_at_ms = None;
            record.attempts = 0;
            let hold = request.order.map_or(0, |spot| millis(spot.hold));
            record.next_attempt_ms = Some(now + hold);
        }
        // An accepted record stays owed to its queue.
        _ if record.accepted => record.next_attempt_ms = Some(lease_until),
        _ => record.next_attempt_ms = None,
    }
    keep(&mut record, request);
    record
}
