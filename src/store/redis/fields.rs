//! Reading a record back from Redis: the hash's fields (RESP2 or RESP3)
//! into a [`Record`].

use redis::Value;

use super::super::{
    history, FailureClass, LastError, Ordered, Record, RecordState, StoreError, StoredRequest,
};
use crate::replay::{BodyKept, RecordedResponse};

pub(super) fn bytes(value: &Value) -> Vec<u8> {
    match value {
        Value::BulkString(b) => b.clone(),
        Value::SimpleString(s) => s.clone().into_bytes(),
        Value::Int(n) => n.to_string().into_bytes(),
        _ => Vec::new(),
    }
}

/// The field/value pairs of an `HGETALL` reply (RESP2 flat array or RESP3
/// map); `None` for any other reply.
pub(super) fn pairs(fields: &Value) -> Option<Vec<(&Value, &Value)>> {
    match fields {
        Value::Array(items) => Some(items.chunks_exact(2).map(|p| (&p[0], &p[1])).collect()),
        Value::Map(items) => Some(items.iter().map(|(k, v)| (k, v)).collect()),
        _ => None,
    }
}

/// An `HGETALL` reply as a record, `None` when the key holds none.
pub(super) fn record_or_none(fields: &Value) -> Result<Option<Record>, StoreError> {
    match fields {
        Value::Array(items) if items.is_empty() => Ok(None),
        Value::Map(items) if items.is_empty() => Ok(None),
        _ => parse_record(fields).map(Some),
    }
}

/// Turn an `HGETALL` reply (RESP2 flat array or RESP3 map) into a record.
pub(super) fn parse_record(fields: &Value) -> Result<Record, StoreError> {
    let pairs =
        pairs(fields).ok_or_else(|| StoreError::Corrupt(format!("record is {fields:?}")))?;
    let mut state = None;
    let mut record = Record::claimed("", "", 0, 0);
    record.token = None;
    let (mut status, mut headers, mut body) = (None, Vec::new(), None);
    let (mut error_class, mut error_status, mut error_at) = (None, None, 0);
    let (mut method, mut query, mut request_headers, mut request_body) =
        (None, None, Vec::new(), None);
    let mut updated = None;
    let (mut entity, mut order_value, mut order_seq) = (None, None, 0);
    // Records written before `body_kept` existed held their body whole.
    let mut kept = Some(BodyKept::Whole);
    for (name, value) in pairs {
        let value = bytes(value);
        let text = String::from_utf8_lossy(&value);
        let number = || text.parse::<u64>().ok();
        match bytes(name).as_slice() {
            b"state" => state = RecordState::parse(&text),
            b"token" => record.token = Some(text.into_owned()),
            b"body_sha256" => record.body_sha256 = text.into_owned(),
            b"attempts" => record.attempts = number().unwrap_or(0) as u32,
            b"first_seen" => record.first_seen_ms = number().unwrap_or(0),
            b"updated" => updated = number(),
            b"lease_until" => record.lease_expires_at_ms = number(),
            b"completed_at" => record.completed_at_ms = number(),
            b"next_attempt" => {
                record.next_attempt_ms = number();
                // Queued before records said so: an accepted record.
                record.accepted = true;
            }
            b"accepted" => record.accepted = true,
            b"status" => status = number(),
            b"headers" => headers = value,
            b"body" => body = Some(value),
            b"body_kept" => kept = BodyKept::parse(&text),
            b"last_error" => {
                error_class = Some(
                    FailureClass::parse(&text)
                        .ok_or_else(|| StoreError::Corrupt(format!("bad last_error {text:?}")))?,
                )
            }
            b"last_status" => error_status = number().map(|n| n as u16),
            b"last_attempt_at" => error_at = number().unwrap_or(0),
            b"route" => record.route = Some(text.into_owned()),
            b"replay_of" => record.replay_of = Some(text.into_owned()),
            b"req_method" => method = Some(text.into_owned()),
            b"req_query" => query = Some(text.into_owned()).filter(|q| !q.is_empty()),
            b"req_headers" => request_headers = value,
            b"req_body" => request_body = Some(value),
            b"history" => record.history = history::decode(&text),
            b"entity" => entity = Some(text.into_owned()),
            b"order_value" => order_value = text.parse::<f64>().ok(),
            b"order_seq" => order_seq = number().unwrap_or(0),
            _ => {}
        }
    }
    record.state = state.ok_or_else(|| StoreError::Corrupt("record has no valid state".into()))?;
    record.updated_ms = updated.unwrap_or(record.first_seen_ms);
    record.order = entity.map(|entity| Ordered {
        entity,
        value: order_value,
        seq: order_seq,
    });
    record.last_error = error_class.map(|class| LastError {
        class,
        status: error_status,
        at_ms: error_at,
    });
    if let (RecordState::Completed, Some(body)) = (record.state, body) {
        let status =
            status.ok_or_else(|| StoreError::Corrupt("completed record has no status".into()))?;
        let kept = kept.ok_or_else(|| StoreError::Corrupt("bad body_kept".into()))?;
        record.response = Some(
            RecordedResponse::decode(status as u16, &headers, body.into(), kept)
                .map_err(StoreError::Corrupt)?,
        );
    }
    if let (Some(method), Some(body)) = (method, request_body) {
        record.request = Some(
            StoredRequest::decode(&method, query, &request_headers, body.into())
                .map_err(StoreError::Corrupt)?,
        );
    }
    Ok(record)
}
