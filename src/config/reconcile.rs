//! `[routes.reconcile]`: which sender's API a route asks, on what
//! schedule and how far back, with which credentials (docs/guide/reconciliation.md,
//! "Reconciliation"). Checked here so a pass never meets a setting that
//! cannot work: the sender matches the route's scheme, the window fits
//! both the sender's retention and the route's own (an event completed
//! longer ago than `retention` is forgotten, and would be delivered again),
//! and the credentials are read now (and again at every reload).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use http::Uri;

use super::locate::KeyPath;
use super::raw::RawReconcile;
use super::validate::Validator;
use crate::clock::humanize;
use crate::secret::Secret;
use crate::sender_apis::{Recover, SenderApi, SENDERS};
use crate::verify::Profile;

/// How often a route is reconciled unless it says otherwise.
const DEFAULT_EVERY: Duration = Duration::from_secs(300);

/// A route's reconciliation with its sender's API.
#[derive(Debug)]
pub struct ReconcileSettings {
    pub sender: &'static SenderApi,
    /// Shown by `check`; the credentials themselves never are.
    pub credentials_file: PathBuf,
    pub credentials: Secret,
    pub every: Duration,
    pub lookback: Duration,
    /// Without a trailing `/`.
    pub api_base: String,
    /// GitHub's `repos/OWNER/REPO/hooks/ID` or `orgs/ORG/hooks/ID`.
    pub hook: Option<String>,
    /// The event types the sender's endpoint is subscribed to (Stripe's
    /// `enabled_events`, `*` at the end for a family); empty: all.
    pub types: Vec<String>,
    /// What a delivered event is signed with: the route's first secret.
    pub signing_secret: Option<Secret>,
}

/// What of the route a reconciliation is checked against.
pub(super) struct ForRoute {
    pub scheme: &'static Profile,
    pub retention: Duration,
    /// Whether the route keeps its scheme's default key.
    pub default_key: bool,
    pub first_secret: Option<Secret>,
}

