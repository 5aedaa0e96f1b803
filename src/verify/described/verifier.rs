//! A route's verifier of a described scheme: the signature header read as
//! its layout says (one signature, `name=value` pairs, a list), the signed
//! content put together from the template (or the JWT read), the signature
//! checked — by an HMAC under the route's secrets, a token compared whole,
//! or a public key the route lists or the sender's key endpoint serves —
//! and the timestamp only after it.

use std::borrow::Cow;
use std::time::{Duration, SystemTime};

use futures_util::future::BoxFuture;

use http::{HeaderMap, HeaderName, Uri};
use ring::signature::UnparsedPublicKey;

use super::keys::{algorithms, public_keys};
use super::{Described, Layout, Piece, Signer, Stamp, Unit};
use crate::clock::rfc3339_ms;
use crate::secret::Secret;
use crate::verify::challenge::could_be_challenged;
use crate::verify::fetched::Fetcher;
use crate::verify::{
    check_timestamp, check_timestamp_ms, hmac_verdict, single_header, token_verdict, FetchSpec,
    Handshake, RequestLine, Verifier, Verify, VerifyError, VerifySpec,
};

/// Most signatures one header may carry (a rotation lists two or three);
/// beyond it the delivery is refused rather than costing a check each.
const MAX_SIGNATURES: usize = 8;

/// What the signature header holds.
struct Read<'a> {
    signatures: Vec<Vec<u8>>,
    /// The timestamp, when the header carries it.
    timestamp: Option<&'a str>,
}

impl Described {
    /// The signatures (and the timestamp, if it is there) of header
    /// `value`. A signature that does not decode is passed over: another
    /// in the same header may match.
    fn read<'a>(&self, value: &'a str) -> Result<Read<'a>, VerifyError> {
        let decode = |text: &str| {
            let text = text.trim().strip_prefix(self.prefix.as_str())?;
            self.encoding.decode(text)
        };
        let mut read = Read {
            signatures: Vec::new(),
            timestamp: None,
        };
        let split = |separator: &str| -> Vec<&'a str> {
            (value.split(|c| separator.contains(c)))
                .map(str::trim)
                .filter(|item| !item.is_empty())
                .collect()
        };
        match &self.layout {
            Layout::Whole => read.signatures.extend(decode(value)),
            Layout::Pairs { name, separator } => {
                let stamp = match &self.timestamp {
                    Some((Stamp::Pair(stamp), _)) => Some(stamp.as_str()),
                    _ => None,
                };
                let pairs = split(separator);
                for (key, text) in pairs.iter().filter_map(|pair| pair.split_once('=')) {
                    if key == name {
                        read.signatures.extend(decode(text));
                    } else if Some(key) == stamp {
                        // Persona lists `t=…,v1=…` once per secret: the
                        // same time each time.
                        match read.timestamp {
                            Some(seen) if seen != text => {
                                return Err(VerifyError::SignatureInvalid)
                            }
                            _ => read.timestamp = Some(text),
                        }
                    }
                }
            }
            Layout::List { separator } => {
                let mut items = split(separator).into_iter();
                if matches!(&self.timestamp, Some((Stamp::First, _))) {
                    read.timestamp = items.next();
                }
                read.signatures.extend(items.filter_map(decode));
            }
        }
        if read.signatures.is_empty() || read.signatures.len() > MAX_SIGNATURES {
            return Err(VerifyError::SignatureInvalid);
        }
        Ok(read)
    }
}

