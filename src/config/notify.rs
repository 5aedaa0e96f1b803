//! `[[notify]]` (docs/guide/notifications.md, "Notifications"): each target validated into a
//! [`NotifyTarget`] whose delivery is a route of its own — built by the
//! same validator as a `[[routes]]` entry, from a route table this file
//! writes (async, no verification, the target's URL as its upstream) —
//! then named `@notify/NAME`, a name no route can have, so no sender
//! reaches it and the workers deliver it as any route's.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use super::destinations::delivery_name;
use super::locate::KeyPath;
use super::raw::{RawNotify, RawRoute};
use super::route::{DestinationOf, RouteConfig};
use super::settings::{NoticeKind, NotifyKind, NotifyTarget};
use super::validate::Validator;
use crate::secret::Secret;

/// PagerDuty's Events API v2.
const PAGERDUTY_EVENTS: &str = "https://events.pagerduty.com/v2/enqueue";

/// The pseudo-route every notification delivery belongs to.
pub const NOTIFY: &str = "@notify";

impl Validator<'_> {
    pub(super) fn notify(
        &mut self,
        at: &KeyPath,
        raw: Vec<RawNotify>,
        routes: &[Arc<RouteConfig>],
    ) -> Vec<Arc<NotifyTarget>> {
        let mut names = HashSet::new();
        let mut targets = Vec::with_capacity(raw.len());
        for (i, raw) in raw.into_iter().enumerate() {
            let at = at.index(i);
            let target = self.target(&at, raw, routes);
            if !names.insert(target.name.clone()) {
                self.fail(
                    &at.key("name"),
                    format!("notify name {:?} is used twice", target.name),
                );
            }
            targets.push(Arc::new(target));
        }
        targets
    }

    fn target(
        &mut self,
        at: &KeyPath,
        raw: RawNotify,
        routes: &[Arc<RouteConfig>],
    ) -> NotifyTarget {
        let name = self.identifier(&at.key("name"), &raw.name);
        let kind = self.choice(
            &at.key("kind"),
            Some(&raw.kind),
            &[
                ("slack", NotifyKind::Slack),
                ("webhook", NotifyKind::Webhook),
                ("pagerduty", NotifyKind::PagerDuty),
            ],
            NotifyKind::Webhook,
        );
        let url = match (&raw.url, kind) {
            (Some(url), _) => url.clone(),
            (None, NotifyKind::PagerDuty) => PAGERDUTY_EVENTS.to_owned(),
            (None, _) => {
                self.fail(at, "a slack or webhook target needs `url`");
                "https://invalid.example/".to_owned()
            }
        };
        let on = self.notice_kinds(at, raw.on.as_deref());
        if let Some(names) = &raw.routes {
            for (i, route) in names.iter().enumerate() {
                if !routes.iter().any(|r| &r.name == route) {
                    self.fail(
                        &at.key("routes").index(i),
                        format!("no route is named {route:?}"),
                    );
                }
            }
        }
        let signs = self.notify_secret(at, raw.secret.as_ref(), kind);
        let routing_key = self.routing_key(at, raw.routing_key.as_ref(), kind);
        let console_url = (raw.console_url.as_ref())
            .and_then(|url| self.string(&at.key("console_url"), url))
            .map(|url| url.trim_end_matches('/').to_owned());
        let group_within = self.duration(
            &at.key("group_within"),
            raw.group_within.as_ref(),
            Duration::from_secs(10),
        );
        let mut delivery = self.route(at, delivery_route(&url, &raw));
        delivery.name = delivery_name(NOTIFY, &name);
        delivery.keying.scope = delivery.name.clone();
        delivery.destination_of = Some(DestinationOf {
            route: NOTIFY.to_owned(),
            destination: name.clone(),
        });
        delivery.signs = signs;
        NotifyTarget {
            name,
            kind,
            on,
            routes: raw.routes,
            routing_key,
            console_url,
            group_within,
            delivery: Arc::new(delivery),
        }
    }

    /// `on`: the notices a target hears of (all of them by default).
    fn notice_kinds(&mut self, at: &KeyPath, on: Option<&[String]>) -> Vec<NoticeKind> {
        match on {
            None => NoticeKind::ALL.to_vec(),
            Some(list) => (list.iter().enumerate())
                .filter_map(|(i, text)| {
                    let found = NoticeKind::ALL.into_iter().find(|k| k.as_str() == text);
                    if found.is_none() {
                        let names: Vec<&str> = NoticeKind::ALL.iter().map(|k| k.as_str()).collect();
                        self.fail(
                            &at.key("on").index(i),
                            format!("{text:?} is not one of {}", names.join(", ")),
                        );
                    }
                    found
                })
                .collect(),
        }
    }

    /// `secret`: a webhook target's Standard Webhooks key (it must have one;
    /// no other kind is signed).
    fn notify_secret(
        &mut self,
        at: &KeyPath,
        secret: Option<&String>,
        kind: NotifyKind,
    ) -> Option<Arc<Secret>> {
        match (secret, kind) {
            (Some(secret), NotifyKind::Webhook) => {
                let text = self.string(&at.key("secret"), secret).unwrap_or_default();
                match crate::verify::decode_secret(&Secret::new(text), 24) {
                    Ok(key) => Some(Arc::new(key)),
                    Err(message) => {
                        self.fail(&at.key("secret"), message);
                        None
                    }
                }
            }
            (None, NotifyKind::Webhook) => {
                self.fail(at, "a webhook target needs `secret` (whsec_…): every message is signed as Standard Webhooks");
                None
            }
            (Some(_), _) => {
                self.fail(&at.key("secret"), "only a webhook target is signed");
                None
            }
            (None, _) => None,
        }
    }

    /// `routing_key`: a PagerDuty target's integration key (it must have one;
    /// no other kind has one).
    fn routing_key(
        &mut self,
        at: &KeyPath,
        key: Option<&String>,
        kind: NotifyKind,
    ) -> Option<Secret> {
        match (key, kind) {
            (Some(key), NotifyKind::PagerDuty) => {
                self.string(&at.key("routing_key"), key).map(Secret::new)
            }
            (None, NotifyKind::PagerDuty) => {
                self.fail(
                    at,
                    "a pagerduty target needs `routing_key`, its integration's key",
                );
                None
            }
            (Some(_), _) => {
                self.fail(
                    &at.key("routing_key"),
                    "only a pagerduty target has a routing_key",
                );
                None
            }
            (None, _) => None,
        }
    }
}

/// The route a target is delivered as: async, verifying nothing (hookgate
/// writes its messages), at most `rate` messages (one a second unless
/// said), retried for a day.
fn delivery_route(url: &str, raw: &RawNotify) -> RawRoute {
    let mut table = toml::Table::new();
    let mut set = |key: &str, value: toml::Value| {
        table.insert(key.to_owned(), value);
    };
    set("name", "notify".into());
    set("path", "/.hookgate/notify".into());
    set("upstream", url.into());
    set("delivery", "async".into());
    set("key", toml::Value::Array(vec!["header:webhook-id".into()]));
    set("idempotency_header", "".into());
    set("max_attempts", 0.into());
    set("max_age", "24h".into());
    set("retention", "2d".into());
    set(
        "upstream_rate",
        raw.rate.clone().unwrap_or_else(|| "1/s".into()).into(),
    );
    if let Some(ca) = &raw.upstream_ca {
        set("upstream_ca", ca.clone().into());
    }
    let mut verify = toml::Table::new();
    verify.insert("scheme".into(), "none".into());
    set("verify", toml::Value::Table(verify));
    toml::Value::Table(table)
        .try_into()
        .expect("the notify route table is a valid route")
}
