//! `[server]` and `[admin]`: the listeners, request limits, TLS and the
//! admin token.

use std::path::PathBuf;
use std::time::Duration;

use super::locate::KeyPath;
use super::raw::{RawAdmin, RawServer};
use super::settings::{AdminSettings, RequestLimits, ServerSettings, TlsSettings};
use super::validate::Validator;
use crate::cidr::Cidr;
use crate::secret::Secret;

const DEFAULT_MAX_BODY_BYTES: u64 = 1024 * 1024;
const DEFAULT_MAX_CONNECTIONS: u64 = 10_000;

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
        let tls = raw.tls.as_ref().and_then(|tls| {
            let at = at.key("tls");
            let cert = PathBuf::from(self.string(&at.key("cert"), &tls.cert)?);
            let key = PathBuf::from(self.string(&at.key("key"), &tls.key)?);
            match crate::tls::server_config(&cert, &key) {
                Ok(config) => Some(TlsSettings { cert, key, config }),
                Err(message) => {
                    self.fail(&at, message);
                    None
                }
            }
        });
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
        (server, limits, trusted_proxies, tls)
    }

    pub(super) fn admin(&mut self, at: &KeyPath, raw: RawAdmin) -> AdminSettings {
        let token = raw.token.as_ref().and_then(|token| {
            let value = self.string(&at.key("token"), token)?;
            if value.len() < 16 {
                self.fail(
                    &at.key("token"),
                    "the admin token must be at least 16 characters",
                );
                return None;
            }
            Some(Secret::new(value))
        });
        AdminSettings {
            listen: self.addr(&at.key("listen"), &raw.listen),
            token,
        }
    }
}
