//! Handshakes described as data (`[schemes.handshake]`): the challenge a
//! sender sends to prove an endpoint before it delivers — Meta's
//! `hub.challenge`, Dropbox's `challenge`, X's CRC, Twitch's
//! `webhook_callback_verification` — answered by the gateway itself,
//! counted as a handshake, never claimed or forwarded.
//!
//! A `GET` handshake carries no body to sign, so it is answered before
//! verification, and only what it proves is answered: a challenge echoed
//! back (harmless, and only a short token of URL-safe characters, as
//! `text/plain` with `nosniff`), once the request's own token matches the
//! route's `handshake_token` when the sender sends one; or the CRC, an HMAC
//! of the challenge under the route's first secret. A `POST` handshake is
//! an ordinary signed delivery: answered only after it verified.
//!
//! A CRC is an HMAC that anyone may ask for, under the secret deliveries
//! are signed with (X's protocol uses one secret for both): the answer to
//! challenge `T` is exactly the signature of a delivery whose signed
//! content is `T`. So on such a route a delivery whose signed content
//! could itself be a challenge — 1 to 256 characters of the challenge
//! alphabet — is refused whatever its signature ([`could_be_challenged`]):
//! a handshake's answer is never a valid signature of a deliverable
//! request. Real deliveries are JSON objects, never such a string.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use http::{HeaderMap, HeaderName, Method, StatusCode};
use serde::Deserialize;
use subtle::ConstantTimeEq;

use super::{Algorithm, Handshake, Reply, RequestLine, VerifyError};
use crate::secret::Secret;

/// The longest challenge echoed back.
const MAX_CHALLENGE: usize = 256;

/// A byte a challenge may hold: URL-safe, never markup or a line break.
fn plain(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"._~+/=-".contains(&byte)
}

/// Whether `text` is a challenge this module answers.
fn is_challenge(text: &[u8]) -> bool {
    !text.is_empty() && text.len() <= MAX_CHALLENGE && text.iter().copied().all(plain)
}

/// Whether the signed content `parts` (concatenated) is one a CRC
/// handshake would sign for anyone who asked: 1 to 256 characters of the
/// challenge alphabet.
pub fn could_be_challenged(parts: &[&[u8]]) -> bool {
    let len: usize = parts.iter().map(|part| part.len()).sum();
    (1..=MAX_CHALLENGE).contains(&len) && parts.iter().all(|part| part.iter().copied().all(plain))
}

/// A `[schemes.handshake]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHandshake {
    /// `GET` (the default) or `POST`.
    pub method: Option<String>,
    /// What makes a request this handshake: `query:NAME=VALUE` or
    /// `header:NAME=VALUE`, every one.
    #[serde(default)]
    pub when: Vec<String>,
    /// Where the challenge is: `query:NAME`, or `json:/pointer` of a POST.
    pub challenge: String,
    /// A query parameter that must equal the route's `handshake_token`.
    pub token: Option<String>,
    /// `echo` (the default): the challenge as `text/plain`;
    /// `crc-sha256`: `{"response_token":"sha256=<base64 HMAC-SHA256 of
    /// the challenge>"}` under the route's first secret.
    pub answer: Option<String>,
}

/// Where a value is read.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Place {
    Query(String),
    Header(HeaderName),
    Json(String),
}

impl Place {
    fn parse(text: &str, json: bool) -> Result<Place, String> {
        if let Some(name) = text.strip_prefix("query:") {
            return Ok(Place::Query(name.to_owned()));
        }
        if let Some(name) = text.strip_prefix("header:") {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("{name:?} is not a header name"))?;
            return Ok(Place::Header(name));
        }
        match text.strip_prefix("json:") {
            Some(pointer) if json && pointer.starts_with('/') => {
                Ok(Place::Json(pointer.to_owned()))
            }
            _ => Err(format!(
                "{text:?} is not \"query:NAME\"{}",
                if json {
                    ", \"header:NAME\" or \"json:/pointer\""
                } else {
                    " or \"header:NAME\""
                }
            )),
        }
    }

    fn read(&self, query: Option<&str>, headers: &HeaderMap, body: &[u8]) -> Option<String> {
        match self {
            Place::Query(name) => form_urlencoded::parse(query?.as_bytes())
                .find(|(key, _)| key == name.as_str())
                .map(|(_, value)| value.into_owned()),
            Place::Header(name) => Some(headers.get(name)?.to_str().ok()?.to_owned()),
            Place::Json(pointer) => {
                let value: serde_json::Value = serde_json::from_slice(body).ok()?;
                Some(value.pointer(pointer)?.as_str()?.to_owned())
            }
        }
    }
}

/// How a challenge is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Echo,
    Crc,
}

/// A handshake described as data, checked.
#[derive(Debug, Clone)]
pub struct Challenge {
    /// Answered before verification (a GET), or after (a signed POST).
    pub before_verification: bool,
    when: Vec<(Place, String)>,
    challenge: Place,
    /// The query parameter that must equal the route's `handshake_token`.
    pub token: Option<String>,
    answer: Answer,
}