impl Described {
    /// The headers a sender of this description would send for `body` at
    /// `timestamp` (Unix seconds), signed with `secret`: how hookgate signs
    /// an event it fetched from the sender's API itself
    /// (docs/guide/reconciliation.md, "Reconciliation"), so an upstream
    /// that verifies the sender accepts it. An HMAC over the body, the
    /// timestamp and literal text can be made so; a key pair's signature,
    /// or one over the URL or another header, cannot.
    pub fn sign(
        &self,
        secret: &Secret,
        timestamp: u64,
        body: &[u8],
    ) -> Result<Vec<(HeaderName, String)>, String> {
        if self.jwt.is_some() {
            return Err("the sender signs a JWT of its own claims".into());
        }
        let algorithm = match self.signer {
            Signer::Hmac(algorithm) => algorithm,
            Signer::Token => {
                let value = format!("{}{}", self.prefix, self.encoding.encode(secret.expose()));
                return Ok(vec![(self.header.clone(), value)]);
            }
            _ => return Err("the sender signs with its private key".into()),
        };
        let stamp = match &self.timestamp {
            Some((_, Unit::Millis)) => (timestamp * 1000).to_string(),
            Some((_, Unit::Rfc3339)) => crate::clock::rfc3339(timestamp * 1000),
            _ => timestamp.to_string(),
        };
        let crc = crc32fast::hash(body).to_string();
        let mut parts: Vec<&[u8]> = Vec::with_capacity(self.signed.len());
        for piece in &self.signed {
            parts.push(match piece {
                Piece::Body => body,
                Piece::Timestamp => stamp.as_bytes(),
                Piece::Literal(text) => text.as_bytes(),
                Piece::Crc32Body => crc.as_bytes(),
                Piece::Header(_) | Piece::Url | Piece::Param(_) => {
                    return Err("the signature covers what only the sender's request has".into())
                }
            });
        }
        let key = self.hmac_key(secret)?;
        let tag = algorithm.tag(key.expose(), &parts);
        let signature = format!("{}{}", self.prefix, self.encoding.encode(&tag));
        let first = |separator: &str| separator.chars().next().unwrap_or(',');
        let value = match (&self.layout, &self.timestamp) {
            (Layout::Pairs { name, separator }, Some((Stamp::Pair(t), _))) => {
                format!("{t}={stamp}{}{name}={signature}", first(separator))
            }
            (Layout::Pairs { name, .. }, _) => format!("{name}={signature}"),
            (Layout::List { separator }, Some((Stamp::First, _))) => {
                format!("{stamp}{}{signature}", first(separator))
            }
            _ => signature,
        };
        let mut headers = Vec::with_capacity(2);
        if let Some((Stamp::Header(name), _)) = &self.timestamp {
            headers.push((name.clone(), stamp));
        }
        headers.push((self.header.clone(), value));
        Ok(headers)
    }
}

/// A route's verifier of a described scheme.
#[derive(Debug)]
pub struct DescribedVerifier {
    described: &'static Described,
    secrets: Vec<Secret>,
    /// The route's public keys, for an asymmetric signer: public, nothing
    /// to redact.
    keys: Vec<Vec<u8>>,
    tolerance: Duration,
    public_url: Option<String>,
    handshake_token: Option<Secret>,
    /// The sender's key endpoint (`key_url`), when the route lists no key.
    fetcher: Option<Fetcher>,
    /// The route's `params`, for `{param:NAME}`.
    params: std::collections::BTreeMap<String, String>,
}

impl DescribedVerifier {
    pub fn build(
        described: &'static Described,
        spec: VerifySpec,
        tolerance_given: bool,
    ) -> Result<Verifier, String> {
        let tolerance = match (tolerance_given, described.tolerance) {
            (false, Some(own)) => own,
            _ => spec.tolerance,
        };
        let keys = match described.signer {
            Signer::Hmac(_) | Signer::Token => Vec::new(),
            signer => (spec.secrets.iter())
                .map(|secret| public_keys(signer, secret.expose()))
                .collect::<Result<Vec<_>, _>>()?
                .concat(),
        };
        // Keys the route lists are used as they are; only a route that
        // lists none fetches them, and only from the pinned hosts.
        let fetcher = match &described.key_url {
            Some(key_url) if keys.is_empty() => {
                let fetch = spec.fetch.unwrap_or_else(|| FetchSpec {
                    hosts: key_url.hosts.clone(),
                    roots: Vec::new(),
                });
                Some(Fetcher::new(&fetch)?)
            }
            _ => None,
        };
        Ok(Verifier::new(DescribedVerifier {
            described,
            secrets: (spec.secrets.iter())
                .map(|secret| described.hmac_key(secret))
                .collect::<Result<_, _>>()?,
            keys,
            tolerance,
            public_url: spec.public_url,
            handshake_token: spec.handshake_token,
            fetcher,
            params: spec.params,
        }))
    }

