//! Which events a listing keeps beyond route and state (docs/guide/dead-letters.md, "Failed
//! events and dead letters"): a window of last change (`since`, `until`),
//! the last upstream status, the last error class, and matches on the
//! stored request's content (`q`). The store lists newest first by last
//! change, so `until` is where a listing starts and `since` where it stops;
//! status and class are checked on each record, and content only on the
//! records that pass the rest (it reads the stored request).

use crate::clock::{rfc3339_ms, Rfc3339Error};
use crate::key::{value_of, KeySource};
use crate::store::{FailureClass, Record, StoredRequest};

/// What a listing keeps; the default keeps everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Changed at or after this (Unix ms).
    pub since_ms: Option<u64>,
    /// Changed at or before this (Unix ms).
    pub until_ms: Option<u64>,
    /// The last failed attempt's upstream status.
    pub status: Option<u16>,
    /// The last failed attempt's class.
    pub error: Option<FailureClass>,
    /// Matches on the stored request, every one must hold.
    pub content: Vec<ContentMatch>,
}

/// `SOURCE=VALUE`: what a key source (`json:/data/object/customer`,
/// `header:X-Shop-Domain`, `form:From`) finds in the stored request equals
/// `VALUE` — a JSON string, or a JSON integer as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContentMatch {
    pub source: KeySource,
    pub value: String,
}

impl ContentMatch {
    pub fn parse(text: &str) -> Result<Self, String> {
        let (source, value) = text.split_once('=').ok_or_else(|| {
            format!("{text:?} is not SOURCE=VALUE, like json:/data/object/customer=cus_123")
        })?;
        Ok(ContentMatch {
            source: KeySource::parse(source.trim())?,
            value: value.to_owned(),
        })
    }

    /// Whether `request` (of a body with digest `body_sha256`) holds it.
    pub fn holds(&self, request: &StoredRequest, body_sha256: &str) -> bool {
        value_of(&self.source, &request.headers, &request.body, body_sha256)
            .is_some_and(|found| found == self.value.as_bytes())
    }
}

impl Filter {
    /// Whether it keeps only some records of what it is given.
    pub fn narrows(&self) -> bool {
        *self != Filter::default()
    }

    /// Whether `record`, with its stored request, holds every content
    /// match (a record that keeps no request holds none).
    pub fn holds(&self, record: &Record) -> bool {
        (self.content.iter()).all(|each| {
            (record.request.as_ref())
                .is_some_and(|request| each.holds(request, &record.body_sha256))
        })
    }

    /// Whether `record` passes every condition set but content.
    pub fn keeps(&self, record: &Record) -> bool {
        let last = record.last_error.as_ref();
        self.since_ms.is_none_or(|since| record.updated_ms >= since)
            && self.until_ms.is_none_or(|until| record.updated_ms <= until)
            && (self.status).is_none_or(|status| last.and_then(|e| e.status) == Some(status))
            && (self.error).is_none_or(|class| last.map(|e| e.class) == Some(class))
    }

    /// Whether a record changed at `updated_ms`, and every older one, is
    /// before the window: a newest-first listing can stop there.
    pub fn ends_before(&self, updated_ms: u64) -> bool {
        self.since_ms.is_some_and(|since| updated_ms < since)
    }
}