impl Challenge {
    /// `raw` checked; an error names its field under `handshake`.
    pub fn from_raw(raw: &RawHandshake) -> Result<Challenge, (String, String)> {
        let field = |name: &str| format!("handshake.{name}");
        let before_verification = match raw.method.as_deref() {
            None | Some("GET") => true,
            Some("POST") => false,
            Some(other) => {
                return Err((
                    field("method"),
                    format!("{other:?} is not \"GET\" or \"POST\""),
                ))
            }
        };
        let mut when = Vec::new();
        for text in &raw.when {
            let (place, value) = text
                .split_once('=')
                .ok_or_else(|| (field("when"), format!("{text:?} is not PLACE=VALUE")))?;
            let place = Place::parse(place, false).map_err(|error| (field("when"), error))?;
            when.push((place, value.to_owned()));
        }
        let challenge = Place::parse(&raw.challenge, !before_verification)
            .map_err(|e| (field("challenge"), e))?;
        let answer = match raw.answer.as_deref() {
            None | Some("echo") => Answer::Echo,
            Some("crc-sha256") => Answer::Crc,
            Some(other) => {
                return Err((
                    field("answer"),
                    format!("{other:?} is not \"echo\" or \"crc-sha256\""),
                ))
            }
        };
        if raw.token.is_some() && !before_verification {
            return Err((
                field("token"),
                "a signed POST handshake needs no token".into(),
            ));
        }
        Ok(Challenge {
            before_verification,
            when,
            challenge,
            token: raw.token.clone(),
            answer,
        })
    }

    /// Whether it answers with an HMAC under the route's secret (a CRC):
    /// then no delivery whose signed content could be a challenge is
    /// accepted on the route ([`could_be_challenged`]).
    pub fn signs(&self) -> bool {
        self.answer == Answer::Crc
    }

    /// What the catalogue says of it.
    pub fn describe(&self) -> String {
        let method = if self.before_verification {
            "GET"
        } else {
            "signed POST"
        };
        let place = match &self.challenge {
            Place::Query(name) => format!("`{name}`"),
            Place::Header(name) => format!("`{name}`"),
            Place::Json(pointer) => format!("`{pointer}`"),
        };
        let answered = match self.answer {
            Answer::Echo => "echoed",
            Answer::Crc => "answered with its HMAC (CRC)",
        };
        let token = (self.token.as_ref())
            .map(|name| format!(" when `{name}` is the route's `handshake_token`"))
            .unwrap_or_default();
        format!("{method} {place} {answered}{token}")
    }

