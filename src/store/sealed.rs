//! Data at rest (docs/guide/stores.md, "Data at rest"): what the store keeps of a
//! sender's request and of an upstream's answer is sealed here, in the
//! store's one funnel, before any backend sees it, and opened here after a
//! backend read it. Every backend therefore keeps the same ciphertext, and
//! `store copy` and `backup` carry it as it is.
//!
//! A sealed request keeps its method in clear; a sealed response its status
//! and how much of its body was kept. Their headers are one marker header,
//! [`SEALED`], naming the key's id, and their body is the seal of the rest
//! (a request's query, the header lines, the body). The marker is hookgate's
//! own name: a sender's or an upstream's header of that name is never kept
//! (it is dropped before any write), so a record that carries it is sealed,
//! and one that does not is not.
//!
//! The seal is bound to the record's scope, key and part (request or
//! response), not to the store's key prefix or shard, so a record copied to
//! another store still opens there.

use std::sync::Arc;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};

use super::{PastAttempt, Record, Store, StoreError, StoreKey, StoredRequest};
use crate::headers::{decode_lines, encode_lines};
use crate::replay::RecordedResponse;
use crate::seal::{sealing_key, Keys, SealError};

/// The marker header of a sealed request or response.
pub const SEALED: HeaderName = HeaderName::from_static("hookgate-sealed");

/// What was sealed: the seal's associated data names it.
#[derive(Clone, Copy)]
enum Part {
    Request,
    Response,
    /// The upstream's answer to the failed attempt started at this time.
    Attempt(u64),
}

fn bound(scope: &str, id: &str, part: Part) -> String {
    match part {
        Part::Request => format!("{scope}:{id}#request"),
        Part::Response => format!("{scope}:{id}#response"),
        Part::Attempt(at) => format!("{scope}:{id}#attempt:{at}"),
    }
}

/// The marker's value: the format and the sealing key's id (hex), so an
/// operator can tell which key a record needs without opening it.
fn marker(sealed: &[u8]) -> HeaderMap {
    let id = sealing_key(sealed).expect("a seal names its key");
    let mut headers = HeaderMap::new();
    let value = HeaderValue::from_str(&format!("1; key={id:08x}")).expect("hex is a header value");
    headers.insert(SEALED, value);
    headers
}

/// `request`, sealed for event `id` of `scope` under the first key.
pub(super) fn seal_request(keys: &Keys, scope: &str, id: &str, r: &StoredRequest) -> StoredRequest {
    let mut plain = Vec::new();
    match &r.query {
        Some(query) => put(&mut plain, query.as_bytes()),
        None => plain.extend_from_slice(&u32::MAX.to_be_bytes()),
    }
    put_message(&mut plain, &r.headers, &r.body);
    let sealed = keys.seal(&bound(scope, id, Part::Request), &plain);
    StoredRequest {
        method: r.method.clone(),
        query: None,
        headers: marker(&sealed),
        body: Bytes::from(sealed),
    }
}

/// `response`, sealed for event `id` of `scope` under the first key.
pub(super) fn seal_response(
    keys: &Keys,
    scope: &str,
    id: &str,
    r: &RecordedResponse,
) -> RecordedResponse {
    let mut plain = Vec::new();
    put_message(&mut plain, &r.headers, &r.body);
    let sealed = keys.seal(&bound(scope, id, Part::Response), &plain);
    RecordedResponse {
        status: r.status,
        headers: marker(&sealed),
        body: Bytes::from(sealed),
        body_kept: r.body_kept,
    }
}

/// `attempt` with the excerpt of the upstream's answer sealed (the rest —
/// when, what class, what status — stays in clear for listings); `None`
/// when it has no excerpt.
pub(super) fn seal_attempt(
    keys: &Keys,
    scope: &str,
    id: &str,
    attempt: &PastAttempt,
) -> Option<PastAttempt> {
    let body = attempt.body.as_ref()?;
    let sealed = keys.seal(
        &bound(scope, id, Part::Attempt(attempt.at)),
        body.as_bytes(),
    );
    Some(PastAttempt {
        body: None,
        sealed: Some(BASE64.encode(sealed)),
        ..attempt.clone()
    })
}

/// `request` without the marker header, when it has one (a sender's header
/// of that name, written in clear); `None` when it has none.
pub(super) fn unmarked_request(request: &StoredRequest) -> Option<StoredRequest> {
    let headers = unmarked(&request.headers)?;
    Some(StoredRequest {
        headers,
        ..request.clone()
    })
}

/// As [`unmarked_request`], of an upstream's response.
pub(super) fn unmarked_response(response: &RecordedResponse) -> Option<RecordedResponse> {
    let headers = unmarked(&response.headers)?;
    Some(RecordedResponse {
        headers,
        ..response.clone()
    })
}