    /// The URL of this delivery's key, when it may be fetched from it.
    fn key_url(&self, fetcher: &Fetcher, headers: &HeaderMap) -> Result<Uri, VerifyError> {
        let d = self.described;
        let kid = match &d.jwt {
            Some(jwt) => jwt.read(self.token(headers)?)?.kid,
            None => None,
        };
        let key_url = d.key_url.as_ref().expect("a scheme whose key is fetched");
        let url = key_url.resolve(headers, kid.as_deref())?;
        fetcher.allowed(&url).ok_or_else(|| {
            tracing::warn!(url = ?url, "the key's URL is not on a pinned host; refused");
            VerifyError::SignatureInvalid
        })
    }

    /// The keys in a fetched document.
    fn keys_in(&self, document: &[u8]) -> Result<Vec<Vec<u8>>, String> {
        public_keys(self.described.signer, document)
    }

    /// The keys to verify this delivery with: the route's, or the ones
    /// fetched before for its URL (the check in place never fetches).
    fn keys_now(&self, headers: &HeaderMap) -> Result<Cow<'_, [Vec<u8>]>, VerifyError> {
        let Some(fetcher) = &self.fetcher else {
            return Ok(Cow::Borrowed(&self.keys));
        };
        let url = self.key_url(fetcher, headers)?;
        let document = fetcher.kept(&url).ok_or(VerifyError::SenderUnreachable)?;
        let keys = self
            .keys_in(&document)
            .map_err(|_| VerifyError::SenderUnreachable)?;
        Ok(Cow::Owned(keys))
    }

    /// The JWT of a delivery: its header after `prefix`.
    fn token<'a>(&self, headers: &'a HeaderMap) -> Result<&'a str, VerifyError> {
        let d = self.described;
        let value = single_header(headers, &d.header)?;
        let token = (value.strip_prefix(d.prefix.as_str())).ok_or(VerifyError::SignatureInvalid)?;
        Ok(token.trim())
    }

    /// Whether any of `signatures` signs `parts`, under the route's secrets
    /// or under `keys`.
    fn signed(
        &self,
        keys: &[Vec<u8>],
        parts: &[&[u8]],
        signatures: &[Vec<u8>],
    ) -> Result<(), VerifyError> {
        match self.described.signer {
            Signer::Hmac(algorithm) => {
                return hmac_verdict(algorithm, &self.secrets, parts, signatures)
            }
            Signer::Token => return token_verdict(signatures, &self.secrets),
            _ => {}
        }
        let message = parts.concat();
        let algorithms = algorithms(self.described.signer);
        let verified = signatures.iter().any(|signature| {
            keys.iter().any(|key| {
                (algorithms.iter()).any(|algorithm| {
                    let key = UnparsedPublicKey::new(*algorithm, key);
                    key.verify(&message, signature).is_ok()
                })
            })
        });
        verified.then_some(()).ok_or(VerifyError::SignatureInvalid)
    }

    /// A JWT's: its `alg`, its signature, its claims, then its time.
    fn verify_jwt(
        &self,
        keys: &[Vec<u8>],
        line: RequestLine<'_>,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Result<(), VerifyError> {
        let d = self.described;
        let jwt = d.jwt.as_ref().expect("a JWT scheme");
        let read = jwt.read(self.token(headers)?)?;
        self.signed(keys, &[read.signed], std::slice::from_ref(&read.signature))?;
        let url = (jwt.url_digest.is_some())
            .then(|| line.url(self.public_url.as_deref().unwrap_or_default()));
        jwt.check(&read, body, url.as_deref(), now, self.tolerance)?;
        match &d.timestamp {
            Some((Stamp::Claim(name), _)) => {
                let stamp = read.stamp(name).ok_or(VerifyError::SignatureInvalid)?;
                check_timestamp(&stamp, now, self.tolerance)
            }
            _ => Ok(()),
        }
    }

    /// The whole check, under `keys` for a public-key signer.
    fn verify_with(
        &self,
        keys: &[Vec<u8>],
        line: RequestLine<'_>,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Result<(), VerifyError> {
        let d = self.described;
        if d.jwt.is_some() {
            return self.verify_jwt(keys, line, headers, body, now);
        }
        let read = d.read(single_header(headers, &d.header)?)?;
        let timestamp = match &d.timestamp {
            None => None,
            Some((Stamp::Header(name), unit)) => Some((single_header(headers, name)?, *unit)),
            Some((Stamp::Claim(_), _)) => unreachable!("only a JWT has claims"),
            Some((_, unit)) => Some((read.timestamp.ok_or(VerifyError::SignatureInvalid)?, *unit)),
        };
        let url = (d.signed.contains(&Piece::Url))
            .then(|| line.url(self.public_url.as_deref().unwrap_or_default()));
        let crc = (d.signed.contains(&Piece::Crc32Body)).then(|| crc32fast::hash(body).to_string());
        let mut parts: Vec<&[u8]> = Vec::with_capacity(d.signed.len());
        for piece in &d.signed {
            parts.push(match piece {
                Piece::Body => body,
                Piece::Header(name) => single_header(headers, name)?.as_bytes(),
                Piece::Url => url.as_deref().unwrap_or_default().as_bytes(),
                Piece::Timestamp => timestamp.map_or(&[][..], |(text, _)| text.as_bytes()),
                Piece::Crc32Body => crc.as_deref().unwrap_or_default().as_bytes(),
                Piece::Param(name) => (self.params.get(name))
                    .ok_or(VerifyError::SignatureInvalid)?
                    .as_bytes(),
                Piece::Literal(text) => text.as_bytes(),
            });
        }
        // A CRC handshake signs any challenge for anyone: content it could
        // have signed is never a delivery (`challenge.rs`).
        let crc = (d.challenge.as_ref()).is_some_and(|challenge| challenge.signs());
        if crc && could_be_challenged(&parts) {
            tracing::warn!("a delivery whose signed content is a possible handshake challenge; refused (docs/reference/senders.md, \"Handshakes\")");
            return Err(VerifyError::SignatureInvalid);
        }
        self.signed(keys, &parts, &read.signatures)?;
        match timestamp {
            None => Ok(()),
            Some((text, Unit::Seconds)) => check_timestamp(text, now, self.tolerance),
            Some((text, Unit::Millis)) => {
                let millis = text.parse().map_err(|_| VerifyError::SignatureInvalid)?;
                check_timestamp_ms(millis, now, self.tolerance)
            }
            Some((text, Unit::Rfc3339)) => {
                let millis = rfc3339_ms(text).map_err(|_| VerifyError::SignatureInvalid)?;
                check_timestamp_ms(millis, now, self.tolerance)
            }
        }
    }
}