    /// The answer to this request when it is the handshake: `None` when it
    /// is not (it goes on to verification), an error when it is but its
    /// token is not the route's.
    pub fn answer(
        &self,
        line: RequestLine<'_>,
        headers: &HeaderMap,
        body: &[u8],
        secrets: &[Secret],
        handshake_token: Option<&Secret>,
    ) -> Option<Result<Handshake, VerifyError>> {
        let method = if self.before_verification {
            Method::GET
        } else {
            Method::POST
        };
        if *line.method != method {
            return None;
        }
        let holds = |(place, value): &(Place, String)| {
            place.read(line.query, headers, body).as_deref() == Some(value.as_str())
        };
        if !self.when.iter().all(holds) {
            return None;
        }
        let challenge = self.challenge.read(line.query, headers, body)?;
        if !is_challenge(challenge.as_bytes()) {
            return None;
        }
        if let Some(name) = &self.token {
            let given = Place::Query(name.clone()).read(line.query, headers, body);
            let expected = handshake_token.map(Secret::expose).unwrap_or_default();
            let matches = given.is_some_and(|given| bool::from(given.as_bytes().ct_eq(expected)));
            if !matches || expected.is_empty() {
                return Some(Err(VerifyError::SignatureInvalid));
            }
        }
        Some(Ok(match self.answer {
            Answer::Echo => Handshake {
                status: StatusCode::OK,
                body: Reply::Text(challenge),
            },
            Answer::Crc => {
                let secret = secrets.first()?;
                let tag = Algorithm::Sha256.tag(secret.expose(), &[challenge.as_bytes()]);
                let token = format!("sha256={}", BASE64.encode(tag));
                Handshake {
                    status: StatusCode::OK,
                    body: Reply::Json(serde_json::json!({ "response_token": token })),
                }
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn challenge(text: &str) -> Challenge {
        Challenge::from_raw(&toml::from_str(text).unwrap()).unwrap()
    }

    fn get(query: &str) -> RequestLine<'_> {
        RequestLine {
            method: &Method::GET,
            query: Some(query),
        }
    }

    fn text(answer: Option<Result<Handshake, VerifyError>>) -> Option<String> {
        match answer?.ok()?.body {
            Reply::Text(text) => Some(text),
            other => panic!("{other:?}"),
        }
    }

    const META: &str = r#"when = ["query:hub.mode=subscribe"]
challenge = "query:hub.challenge"
token = "hub.verify_token""#;

    #[test]
    fn a_subscription_challenge_is_echoed_only_with_the_routes_token() {
        let meta = challenge(META);
        let token = Secret::new("verify-me");
        let none = HeaderMap::new();
        let answer = |query| meta.answer(get(query), &none, &[], &[], Some(&token));
        let ok = "hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token=verify-me";
        assert_eq!(text(answer(ok)).as_deref(), Some("1158201444"));
        let wrong = "hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token=guess";
        assert_eq!(
            answer(wrong).map(|a| a.err()),
            Some(Some(VerifyError::SignatureInvalid))
        );
        let missing = "hub.mode=subscribe&hub.challenge=1158201444";
        assert!(matches!(answer(missing), Some(Err(_))));
        // Not this handshake: another mode, no challenge, or a POST.
        assert!(answer("hub.mode=unsubscribe&hub.challenge=1").is_none());
        assert!(answer("hub.mode=subscribe").is_none());
        let post = RequestLine {
            method: &Method::POST,
            query: Some(ok),
        };
        assert!(meta.answer(post, &none, &[], &[], Some(&token)).is_none());
        // A route without a token never answers it.
        assert!(matches!(
            meta.answer(get(ok), &none, &[], &[], None),
            Some(Err(_))
        ));
    }

    #[test]
    fn only_a_short_plain_token_is_echoed() {
        let dropbox = challenge(r#"challenge = "query:challenge""#);
        let none = HeaderMap::new();
        let echo = |query| text(dropbox.answer(get(query), &none, &[], &[], None));
        assert_eq!(echo("challenge=Ab3_-x.~").as_deref(), Some("Ab3_-x.~"));
        for hostile in [
            "challenge=%3Cscript%3E",
            "challenge=a%0D%0ASet-Cookie:x",
            "challenge=",
            &format!("challenge={}", "a".repeat(MAX_CHALLENGE + 1)),
        ] {
            assert_eq!(echo(hostile), None, "{hostile}");
        }
    }

    #[test]
    fn a_crc_is_the_challenges_hmac_under_the_first_secret() {
        let x = challenge("challenge = \"query:crc_token\"\nanswer = \"crc-sha256\"");
        let secrets = [Secret::new("x-consumer-secret-0123456789")];
        let answer = x.answer(
            get("crc_token=crc_9a8b7c6d"),
            &HeaderMap::new(),
            &[],
            &secrets,
            None,
        );
        // Computed independently with Python's hmac and base64.
        let expected = "sha256=HyGctJlg3fYYD+T3oA23wB6Idc70oTwNVBjwGqiUoi8=";
        assert_eq!(
            answer.unwrap().unwrap().body,
            Reply::Json(serde_json::json!({ "response_token": expected }))
        );
    }

    #[test]
    fn what_a_crc_would_sign_is_told_from_a_delivery() {
        assert!(could_be_challenged(&[b"amount=1000000"]));
        assert!(could_be_challenged(&[b"1733220000", b".", b"crc_9a8b7c6d"]));
        assert!(!could_be_challenged(&[br#"{"for_user_id":"1"}"#]));
        assert!(!could_be_challenged(&[b"a=1&b=2"]));
        assert!(!could_be_challenged(&[b""]));
        assert!(!could_be_challenged(&[&[b'a'; MAX_CHALLENGE + 1]]));
        assert!(could_be_challenged(&[&[b'a'; MAX_CHALLENGE]]));
    }

    #[test]
    fn a_signed_post_challenge_is_read_from_the_body_when_its_header_says_so() {
        let twitch = challenge(
            r#"method = "POST"
when = ["header:Twitch-Eventsub-Message-Type=webhook_callback_verification"]
challenge = "json:/challenge""#,
        );
        let mut headers = HeaderMap::new();
        let body = br#"{"challenge":"pogchamp-kappa-360noscope-vohiyo"}"#;
        let answer =
            |headers: &HeaderMap| text(twitch.answer(RequestLine::POST, headers, body, &[], None));
        assert_eq!(answer(&headers), None, "a notification, not the handshake");
        let kind = HeaderValue::from_static("webhook_callback_verification");
        headers.insert("twitch-eventsub-message-type", kind);
        assert_eq!(
            answer(&headers).as_deref(),
            Some("pogchamp-kappa-360noscope-vohiyo")
        );
    }

    #[test]
    fn a_handshake_that_cannot_work_names_its_field() {
        for (text, field) in [
            (
                "method = \"PUT\"\nchallenge = \"query:c\"",
                "handshake.method",
            ),
            ("challenge = \"json:/c\"", "handshake.challenge"),
            (
                "challenge = \"query:c\"\nwhen = [\"mode\"]",
                "handshake.when",
            ),
            (
                "challenge = \"query:c\"\nanswer = \"rot13\"",
                "handshake.answer",
            ),
            (
                "method = \"POST\"\nchallenge = \"json:/c\"\ntoken = \"t\"",
                "handshake.token",
            ),
        ] {
            let raw: RawHandshake = toml::from_str(text).unwrap();
            assert_eq!(
                Challenge::from_raw(&raw).err().map(|(f, _)| f),
                Some(field.into()),
                "{text}"
            );
        }
    }
}