/// A point in time as an operator writes it: a duration ago (`90s`, `2h`,
/// `3d`) or an RFC 3339 time (`2026-12-02T14:02:00Z`, with an offset or
/// `Z`); Unix ms.
pub fn parse_time(text: &str, now_ms: u64) -> Result<u64, String> {
    if let Ok(ago) = crate::config::parse_duration(text) {
        return Ok(now_ms.saturating_sub(ago.as_millis() as u64));
    }
    rfc3339_ms(text).map_err(|error| match error {
        Rfc3339Error::NotATime => {
            format!("{text:?} is neither a duration ago like \"2h\" nor an RFC 3339 time")
        }
        Rfc3339Error::NoZone => format!("{text:?} needs a date, a time and a zone (Z or +01:00)"),
        Rfc3339Error::Before1970 => format!("{text:?} is before 1970"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::rfc3339;
    use crate::store::LastError;

    #[test]
    fn times_are_durations_ago_or_rfc3339() {
        let now = 1_764_684_000_000; // 2025-12-02T14:00:00Z
        assert_eq!(parse_time("2h", now), Ok(now - 7_200_000));
        assert_eq!(parse_time("90s", now), Ok(now - 90_000));
        assert_eq!(parse_time("2025-12-02T14:00:00Z", 0), Ok(now));
        assert_eq!(parse_time("2025-12-02T15:00:00+01:00", 0), Ok(now));
        assert_eq!(parse_time("2025-12-02T14:00:00.250Z", 0), Ok(now + 250));
        assert_eq!(parse_time("1970-01-01T00:00:00Z", 0), Ok(0));
        assert_eq!(parse_time("2000-03-01T00:00:00Z", 0), Ok(951_868_800_000));
        for ms in [0, now, now + 250, 951_868_800_000, 4_102_444_799_999] {
            assert_eq!(parse_time(&rfc3339(ms), 0), Ok(ms), "{}", rfc3339(ms));
        }
        assert_eq!(rfc3339(now + 250), "2025-12-02T14:00:00.250Z");
        for bad in ["", "2", "yesterday", "2025-12-02", "2025-12-02T14:00:00"] {
            assert!(parse_time(bad, now).is_err(), "{bad}");
        }
    }

    #[test]
    fn content_matches_read_the_stored_request() {
        let mut headers = http::HeaderMap::new();
        headers.insert("x-shop-domain", "a.myshopify.com".parse().unwrap());
        let request = StoredRequest {
            method: http::Method::POST,
            query: None,
            headers,
            body: bytes::Bytes::from_static(br#"{"data":{"object":{"customer":"cus_1","n":42}}}"#),
        };
        let holds = |text: &str| ContentMatch::parse(text).unwrap().holds(&request, "abc");
        assert!(holds("json:/data/object/customer=cus_1"));
        assert!(holds("json:/data/object/n=42"));
        assert!(holds("header:X-Shop-Domain=a.myshopify.com"));
        assert!(holds("body-sha256=abc"));
        assert!(!holds("json:/data/object/customer=cus_2"));
        assert!(!holds("json:/data/object/customer=cus_"));
        assert!(!holds("json:/data/missing=cus_1"));
        assert!(!holds("header:X-Shop-Domain=b.myshopify.com"));
        for bad in ["json:/data", "nope=1", "json:data=1"] {
            assert!(ContentMatch::parse(bad).is_err(), "{bad}");
        }
        let mut record = Record::claimed("t", "abc", 1, 1_000);
        let filter = Filter {
            content: vec![ContentMatch::parse("json:/data/object/n=42").unwrap()],
            ..Filter::default()
        };
        assert!(!filter.holds(&record), "no stored request, no match");
        record.request = Some(request);
        assert!(filter.holds(&record));
    }

    #[test]
    fn a_filter_keeps_what_matches_every_condition() {
        let mut record = Record::claimed("t", "sha", 1, 1_000);
        record.updated_ms = 5_000;
        record.last_error = Some(LastError {
            class: FailureClass::Refused,
            status: Some(503),
            at_ms: 5_000,
        });
        let keeps = |filter: Filter| filter.keeps(&record);
        assert!(keeps(Filter::default()));
        assert!(keeps(Filter {
            since_ms: Some(5_000),
            until_ms: Some(5_000),
            status: Some(503),
            error: Some(FailureClass::Refused),
            content: Vec::new(),
        }));
        assert!(!keeps(Filter {
            since_ms: Some(5_001),
            ..Filter::default()
        }));
        assert!(!keeps(Filter {
            until_ms: Some(4_999),
            ..Filter::default()
        }));
        assert!(!keeps(Filter {
            status: Some(500),
            ..Filter::default()
        }));
        assert!(!keeps(Filter {
            error: Some(FailureClass::Unknown),
            ..Filter::default()
        }));
        record.last_error = None;
        let by_status = Filter {
            status: Some(503),
            ..Filter::default()
        };
        assert!(!by_status.keeps(&record));
    }
}