/// `headers` without the marker, when they have it.
fn unmarked(headers: &HeaderMap) -> Option<HeaderMap> {
    headers.contains_key(SEALED).then(|| {
        let mut clear = headers.clone();
        clear.remove(SEALED);
        clear
    })
}

/// Open what `record` (event `id` of `scope`) keeps sealed, in place.
/// Without keys a sealed part does not open ([`SealError::UnknownKey`]).
pub(super) fn open_record(
    keys: Option<&Keys>,
    scope: &str,
    id: &str,
    record: &mut Record,
) -> Result<(), SealError> {
    if let Some(request) = record.request.as_mut() {
        if request.headers.contains_key(SEALED) {
            *request = open_request(keys, scope, id, request)?;
        }
    }
    if let Some(response) = record.response.as_mut() {
        if response.headers.contains_key(SEALED) {
            *response = open_response(keys, scope, id, response)?;
        }
    }
    for attempt in &mut record.history {
        if let Some(sealed) = attempt.sealed.take() {
            let sealed = BASE64.decode(sealed).map_err(bad)?;
            let plain = open(keys, &bound(scope, id, Part::Attempt(attempt.at)), &sealed)?;
            attempt.body = Some(String::from_utf8(plain).map_err(bad)?);
        }
    }
    Ok(())
}

/// `record` (event `id` of `scope`, as stored) with every part sealed
/// under the first of `keys`: `None` when each already is (or the record
/// keeps no content), an error when a part opens with none of them.
pub(super) fn reseal_record(
    keys: &Keys,
    scope: &str,
    id: &str,
    record: &Record,
) -> Result<Option<Record>, SealError> {
    let current = |headers: &HeaderMap, sealed: &[u8]| {
        headers.contains_key(SEALED) && keys.is_current(sealed)
    };
    let request = record.request.as_ref();
    let response = record.response.as_ref();
    let stale = request.is_some_and(|r| !current(&r.headers, &r.body))
        || response.is_some_and(|r| !current(&r.headers, &r.body))
        || record.history.iter().any(|attempt| match &attempt.sealed {
            Some(sealed) => BASE64
                .decode(sealed)
                .map_or(true, |sealed| !keys.is_current(&sealed)),
            None => attempt.body.is_some(),
        });
    if !stale {
        return Ok(None);
    }
    let mut opened = record.clone();
    open_record(Some(keys), scope, id, &mut opened)?;
    if let Some(request) = opened.request.as_mut() {
        *request = seal_request(keys, scope, id, request);
    }
    if let Some(response) = opened.response.as_mut() {
        *response = seal_response(keys, scope, id, response);
    }
    for attempt in &mut opened.history {
        if let Some(sealed) = seal_attempt(keys, scope, id, attempt) {
            *attempt = sealed;
        }
    }
    Ok(Some(opened))
}

fn open_request(
    keys: Option<&Keys>,
    scope: &str,
    id: &str,
    sealed: &StoredRequest,
) -> Result<StoredRequest, SealError> {
    let plain = open(keys, &bound(scope, id, Part::Request), &sealed.body)?;
    let mut rest = plain.as_slice();
    let query = match take_len(&mut rest)? {
        None => None,
        Some(len) => Some(String::from_utf8(take(&mut rest, len)?.to_vec()).map_err(bad)?),
    };
    let (headers, body) = take_message(rest)?;
    Ok(StoredRequest {
        method: sealed.method.clone(),
        query,
        headers,
        body,
    })
}

fn open_response(
    keys: Option<&Keys>,
    scope: &str,
    id: &str,
    sealed: &RecordedResponse,
) -> Result<RecordedResponse, SealError> {
    let plain = open(keys, &bound(scope, id, Part::Response), &sealed.body)?;
    let (headers, body) = take_message(&plain)?;
    Ok(RecordedResponse {
        status: sealed.status,
        headers,
        body,
        body_kept: sealed.body_kept,
    })
}

fn open(keys: Option<&Keys>, record: &str, sealed: &[u8]) -> Result<Vec<u8>, SealError> {
    match keys {
        Some(keys) => keys.open(record, sealed),
        None => Err(sealing_key(sealed).map_or(SealError::Malformed, SealError::UnknownKey)),
    }
}

fn bad(_: impl std::fmt::Debug) -> SealError {
    SealError::Malformed
}

fn put(out: &mut Vec<u8>, part: &[u8]) {
    out.extend_from_slice(&(part.len() as u32).to_be_bytes());
    out.extend_from_slice(part);
}

/// A request's or an answer's header lines and body, as sealed.
fn put_message(out: &mut Vec<u8>, headers: &HeaderMap, body: &[u8]) {
    put(out, &encode_lines(headers));
    out.extend_from_slice(body);
}

