//! How attempts fail, as a record keeps it: the class of a failure, the
//! last one, and the record's evidence — its last failed attempts, kept so an operator can
//! see why an event is failing without reading logs — when, by which
//! entrance, how it failed, the upstream's status, how long the call took,
//! the error text ("connection refused") and the start of the upstream's
//! error body.
//!
//! Only a failure writes it (in the same atomic write that records the
//! failure), so the success path pays nothing; a record that completes
//! after failing keeps the failures that came before. Every backend stores
//! it the same way: one JSON object per line, the newest last, at most
//! [`KEPT`] lines.

use serde::{Deserialize, Serialize};

/// Why an attempt did not finish (docs/guide/what-a-sender-sees.md, "What a sender sees").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    /// The upstream answered 5xx, 408, 429 or 3xx.
    Refused,
    /// The request never left hookgate (connect refused, TLS, DNS).
    NotDelivered,
    /// Timeout, or the connection broke after the request was sent: the
    /// upstream may have done the work.
    Unknown,
}

impl FailureClass {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::Refused => "refused",
            FailureClass::NotDelivered => "not_delivered",
            FailureClass::Unknown => "unknown",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [
            FailureClass::Refused,
            FailureClass::NotDelivered,
            FailureClass::Unknown,
        ]
        .into_iter()
        .find(|class| class.as_str() == text)
    }
}

/// The last failed attempt of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastError {
    pub class: FailureClass,
    /// The upstream's status, when it answered.
    pub status: Option<u16>,
    /// Unix milliseconds the attempt failed.
    pub at_ms: u64,
}

/// How many failed attempts a record keeps.
pub const KEPT: usize = 10;

/// How much of the upstream's error body an attempt keeps.
pub const BODY_BYTES: usize = 1024;

/// How much of an error's text an attempt keeps.
const ERROR_BYTES: usize = 512;

/// Which entrance made an attempt, as a record shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttemptKind {
    /// The sender's own request.
    Sender,
    /// `respond_within`: the sender waited, then the call ran on.
    Hybrid,
    /// An async worker.
    Worker,
    /// An operator's redelivery, replay or redrive.
    Operator,
}

/// One failed attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PastAttempt {
    /// Unix ms the call started.
    pub at: u64,
    pub kind: AttemptKind,
    pub class: FailureClass,
    /// The upstream's status, when it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    pub duration_ms: u64,
    /// What went wrong, when no status came ("connection refused").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The first [`BODY_BYTES`] of the upstream's answer (invalid UTF-8
    /// replaced), when it answered with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// `body`, sealed (docs/guide/stores.md, "Data at rest"), base64: only hookgate
    /// writes this field, and a store opens it before anyone reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealed: Option<String>,
}

impl PastAttempt {
    /// Bound what the upstream wrote: the body to [`BODY_BYTES`], the error
    /// text to 512 bytes, each cut at a character boundary.
    pub fn new(
        at: u64,
        kind: AttemptKind,
        class: FailureClass,
        status: Option<u16>,
        duration_ms: u64,
        error: Option<String>,
        body: &[u8],
    ) -> Self {
        let body = (!body.is_empty()).then(|| {
            let text = String::from_utf8_lossy(&body[..body.len().min(BODY_BYTES + 3)]);
            cut(&text, BODY_BYTES).to_owned()
        });
        Self {
            at,
            kind,
            class,
            status,
            duration_ms,
            error: error.map(|text| cut(&text, ERROR_BYTES).to_owned()),
            body,
            sealed: None,
        }
    }

    /// The attempt as one line of the stored history.
    pub fn line(&self) -> String {
        serde_json::to_string(self).expect("a past attempt serializes")
    }
}

fn cut(text: &str, bytes: usize) -> &str {
    let mut end = text.len().min(bytes);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `history` with `line` appended, the oldest dropped beyond [`KEPT`].
pub fn append(history: Option<&str>, line: &str) -> String {
    let mut lines: Vec<&str> = history
        .unwrap_or_default()
        .split('\n')
        .filter(|line| !line.is_empty())
        .collect();
    lines.push(line);
    let from = lines.len().saturating_sub(KEPT);
    lines[from..].join("\n")
}

/// A history as stored: one line per attempt, oldest first (`None` when
/// there is none).
pub fn encode(history: &[PastAttempt]) -> Option<String> {
    let lines: Vec<String> = history.iter().map(PastAttempt::line).collect();
    (!lines.is_empty()).then(|| lines.join("\n"))
}

/// The attempts of a stored history, oldest first; a line that does not
/// parse (written by a later version) is skipped, not an error.
pub fn decode(history: &str) -> Vec<PastAttempt> {
    history
        .split('\n')
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(at: u64) -> PastAttempt {
        PastAttempt::new(
            at,
            AttemptKind::Worker,
            FailureClass::Refused,
            Some(503),
            12,
            None,
            b"{\"error\":\"orders DB: connection pool exhausted\"}",
        )
    }

    #[test]
    fn keeps_the_last_ten_newest_last() {
        let mut history = None;
        for at in 1..=13 {
            history = Some(append(history.as_deref(), &attempt(at).line()));
        }
        let kept = decode(history.as_deref().unwrap());
        assert_eq!(kept.len(), KEPT);
        assert_eq!(kept.first().unwrap().at, 4);
        assert_eq!(kept.last().unwrap(), &attempt(13));
        assert_eq!(
            kept[0].body.as_deref(),
            Some("{\"error\":\"orders DB: connection pool exhausted\"}")
        );
    }

    #[test]
    fn bounds_what_the_upstream_wrote_and_one_line_holds_any_of_it() {
        let body = "é\n".repeat(1000);
        let error = "x".repeat(2000);
        let long = PastAttempt::new(
            1,
            AttemptKind::Sender,
            FailureClass::NotDelivered,
            None,
            3,
            Some(error),
            body.as_bytes(),
        );
        assert!(long.body.as_ref().unwrap().len() <= BODY_BYTES);
        assert_eq!(long.error.as_ref().unwrap().len(), 512);
        assert!(!long.line().contains('\n'), "newlines are escaped");
        assert_eq!(decode(&append(None, &long.line())), vec![long]);
        let invalid = PastAttempt::new(
            1,
            AttemptKind::Sender,
            FailureClass::Refused,
            Some(500),
            1,
            None,
            &[0xff, b'a'],
        );
        assert_eq!(invalid.body.as_deref(), Some("\u{fffd}a"));
    }

    #[test]
    fn a_line_it_cannot_read_is_skipped() {
        let history = append(Some("{\"from\":\"the future\"}"), &attempt(1).line());
        assert_eq!(decode(&history), vec![attempt(1)]);
    }
}