impl Verify for DescribedVerifier {
    fn verify(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<(), VerifyError> {
        self.verify_line(RequestLine::POST, headers, body, now)
    }

    fn verify_line(
        &self,
        line: RequestLine<'_>,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Result<(), VerifyError> {
        let keys = self.keys_now(headers)?;
        self.verify_with(&keys, line, headers, body, now)
    }

    /// A scheme whose key is fetched: the key's URL checked against the
    /// pinned hosts, the key fetched (or kept from before), then verified.
    fn fetching<'a>(
        &'a self,
        line: RequestLine<'a>,
        headers: &'a HeaderMap,
        body: &'a [u8],
        now: SystemTime,
    ) -> Option<BoxFuture<'a, Result<Option<Handshake>, VerifyError>>> {
        let fetcher = self.fetcher.as_ref()?;
        Some(Box::pin(async move {
            let url = self.key_url(fetcher, headers)?;
            let document = fetcher.document(&url).await?;
            let keys = self.keys_in(&document).map_err(|why| {
                tracing::warn!(url = %url, "the sender's key is unusable: {why}");
                fetcher.forget(&url);
                VerifyError::SenderUnreachable
            })?;
            self.verify_with(&keys, line, headers, body, now)?;
            Ok(self.handshake(headers, body))
        }))
    }

    fn challenge(
        &self,
        line: RequestLine<'_>,
        headers: &HeaderMap,
    ) -> Option<Result<Handshake, VerifyError>> {
        let challenge = (self.described.challenge.as_ref()).filter(|c| c.before_verification)?;
        let token = self.handshake_token.as_ref();
        challenge.answer(line, headers, &[], &self.secrets, token)
    }

    fn handshake(&self, headers: &HeaderMap, body: &[u8]) -> Option<Handshake> {
        let challenge = (self.described.challenge.as_ref()).filter(|c| !c.before_verification)?;
        let answer = challenge.answer(RequestLine::POST, headers, body, &self.secrets, None);
        answer?.ok()
    }

    fn covers(&self, _: &HeaderMap, name: &HeaderName) -> bool {
        self.described.signed_headers().any(|signed| signed == name)
    }

    fn signature_header(&self) -> Option<&HeaderName> {
        Some(&self.described.header)
    }
}
