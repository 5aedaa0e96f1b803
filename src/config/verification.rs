//! A route's `[routes.verify]` (and its `public_url`), validated and built
//! into its verifier by the scheme's [`Profile`].

use http::{HeaderName, Uri};
use rustls::pki_types::CertificateDer;

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
        let params = self.params(at, scheme, &raw);
        let spec = VerifySpec {
            params,
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
        // A described sender whose key is fetched may list its keys
        // instead (then nothing is fetched); AWS SNS lists topics.
        let keys_optional = scheme.fetches_key && scheme.described.is_some();
        match (
            scheme == none() || scheme.fetches_key && !keys_optional,
            raw.secrets.is_empty() && !keys_optional,
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
    /// may narrow the hosts or add a CA, and AWS SNS needs the topics; any
    /// other scheme takes none of them.
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
        if let Some(key_url) = scheme.described.and_then(|d| d.key_url.as_ref()) {
            if raw.topics.is_some() {
                let why = format!("scheme {:?} has no topics; remove `topics`", scheme.name);
                self.fail(&at.key("topics"), why);
            }
            let pinned = key_url.hosts.clone();
            let hosts = self.cert_hosts(at, raw, &pinned, scheme.name);
            let roots = self.cert_roots(at, raw);
            return (Some(FetchSpec { hosts, roots }), Vec::new());
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
        let hosts = self.cert_hosts(at, raw, &sns_hosts(), scheme.name);
        let roots = self.cert_roots(at, raw);
        (Some(FetchSpec { hosts, roots }), topics)
    }

    /// `params`: exactly the ones the scheme's signed content names.
    fn params(
        &mut self,
        at: &KeyPath,
        scheme: &Profile,
        raw: &RawVerify,
    ) -> std::collections::BTreeMap<String, String> {
        let at = at.key("params");
        let wanted: Vec<&str> = (scheme.described.iter()).flat_map(|d| d.params()).collect();
        let given = raw.params.clone().unwrap_or_default();
        for name in wanted.iter().filter(|name| !given.contains_key(**name)) {
            let why = format!(
                "scheme {:?} signs this route's {name}: params = {{ {name} = \"…\" }}",
                scheme.name
            );
            self.fail(&at, why);
        }
        (given.into_iter())
            .filter_map(|(name, text)| {
                if !wanted.contains(&name.as_str()) {
                    let why = format!("scheme {:?} takes no param {name:?}", scheme.name);
                    self.fail(&at.key(&name), why);
                    return None;
                }
                let value = self.string(&at.key(&name), &text)?;
                Some((name, value))
            })
            .collect()
    }

    /// `cert_hosts`: the hosts keys are fetched from, `pinned` (the
    /// sender's own) unless the route lists others — with a warning for
    /// each that is not the sender's.
    fn cert_hosts(
        &mut self,
        at: &KeyPath,
        raw: &RawVerify,
        pinned: &[HostPattern],
        scheme: &str,
    ) -> Vec<HostPattern> {
        let Some(list) = &raw.cert_hosts else {
            return pinned.to_vec();
        };
        (list.iter().enumerate())
            .filter_map(|(i, text)| {
                let at = at.key("cert_hosts").index(i);
                let text = self.string(&at, text)?;
                let host = (HostPattern::parse(&text))
                    .map_err(|message| self.fail(&at, message))
                    .ok()?;
                if !pinned.contains(&host) {
                    self.warn(format!(
                        "{at}: keys are fetched from {text:?} too; {scheme:?} names only its own \
                         hosts, so list another only for a test or a host you run"
                    ));
                }
                Some(host)
            })
            .collect()
    }

    /// `cert_ca`: roots trusted for the fetch beyond the Mozilla ones.
    fn cert_roots(&mut self, at: &KeyPath, raw: &RawVerify) -> Vec<CertificateDer<'static>> {
        match &raw.cert_ca {
            Some(path) => self
                .upstream_ca(&at.key("cert_ca"), path)
                .map(|ca| ca.certs)
                .unwrap_or_default(),
            None => Vec::new(),
        }
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
        params: Default::default(),
    }
}
