//! Reading an admin request's query string: parameters, flags, `%XX`
//! escapes, and the listing filter (`since`, `until`, `status`, `error`,
//! `q`).

use http::Request;
use hyper::body::Incoming;

use crate::error::AdminError;
use crate::ops::filter::{parse_time, ContentMatch, Filter};
use crate::store::FailureClass;

/// Content matches (`q`) one listing takes, at most.
const MAX_CONTENT_MATCHES: usize = 8;

/// The listing filter a request's `since`, `until`, `status`, `error`
/// and `q` ask for.
pub(super) fn filter(request: &Request<Incoming>, now_ms: u64) -> Result<Filter, AdminError> {
    let time = |name: &str| {
        query_param(request, name)
            .map(|text| parse_time(&text, now_ms))
            .transpose()
            .map_err(|problem| AdminError::BadQuery(format!("{name}: {problem}")))
    };
    let status = match query_param(request, "status") {
        None => None,
        Some(text) => Some(
            text.parse::<u16>()
                .ok()
                .filter(|status| (100..=599).contains(status))
                .ok_or_else(|| AdminError::BadQuery("status must be 100-599".into()))?,
        ),
    };
    let error = match query_param(request, "error") {
        None => None,
        Some(text) => Some(FailureClass::parse(&text).ok_or_else(|| {
            AdminError::BadQuery("error must be refused, not_delivered or unknown".into())
        })?),
    };
    let content = query_params(request, "q")
        .iter()
        .map(|text| {
            ContentMatch::parse(text)
                .map_err(|problem| AdminError::BadQuery(format!("q: {problem}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if content.len() > MAX_CONTENT_MATCHES {
        return Err(AdminError::BadQuery(format!(
            "at most {MAX_CONTENT_MATCHES} q a request"
        )));
    }
    Ok(Filter {
        since_ms: time("since")?,
        until_ms: time("until")?,
        status,
        error,
        content,
    })
}

/// The value of query parameter `name`, percent-decoded (as sent when it
/// does not decode, so that it fails validation instead of vanishing).
pub(super) fn query_param(request: &Request<Incoming>, name: &str) -> Option<String> {
    query_params(request, name).into_iter().next()
}

/// Every value of query parameter `name`, in order.
pub(super) fn query_params(request: &Request<Incoming>, name: &str) -> Vec<String> {
    let Some(query) = request.uri().query() else {
        return Vec::new();
    };
    (query.split('&'))
        .filter_map(|pair| pair.split_once('='))
        .filter(|(key, _)| *key == name)
        .map(|(_, value)| {
            let value = value.replace('+', " ");
            percent_decode(&value).unwrap_or(value)
        })
        .collect()
}

/// Whether the query string sets `name=true`.
pub(super) fn query_flag(request: &Request<Incoming>, name: &str) -> bool {
    request
        .uri()
        .query()
        .unwrap_or_default()
        .split('&')
        .any(|pair| pair.split_once('=') == Some((name, "true")))
}

/// Decode `%XX` escapes; `None` for a broken escape or non-UTF-8 result.
pub(super) fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::percent_decode;

    #[test]
    fn decodes_percent_escapes() {
        assert_eq!(percent_decode("evt_1").as_deref(), Some("evt_1"));
        assert_eq!(percent_decode("a%2Fb%25c").as_deref(), Some("a/b%c"));
        assert_eq!(percent_decode("bad%2"), None);
        assert_eq!(percent_decode("bad%zz"), None);
    }
}