impl Validator<'_> {
    pub(super) fn reconcile(
        &mut self,
        at: &KeyPath,
        raw: &RawReconcile,
        route: ForRoute,
    ) -> Option<Arc<ReconcileSettings>> {
        let name = self.string(&at.key("sender"), &raw.sender)?;
        let Some(sender) = SenderApi::named(&name) else {
            let names: Vec<String> = SENDERS.iter().map(|s| format!("{:?}", s.name)).collect();
            self.fail(
                &at.key("sender"),
                format!("{name:?} is not one of {}", names.join(", ")),
            );
            return None;
        };
        if route.scheme.name != sender.scheme {
            self.fail(
                &at.key("sender"),
                format!(
                    "sender {:?} reconciles routes of scheme {:?}; this route's is {:?}",
                    sender.name, sender.scheme, route.scheme.name
                ),
            );
        }
        if matches!(sender.recover, Recover::AskAgain { .. }) && !route.default_key {
            // What is asked again arrives under the sender's own key.
            self.fail(
                at,
                format!(
                    "reconciling with {} needs the route's default key ({}); remove `key`",
                    sender.name,
                    route.scheme.default_key.join(", ")
                ),
            );
        }
        let credentials_file = PathBuf::from(
            self.string(&at.key("credentials_file"), &raw.credentials_file)
                .unwrap_or_default(),
        );
        let credentials = self.credentials(&at.key("credentials_file"), &credentials_file);
        let every = self.duration(&at.key("every"), raw.every.as_ref(), DEFAULT_EVERY);
        let lookback = self.lookback(at, raw, sender, route.retention);
        let api_base = self.api_base(&at.key("api_base"), raw.api_base.as_deref(), sender);
        let hook = self.hook(&at.key("hook"), raw.hook.as_deref(), sender);
        let types = self.types(&at.key("types"), raw.types.as_deref(), sender);
        let signing_secret = match sender.recover {
            Recover::Deliver => route.first_secret,
            Recover::AskAgain { .. } => None,
        };
        Some(Arc::new(ReconcileSettings {
            sender,
            credentials_file,
            credentials: credentials?,
            every,
            lookback,
            api_base: api_base?,
            hook,
            types,
            signing_secret,
        }))
    }

    /// The token or key in `path`, trimmed; read at every load, so a
    /// reload picks up a rotated file. Never shown, not even in an error.
    fn credentials(&mut self, at: &KeyPath, path: &std::path::Path) -> Option<Secret> {
        if !path.is_absolute() {
            self.fail(at, format!("{} must be an absolute path", path.display()));
            return None;
        }
        self.read_file(path);
        match std::fs::read_to_string(path) {
            Ok(text) if text.trim().is_empty() => {
                self.fail(at, format!("{} is empty", path.display()));
                None
            }
            Ok(text) => Some(Secret::new(text.trim())),
            Err(error) => {
                self.fail(at, format!("cannot read {}: {error}", path.display()));
                None
            }
        }
    }

    fn lookback(
        &mut self,
        at: &KeyPath,
        raw: &RawReconcile,
        sender: &SenderApi,
        retention: Duration,
    ) -> Duration {
        let default = sender.default_lookback.min(retention);
        let lookback = self.duration(&at.key("lookback"), raw.lookback.as_ref(), default);
        if lookback > sender.retention {
            self.fail(
                &at.key("lookback"),
                format!(
                    "{}'s API lists {} back; lookback must be at most that",
                    sender.name,
                    humanize(sender.retention)
                ),
            );
        } else if lookback > retention {
            self.fail(
                &at.key("lookback"),
                format!(
                    "lookback must be at most the route's retention ({}): an event completed longer ago is forgotten, and would be delivered again",
                    humanize(retention)
                ),
            );
        }
        lookback
    }

    /// `api_base`: https, or http to this machine (a stand-in, a local
    /// proxy); credentials never cross a network in the clear.
    fn api_base(&mut self, at: &KeyPath, raw: Option<&str>, sender: &SenderApi) -> Option<String> {
        let text = match raw {
            Some(raw) => self.string(at, raw)?,
            None => sender.api_base.to_owned(),
        };
        let text = text.trim_end_matches('/').to_owned();
        let Ok(uri) = text.parse::<Uri>() else {
            self.fail(at, format!("{text:?} is not a URL"));
            return None;
        };
        let host = uri.host().unwrap_or_default();
        let loopback = matches!(host, "localhost" | "127.0.0.1" | "[::1]" | "::1");
        let fine = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => loopback,
            _ => false,
        };
        if !fine
            || uri.query().is_some()
            || uri.authority().is_none_or(|a| a.as_str().contains('@'))
        {
            self.fail(
                at,
                format!("{text:?} must be an https:// URL without user or query (http:// only to this machine)"),
            );
            return None;
        }
        Some(text)
    }

    /// GitHub's hook: `repos/OWNER/REPO/hooks/ID` or `orgs/ORG/hooks/ID`.
    fn hook(&mut self, at: &KeyPath, raw: Option<&str>, sender: &SenderApi) -> Option<String> {
        let text = match (raw, sender.needs_hook) {
            (None, false) => return None,
            (Some(_), false) => {
                self.fail(
                    at,
                    format!("{} lists no single hook; remove `hook`", sender.name),
                );
                return None;
            }
            (None, true) => {
                self.fail(
                    at,
                    format!(
                        "{} needs the hook to reconcile, like \"repos/OWNER/REPO/hooks/123\" or \"orgs/ORG/hooks/123\"",
                        sender.name
                    ),
                );
                return None;
            }
            (Some(raw), true) => self.string(at, raw)?,
        };
        let name = |part: &str| {
            !part.is_empty()
                && (part.bytes()).all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
                && part != "."
                && part != ".."
        };
        let id = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
        let parts: Vec<&str> = text.trim_matches('/').split('/').collect();
        let fine = match parts.as_slice() {
            ["repos", owner, repo, "hooks", hook] => name(owner) && name(repo) && id(hook),
            ["orgs", org, "hooks", hook] => name(org) && id(hook),
            _ => false,
        };
        if !fine {
            self.fail(
                at,
                format!("{text:?} is not \"repos/OWNER/REPO/hooks/ID\" or \"orgs/ORG/hooks/ID\""),
            );
            return None;
        }
        Some(parts.join("/"))
    }

    fn types(&mut self, at: &KeyPath, raw: Option<&[String]>, sender: &SenderApi) -> Vec<String> {
        let Some(raw) = raw else { return Vec::new() };
        if sender.list.kind.is_none() {
            self.fail(
                at,
                format!(
                    "{}'s listing has no event type; remove `types`",
                    sender.name
                ),
            );
            return Vec::new();
        }
        if raw.is_empty() {
            self.fail(at, "list at least one event type (leave types out for all)");
        }
        let mut types = Vec::new();
        for (i, text) in raw.iter().enumerate() {
            let Some(text) = self.string(&at.index(i), text) else {
                continue;
            };
            let stem = text.strip_suffix('*').unwrap_or(&text);
            let fine = !text.is_empty()
                && (stem.bytes()).all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
            if fine {
                types.push(text);
            } else {
                self.fail(
                    &at.index(i),
                    format!(
                        "{text:?} is not an event type like \"charge.succeeded\" or \"charge.*\""
                    ),
                );
            }
        }
        types
    }
}
