//! A route's `[routes.verify]` (and its `public_url`), validated and built
//! into its verifier by the scheme's [`Profile`].

use http::{HeaderName, Uri};

use super::locate::KeyPath;
use super::raw::RawVerify;
use super::validate::Validator;
use crate::secret::Secret;
use crate::verify::{
    sns_hosts, Algorithm, Encoding, FetchSpec, HmacOptions, HostPattern, Profile, Verifier,
    VerifySpec, DEFAULT_TOLERANCE, MIN_SECRET_BYTES, PROFILES,
};

impl Validator<'_> {
    /// `public_url`: an absolute https:// (or http://) URL without a query
    /// or fragment; the request's own query is appended when it has one.
    pub(super) fn public_url(&mut self, at: &KeyPath, raw: &str) -> Option<String> {
        let text = self.string(at, raw)?;
        let valid = text.parse::<Uri>().is_ok_and(|uri| {
            matches!(uri.scheme_str(), Some("http" | "https"))
                && uri.authority().is_some()
                && uri.query().is_none()
                && !text.contains('#')
        });
        if !valid {
            self.fail(
                at,
                format!("{text:?} must be the absolute URL the sender posts to, without query (e.g. \"https://hooks.example.com/twilio\")"),
            );
        }
        // Even when refused: the config is invalid anyway, and the scheme
        // is not told twice that the URL is missing.
        Some(text)
    }

    /// The route's scheme and, when its settings are valid, its verifier.
    pub(super) fn verify(
        &mut self,
        at: &KeyPath,
        raw: RawVerify,
        public_url: Option<String>,
    ) -> (&'static Profile, Option<Verifier>, Option<Secret>) {
        let scheme_text = self
            .string(&at.key("scheme"), &raw.scheme)
            .unwrap_or_default();
        let own = self.schemes.iter().copied().find(|p| p.name == scheme_text);
        let Some(scheme) = own.or_else(|| Profile::named(&scheme_text)) else {
            let names: Vec<String> = (PROFILES.iter().chain(&self.schemes))
                .map(|p| format!("{:?}", p.name))
                .collect();
            self.fail(
                &at.key("scheme"),
                format!("{scheme_text:?} is not one of {}", names.join(", ")),
            );
            return (none(), None, None);
        };
        let tolerance = match &raw.tolerance {
            Some(text) => {
                if !scheme.timestamped {
                    self.fail(
                        &at.key("tolerance"),
                        format!("scheme {scheme_text:?} has no timestamp to check"),
                    );
                }
                self.duration(&at.key("tolerance"), Some(text), DEFAULT_TOLERANCE)
            }
            None => DEFAULT_TOLERANCE,
        };
        let hmac = if scheme.name == "hmac" {
            Some(self.hmac_options(at, &raw))
        } else {
            for (name, present) in [
                ("header", raw.header.is_some()),
                ("algorithm", raw.algorithm.is_some()),
                ("encoding", raw.encoding.is_some()),
                ("prefix", raw.prefix.is_some()),
            ] {
                if present {
                    self.fail(
                        &at.key(name),
                        format!("`{name}` only applies to scheme \"hmac\""),
                    );
                }
            }
            None
        };
        let (secrets, min_secret_bytes) = self.secrets(at, scheme, &raw);
        let (fetch, topics) = self.fetched(at, scheme, &raw);
        let handshake_token = self.handshake_token(at, scheme, raw.handshake_token.as_deref());
        let first_secret = secrets.first().cloned();
        let spec = VerifySpec {
            secrets,
            tolerance,
            hmac,
            public_url,
            min_secret_bytes,
            handshake_token,
            fetch,
            topics,
        };
        match scheme.verifier(spec, raw.tolerance.is_some()) {
            Ok(verifier) => (scheme, Some(verifier), first_secret),
            Err(message) => {
                self.fail(&at.key("secrets"), message);
                (scheme, None, first_secret)
            }
        }
    }

    /// `secrets`, each at least `min_secret_bytes` long, and whether the
    /// scheme takes any.
    fn secrets(&mut self, at: &KeyPath, scheme: &Profile, raw: &RawVerify) -> (Vec<Secret>, usize) {
        let min_secret_bytes = self.size(
            &at.key("min_secret_bytes"),
            raw.min_secret_bytes,
            MIN_SECRET_BYTES as u64,
            1024,
        );
        if min_secret_bytes < MIN_SECRET_BYTES {
            self.warn(format!(
                "{}: secrets of {min_secret_bytes} bytes are accepted, below the {MIN_SECRET_BYTES} \
                 hookgate asks for; a short secret can be guessed — rotate to a long one when the \
                 sender allows",
                at.key("min_secret_bytes")
            ));
        }
        let secrets: Vec<Secret> = raw
            .secrets
            .iter()
            .enumerate()
            .filter_map(|(i, text)| {
                let value = self.string(&at.key("secrets").index(i), text)?;
                if value.is_empty() {
                    self.fail(&at.key("secrets").index(i), "secret is empty");
                    return None;
                }
                if value.len() < min_secret_bytes {
                    self.fail(
                        &at.key("secrets").index(i),
                        format!(
                            "secret is {} bytes; at least {min_secret_bytes} are required (use the secret your sender generated, or `openssl rand -hex 32`; a sender whose existing secret is shorter: lower min_secret_bytes)",
                            value.len()
                        ),
                    );
                    return None;
                }
                Some(Secret::new(value))
            })
            .collect();
        match (
            scheme == none() || scheme.fetches_key,
            raw.secrets.is_empty(),
        ) {
            (true, false) => self.fail(
                &at.key("secrets"),
                format!(
                    "scheme {:?} has no secret; remove the secrets{}",
                    scheme.name,
                    if scheme.fetches_key {
                        " and list the topics it accepts"
                    } else {
                        " or pick a scheme"
                    }
                ),
            ),
            (false, true) => self.fail(&at.key("secrets"), "list at least one secret"),
            _ => {}
        }
        (secrets, min_secret_bytes)
    }

    /// `topics`, `cert_hosts` and `cert_ca`: a scheme whose key is fetched
    /// (AWS SNS) needs the topics and may narrow the hosts or add a CA;
    /// any other scheme takes none of them.
    fn fetched(
        &mut self,
        at: &KeyPath,
        scheme: &Profile,
        raw: &RawVerify,
    ) -> (Option<FetchSpec>, Vec<String>) {
        if !scheme.fetches_key {
            for (name, present) in [
                ("topics", raw.topics.is_some()),
                ("cert_hosts", raw.cert_hosts.is_some()),
                ("cert_ca", raw.cert_ca.is_some()),
            ] {
                if present {
                    let why = format!("scheme {:?} fetches no key; remove `{name}`", scheme.name);
                    self.fail(&at.key(name), why);
                }
            }
            return (None, Vec::new());
        }
        let topics: Vec<String> = (raw.topics.iter().flatten().enumerate())
            .filter_map(|(i, text)| self.string(&at.key("topics").index(i), text))
            .collect();
        if topics.is_empty() {
            self.fail(
                &at.key("topics"),
                format!(
                    "scheme {:?} proves only that the message came from SNS, and any AWS account \
                     can subscribe this URL to its topic: list the topic ARNs this route accepts, \
                     topics = [\"arn:aws:sns:REGION:ACCOUNT:NAME\"]",
                    scheme.name
                ),
            );
        }
        let hosts = match &raw.cert_hosts {
            None => sns_hosts(),
            Some(list) => (list.iter().enumerate())
                .filter_map(|(i, text)| {
                    let at = at.key("cert_hosts").index(i);
                    let text = self.string(&at, text)?;
                    let host = (HostPattern::parse(&text))
                        .map_err(|message| self.fail(&at, message))
                        .ok()?;
                    if !sns_hosts().contains(&host) {
                        self.warn(format!(
                            "{at}: signing certificates are fetched from {text:?} too; SNS names \
                             only its own hosts (sns.<region>.amazonaws.com), so list another only \
                             for a test or a host you run"
                        ));
                    }
                    Some(host)
                })
                .collect(),
        };
        let roots = match &raw.cert_ca {
            Some(path) => self
                .upstream_ca(&at.key("cert_ca"), path)
                .map(|ca| ca.certs)
                .unwrap_or_default(),
            None => Vec::new(),
        };
        (Some(FetchSpec { hosts, roots }), topics)
    }

    /// `handshake_token`: required by a scheme whose handshake carries a
    /// token (the one set at the sender), refused by any other.
    fn handshake_token(
        &mut self,
        at: &KeyPath,
        scheme: &Profile,
        raw: Option<&str>,
    ) -> Option<Secret> {
        let at = at.key("handshake_token");
        let asked = scheme
            .challenge()
            .and_then(|challenge| challenge.token.as_deref());
        match (asked, raw) {
            (Some(param), None) => {
                self.fail(
                    &at,
                    format!(
                        "scheme {:?} answers its handshake only when `{param}` is the token set at the \
                         sender: handshake_token = \"${{…}}\"",
                        scheme.name
                    ),
                );
                None
            }
            (None, Some(_)) => {
                let why = format!("scheme {:?} has no handshake token", scheme.name);
                self.fail(&at, why);
                None
            }
            (_, Some(text)) => {
                let token = self.string(&at, text)?;
                if token.is_empty() {
                    self.fail(&at, "the token is empty");
                    return None;
                }
                Some(Secret::new(token))
            }
            (None, None) => None,
        }
    }

    /// The operator-defined header of `scheme = "hmac"`.
    fn hmac_options(&mut self, at: &KeyPath, raw: &RawVerify) -> HmacOptions {
        let header = match &raw.header {
            Some(text) => {
                let text = self.string(&at.key("header"), text).unwrap_or_default();
                HeaderName::from_bytes(text.as_bytes()).unwrap_or_else(|_| {
                    self.fail(
                        &at.key("header"),
                        format!("{text:?} is not a valid header name"),
                    );
                    HeaderName::from_static("x-signature")
                })
            }
            None => {
                self.fail(at, "scheme \"hmac\" needs `header = \"X-Signature\"`");
                HeaderName::from_static("x-signature")
            }
        };
        let prefix = match &raw.prefix {
            Some(text) => self.string(&at.key("prefix"), text).unwrap_or_default(),
            None => String::new(),
        };
        HmacOptions {
            header,
            algorithm: self.choice(
                &at.key("algorithm"),
                raw.algorithm.as_ref(),
                &[("sha256", Algorithm::Sha256), ("sha512", Algorithm::Sha512)],
                Algorithm::Sha256,
            ),
            encoding: self.choice(
                &at.key("encoding"),
                raw.encoding.as_ref(),
                &[("hex", Encoding::Hex), ("base64", Encoding::Base64)],
                Encoding::Hex,
            ),
            prefix,
        }
    }
}

pub(super) fn none() -> &'static Profile {
    Profile::named("none").expect("\"none\" is a listed scheme")
}

/// What a route whose verify settings are broken carries while validation
/// goes on to report everything: it is never served.
pub(super) fn placeholder() -> VerifySpec {
    VerifySpec {
        secrets: Vec::new(),
        tolerance: DEFAULT_TOLERANCE,
        hmac: None,
        public_url: None,
        min_secret_bytes: MIN_SECRET_BYTES,
        handshake_token: None,
        fetch: None,
        topics: vec![],
    }
}