/// What [`put_message`] wrote.
fn take_message(mut rest: &[u8]) -> Result<(HeaderMap, Bytes), SealError> {
    let len = take_len(&mut rest)?.ok_or(SealError::Malformed)?;
    let headers = decode_lines(take(&mut rest, len)?).map_err(bad)?;
    Ok((headers, Bytes::copy_from_slice(rest)))
}

/// A length (`u32::MAX`: absent).
fn take_len(rest: &mut &[u8]) -> Result<Option<usize>, SealError> {
    let len = u32::from_be_bytes(take(rest, 4)?.try_into().map_err(bad)?);
    Ok((len != u32::MAX).then_some(len as usize))
}

fn take<'a>(rest: &mut &'a [u8], len: usize) -> Result<&'a [u8], SealError> {
    if rest.len() < len {
        return Err(SealError::Malformed);
    }
    let (taken, left) = rest.split_at(len);
    *rest = left;
    Ok(taken)
}

/// The store's funnel, at rest: what every write seals and every read
/// opens goes through these.
impl Store {
    /// Seal what is written from now on under `keys` (none: write in
    /// clear); any of them opens what is read. Reloadable.
    pub fn set_keys(&self, keys: Option<Arc<Keys>>) {
        self.keys.store(keys);
    }

    /// The scope of a key this store made (its namespace without the key
    /// prefix and the shard): what a seal is bound to, so a record copied
    /// to a store of another prefix or layout still opens.
    pub(super) fn scope_of<'a>(&self, key: &'a StoreKey) -> &'a str {
        let source = key.source();
        let rest = source
            .strip_prefix(self.key_prefix.as_str())
            .unwrap_or(source);
        let rest = (rest.strip_prefix('{'))
            .and_then(|rest| rest.strip_suffix('}'))
            .unwrap_or(rest);
        rest.split('.').next().unwrap_or(rest)
    }

    /// `record` of `key`, opened; a part that does not open is counted,
    /// logged with its route and key, and answered as unreadable.
    pub(super) fn opened(&self, key: &StoreKey, mut record: Record) -> Result<Record, StoreError> {
        let keys = self.keys.load();
        let (scope, id) = (self.scope_of(key), key.id());
        match open_record(keys.as_deref(), scope, id, &mut record) {
            Ok(()) => Ok(record),
            Err(error) => {
                self.metrics.decrypt_failures.inc();
                let route = record.route.as_deref().unwrap_or("");
                tracing::error!(%route, %key, %error, "a stored record does not open: restore its key to [store.encryption] keys");
                Err(StoreError::Unreadable(error.to_string()))
            }
        }
    }

    /// The request to write for `key`: sealed under the first key, or in
    /// clear without the marker header; `None` when `request` is written
    /// as it is.
    pub(super) fn kept_request(
        &self,
        key: &StoreKey,
        request: &StoredRequest,
    ) -> Option<StoredRequest> {
        match self.keys.load().as_deref() {
            Some(keys) => Some(seal_request(keys, self.scope_of(key), key.id(), request)),
            None => unmarked_request(request),
        }
    }

    /// As [`Store::kept_request`], of an upstream's answer.
    pub(super) fn kept_response(
        &self,
        key: &StoreKey,
        response: &RecordedResponse,
    ) -> Option<RecordedResponse> {
        match self.keys.load().as_deref() {
            Some(keys) => Some(seal_response(keys, self.scope_of(key), key.id(), response)),
            None => unmarked_response(response),
        }
    }

    /// The failed attempt to write for `key`: its answer's excerpt sealed;
    /// `None` when it is written as it is.
    pub(super) fn kept_attempt(
        &self,
        key: &StoreKey,
        attempt: &PastAttempt,
    ) -> Option<PastAttempt> {
        let keys = self.keys.load();
        seal_attempt(keys.as_deref()?, self.scope_of(key), key.id(), attempt)
    }
}

#[cfg(test)]
mod tests {
    use http::{Method, StatusCode};

    use super::*;
    use crate::replay::BodyKept;

    fn keys(texts: &[&str]) -> Keys {
        Keys::parse(&texts.iter().map(|t| t.to_string()).collect::<Vec<_>>()).unwrap()
    }

    const A: &str = "0000000000000000000000000000000000000000000000000000000000000001";
    const B: &str = "0000000000000000000000000000000000000000000000000000000000000002";

