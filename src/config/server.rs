//! `[server]` and `[admin]`: the listeners, request limits, TLS and the
//! admin token.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::locate::KeyPath;
use super::raw::{RawAdmin, RawServer, RawTelemetry, RawTls};
use super::settings::{
    AdminSettings, RequestLimits, ServerSettings, TelemetrySettings, TlsSettings,
};
use super::validate::Validator;
use crate::cidr::Cidr;
use crate::secret::Secret;

const DEFAULT_MAX_BODY_BYTES: u64 = 1024 * 1024;
const DEFAULT_MAX_CONNECTIONS: u64 = 10_000;

/// Words that mark a shipped example value, never a real admin token.
const PLACEHOLDERS: [&str; 6] = [
    "replace",
    "change-me",
    "changeme",
    "change_me",
    "placeholder",
    "example",
];

impl Validator<'_> {
    pub(super) fn server(
        &mut self,
        at: &KeyPath,
        raw: RawServer,
    ) -> (
        ServerSettings,
        RequestLimits,
        Vec<Cidr>,
        Option<TlsSettings>,
    ) {
        let tls = raw
            .tls
            .as_ref()
            .and_then(|tls| self.tls(&at.key("tls"), tls));
        let limits = RequestLimits {
            max_body_bytes: self.size(
                &at.key("max_body_bytes"),
                raw.max_body_bytes,
                DEFAULT_MAX_BODY_BYTES,
                1 << 30,
            ),
            body_read_timeout: self.duration(
                &at.key("body_read_timeout"),
                raw.body_read_timeout.as_ref(),
                Duration::from_secs(30),
            ),
        };
        let server = ServerSettings {
            tls: tls.is_some(),
            listen: self.addr(&at.key("listen"), &raw.listen),
            header_read_timeout: self.duration(
                &at.key("header_read_timeout"),
                raw.header_read_timeout.as_ref(),
                Duration::from_secs(10),
            ),
            shutdown_grace: self.duration(
                &at.key("shutdown_grace"),
                raw.shutdown_grace.as_ref(),
                Duration::from_secs(30),
            ),
            drain_delay: self.duration_or_zero(
                &at.key("drain_delay"),
                raw.drain_delay.as_ref(),
                Duration::ZERO,
            ),
            watch: raw.watch.unwrap_or(true),
            idle_timeout: self.duration(
                &at.key("idle_timeout"),
                raw.idle_timeout.as_ref(),
                Duration::from_secs(60),
            ),
            max_connections: self.size(
                &at.key("max_connections"),
                raw.max_connections,
                DEFAULT_MAX_CONNECTIONS,
                1 << 20,
            ),
        };
        let trusted_proxies = self.cidrs(
            &at.key("trusted_proxies"),
            raw.trusted_proxies.as_deref().unwrap_or_default(),
        );
        if trusted_proxies.iter().any(|range| range.is_everything()) {
            self.warn(format!(
                "{}: a /0 range trusts every peer's X-Forwarded-For, so any sender can claim \
                 any address and allow_from no longer admits by address; list your proxies",
                at.key("trusted_proxies")
            ));
        }
        (server, limits, trusted_proxies, tls)
    }

    /// `[server.tls]`: the certificate and key, read and checked.
    fn tls(&mut self, at: &KeyPath, tls: &RawTls) -> Option<TlsSettings> {
        let cert = PathBuf::from(self.string(&at.key("cert"), &tls.cert)?);
        let key = PathBuf::from(self.string(&at.key("key"), &tls.key)?);
        self.read_file(&cert);
        self.read_file(&key);
        match crate::tls::server_config(&cert, &key) {
            Ok(config) => Some(TlsSettings {
                not_after: crate::tls::leaf_not_after(&cert),
                cert,
                key,
                config,
            }),
            Err(message) => {
                self.fail(at, message);
                None
            }
        }
    }

    /// Whether `admin` and `server` would bind the same port on overlapping
    /// addresses (`0.0.0.0:P` covers `127.0.0.1:P`): a bind error at
    /// start-up that `check` should report instead.
    pub(super) fn listeners_collide(server: SocketAddr, admin: SocketAddr) -> bool {
        admin.port() == server.port()
            && admin.port() != 0
            && (admin.ip() == server.ip()
                || admin.ip().is_unspecified()
                || server.ip().is_unspecified())
    }

    /// `[telemetry]`: an `http://` OTLP endpoint (a collector or agent next
    /// to the gateway; the exporter speaks no TLS), `/v1/traces` added when
    /// it names no path.
    pub(super) fn telemetry(&mut self, at: &KeyPath, raw: RawTelemetry) -> TelemetrySettings {
        let fallback = http::Uri::from_static("http://127.0.0.1:4318/v1/traces");
        let endpoint_at = at.key("otlp_endpoint");
        let otlp_endpoint = match self.string(&endpoint_at, &raw.otlp_endpoint) {
            None => fallback,
            Some(text) => match text.parse::<http::Uri>() {
                Ok(uri) if uri.scheme_str() == Some("http") && uri.authority().is_some() => {
                    if matches!(uri.path(), "" | "/") {
                        format!("{}/v1/traces", text.trim_end_matches('/'))
                            .parse()
                            .unwrap_or(fallback)
                    } else {
                        uri
                    }
                }
                _ => {
                    self.fail(
                        &endpoint_at,
                        format!(
                            "{text:?} must be an http:// URL of an OTLP collector or agent \
                             (e.g. \"http://127.0.0.1:4318\"); https is not supported"
                        ),
                    );
                    fallback
                }
            },
        };
        let sample_ratio = raw.sample_ratio.unwrap_or(1.0);
        if !(0.0..=1.0).contains(&sample_ratio) {
            self.fail(&at.key("sample_ratio"), "must be between 0 and 1");
        }
        TelemetrySettings {
            otlp_endpoint,
            service_name: raw
                .service_name
                .and_then(|name| self.string(&at.key("service_name"), &name))
                .unwrap_or_else(|| "hookgate".to_owned()),
            sample_ratio: sample_ratio.clamp(0.0, 1.0),
            record_keys: raw.record_keys.unwrap_or(false),
        }
    }

    pub(super) fn admin(&mut self, at: &KeyPath, raw: RawAdmin) -> AdminSettings {
        let token =
            (raw.token.as_ref()).and_then(|token| self.admin_token(&at.key("token"), token));
        let read_token = (raw.read_token.as_ref())
            .and_then(|token| self.admin_token(&at.key("read_token"), token));
        if let Some(read_token) = &read_token {
            if token.is_none() {
                self.fail(
                    &at.key("read_token"),
                    "read_token needs token: the read-only login is a second token beside the admin token",
                );
            } else if token.as_ref().is_some_and(|token| token == read_token) {
                self.fail(
                    &at.key("read_token"),
                    "read_token must differ from token (it may read, not change)",
                );
            }
        }
        AdminSettings {
            listen: self.addr(&at.key("listen"), &raw.listen),
            token,
            read_token,
        }
    }

    /// An admin token: at least 16 characters, no shipped placeholder.
    fn admin_token(&mut self, at: &KeyPath, token: &str) -> Option<Secret> {
        let value = self.string(at, token)?;
        if value.len() < 16 {
            self.fail(at, "an admin token must be at least 16 characters");
            return None;
        }
        let lower = value.to_ascii_lowercase();
        if let Some(word) = PLACEHOLDERS.iter().find(|word| lower.contains(**word)) {
            self.fail(
                at,
                format!(
                    "the admin token looks like a placeholder (it contains {word:?}): \
                     set a random one, e.g. `openssl rand -hex 32`"
                ),
            );
            return None;
        }
        Some(Secret::new(value))
    }
}