    fn request() -> StoredRequest {
        let mut headers = HeaderMap::new();
        headers.insert("stripe-signature", HeaderValue::from_static("t=1,v1=ab"));
        StoredRequest {
            method: Method::POST,
            query: Some("a=1".into()),
            headers,
            body: Bytes::from_static(br#"{"email":"ada@example.com"}"#),
        }
    }

    fn record_with(request: StoredRequest, response: RecordedResponse) -> Record {
        let mut record = Record::claimed("t", "sha", 1, 0);
        record.request = Some(request);
        record.response = Some(response);
        record
    }

    fn response() -> RecordedResponse {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        RecordedResponse {
            status: StatusCode::CREATED,
            headers,
            body: Bytes::from_static(b"{\"customer\":\"Ada\"}"),
            body_kept: BodyKept::Whole,
        }
    }

    #[test]
    fn a_sealed_record_keeps_nothing_of_the_request_or_answer_in_clear() {
        let keys = keys(&[A]);
        let sealed_request = seal_request(&keys, "stripe", "evt_1", &request());
        let sealed_response = seal_response(&keys, "stripe", "evt_1", &response());
        let kept = [&sealed_request.body[..], &sealed_response.body[..]].concat();
        for secret in [
            &b"ada@example.com"[..],
            b"t=1,v1=ab",
            b"a=1",
            b"Ada",
            b"json",
        ] {
            assert!(!kept.windows(secret.len()).any(|w| w == secret));
        }
        assert_eq!(sealed_request.query, None);
        assert_eq!(sealed_request.headers.len(), 1);
        assert_eq!(sealed_response.status, StatusCode::CREATED);
        let mut record = record_with(sealed_request, sealed_response);
        open_record(Some(&keys), "stripe", "evt_1", &mut record).unwrap();
        assert_eq!(record.request, Some(request()));
        assert_eq!(record.response, Some(response()));
    }

    #[test]
    fn a_seal_opens_for_its_own_record_and_part_only() {
        let keys = keys(&[A]);
        let sealed = seal_request(&keys, "stripe", "evt_1", &request());
        for (scope, id) in [("stripe", "evt_2"), ("github", "evt_1")] {
            let mut record = record_with(sealed.clone(), response());
            let opened = open_record(Some(&keys), scope, id, &mut record);
            assert_eq!(opened, Err(SealError::Unauthentic), "{scope} {id}");
        }
        // A request's seal put where the response goes does not open either.
        let mut record = record_with(request(), response());
        let moved = RecordedResponse {
            headers: sealed.headers.clone(),
            body: sealed.body.clone(),
            ..response()
        };
        record.response = Some(moved);
        let opened = open_record(Some(&keys), "stripe", "evt_1", &mut record);
        assert_eq!(opened, Err(SealError::Unauthentic));
    }

    #[test]
    fn without_its_key_a_sealed_record_is_unreadable_never_garbage() {
        let sealed = seal_response(&keys(&[A]), "s", "k", &response());
        let mut record = record_with(request(), sealed.clone());
        assert!(matches!(
            open_record(Some(&keys(&[B])), "s", "k", &mut record),
            Err(SealError::UnknownKey(_))
        ));
        assert!(matches!(
            open_record(None, "s", "k", &mut record),
            Err(SealError::UnknownKey(_))
        ));
        // Rotated: the new key first, the old one still listed.
        let mut record = record_with(request(), sealed);
        let rotated = keys(&[B, A]);
        open_record(Some(&rotated), "s", "k", &mut record).unwrap();
        assert_eq!(record.response, Some(response()));
    }

    #[test]
    fn a_reseal_moves_clear_and_older_parts_under_the_first_key_only() {
        let (old, rotated) = (keys(&[A]), keys(&[B, A]));
        let clear = record_with(request(), response());
        let under_a = record_with(
            seal_request(&old, "s", "k", &request()),
            seal_response(&old, "s", "k", &response()),
        );
        for record in [clear, under_a] {
            let resealed = reseal_record(&rotated, "s", "k", &record).unwrap().unwrap();
            let (request_seal, response_seal) = (
                &resealed.request.as_ref().unwrap().body,
                &resealed.response.as_ref().unwrap().body,
            );
            assert!(rotated.is_current(request_seal) && rotated.is_current(response_seal));
            assert_eq!(reseal_record(&rotated, "s", "k", &resealed), Ok(None));
            let mut opened = resealed;
            open_record(Some(&keys(&[B])), "s", "k", &mut opened).unwrap();
            assert_eq!(opened.request, Some(request()));
            assert_eq!(opened.response, Some(response()));
        }
    }

    #[test]
    fn the_marker_is_never_kept_in_clear() {
        let mut marked = request();
        marked.headers.insert(SEALED, HeaderValue::from_static("1"));
        let clear = unmarked_request(&marked).expect("the marker is dropped");
        assert_eq!(clear, request());
        assert!(unmarked_request(&request()).is_none());
    }
}
