//! One message of notices, as each kind of target reads it: Slack's Block
//! Kit, PagerDuty's Events API v2, or hookgate's own JSON for a webhook
//! (signed as Standard Webhooks when delivered, `upstream.rs`). Keys,
//! entities and upstream answers are the senders' and the upstreams'
//! words: escaped for Slack's markup, and cut to each vendor's limits.

use serde_json::{json, Value};

use super::Notice;
use crate::clock::rfc3339;
use crate::config::{delivery_name, NoticeKind, NotifyKind, NotifyTarget};

/// Slack takes at most 3,000 characters in a section's text; an upstream's
/// answer is cut well before.
const ERROR_CHARS: usize = 500;
/// PagerDuty's `summary` is at most 1,024 characters.
const SUMMARY_CHARS: usize = 1024;

/// The message body for `target` carrying `notices` under `key`.
pub(super) fn message(target: &NotifyTarget, notices: &[Notice], key: &str) -> Vec<u8> {
    let value = match target.kind {
        NotifyKind::Slack => slack(target, notices),
        NotifyKind::PagerDuty => pagerduty(target, notices, key),
        NotifyKind::Webhook => webhook(target, notices),
    };
    serde_json::to_vec(&value).expect("JSON values serialize")
}

/// A link that opens the notice's event (or its route) in the console.
fn link(target: &NotifyTarget, notice: &Notice) -> Option<String> {
    let console = target.console_url.as_deref()?;
    let delivery = match notice.destination.as_str() {
        "" => notice.route.clone(),
        destination => delivery_name(&notice.route, destination),
    };
    Some(match &notice.key {
        Some(key) => format!("{console}#event/{}/{}", encode(&delivery), encode(key)),
        None => format!("{console}#route/{}", encode(&delivery)),
    })
}

/// Percent-encode all but the unreserved characters (RFC 3986).
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// At most `chars` characters of `text`, an ellipsis where it was cut.
fn cut(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars.saturating_sub(1)) {
        Some((at, _)) if text.len() > at + 1 => format!("{}…", &text[..at]),
        _ => text.to_owned(),
    }
}

/// Slack's mrkdwn: `&`, `<` and `>` escaped, as Slack asks; backticks
/// dropped so a value cannot close its code span.
fn mrkdwn(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('`', "'")
}

fn headline(notices: &[Notice]) -> String {
    let mut kinds: Vec<(NoticeKind, usize)> = Vec::new();
    for notice in notices {
        match kinds.iter_mut().find(|(kind, _)| *kind == notice.kind) {
            Some((_, n)) => *n += 1,
            None => kinds.push((notice.kind, 1)),
        }
    }
    let kinds: Vec<String> = (kinds.iter())
        .map(|(kind, n)| format!("{} ×{n}", kind.as_str()))
        .collect();
    format!("hookgate: {}", kinds.join(", "))
}

/// Where a notice happened: route, and destination when it has one.
fn place(notice: &Notice) -> String {
    match notice.destination.as_str() {
        "" => notice.route.clone(),
        destination => format!("{} → {destination}", notice.route),
    }
}

fn slack(target: &NotifyTarget, notices: &[Notice]) -> Value {
    let mut blocks = vec![json!({
        "type": "header",
        "text": {"type": "plain_text", "text": cut(&headline(notices), 150)},
    })];
    for notice in notices {
        let mut lines = vec![format!(
            "*{}* on `{}`: {}",
            notice.kind.as_str(),
            mrkdwn(&place(notice)),
            mrkdwn(&notice.summary)
        )];
        let mut facts = Vec::new();
        if let Some(key) = &notice.key {
            facts.push(format!("key `{}`", mrkdwn(key)));
        }
        if let Some(entity) = &notice.entity {
            facts.push(format!("entity `{}`", mrkdwn(entity)));
        }
        if let Some(attempts) = notice.attempts {
            facts.push(format!("{attempts} attempt(s)"));
        }
        if !facts.is_empty() {
            lines.push(facts.join(" · "));
        }
        if let Some(error) = &notice.error {
            lines.push(format!("last: {}", mrkdwn(&cut(error, ERROR_CHARS))));
        }
        let mut section = json!({
            "type": "section",
            "text": {"type": "mrkdwn", "text": lines.join("\n")},
        });
        if let Some(url) = link(target, notice) {
            section["accessory"] = json!({
                "type": "button",
                "text": {"type": "plain_text", "text": "Open in console"},
                "url": url,
            });
        }
        blocks.push(section);
    }
    blocks.push(json!({
        "type": "context",
        "elements": [{"type": "mrkdwn", "text": format!("{} · {}", target.name, rfc3339(notices[0].at_ms))}],
    }));
    json!({"text": headline(notices), "blocks": blocks})
}

fn severity(notices: &[Notice]) -> &'static str {
    match notices
        .iter()
        .all(|notice| notice.kind == NoticeKind::QueueNearBound)
    {
        true => "warning",
        false => "error",
    }
}

fn details(target: &NotifyTarget, notice: &Notice) -> Value {
    json!({
        "kind": notice.kind.as_str(),
        "route": notice.route,
        "destination": notice.destination,
        "key": notice.key,
        "entity": notice.entity,
        "attempts": notice.attempts,
        "error": notice.error.as_deref().map(|error| cut(error, ERROR_CHARS)),
        "summary": notice.summary,
        "at": rfc3339(notice.at_ms),
        "link": link(target, notice),
    })
}

fn pagerduty(target: &NotifyTarget, notices: &[Notice], key: &str) -> Value {
    let first = &notices[0];
    let summary = match notices.len() {
        1 => format!("hookgate {}: {}", place(first), first.summary),
        n => format!(
            "{} ({n} notices; first: {}: {})",
            headline(notices),
            place(first),
            first.summary
        ),
    };
    let links: Vec<Value> = (notices.iter())
        .filter_map(|notice| {
            let href = link(target, notice)?;
            Some(json!({"href": href, "text": format!("{} {}", notice.kind.as_str(), notice.key.as_deref().unwrap_or(&notice.route))}))
        })
        .take(10)
        .collect();
    let routing_key = (target.routing_key.as_ref())
        .map(|key| String::from_utf8_lossy(key.expose()).into_owned())
        .unwrap_or_default();
    let details: Vec<Value> = notices
        .iter()
        .map(|notice| details(target, notice))
        .collect();
    json!({
        "routing_key": routing_key,
        "event_action": "trigger",
        "dedup_key": key,
        "client": "hookgate",
        "payload": {
            "summary": cut(&summary, SUMMARY_CHARS),
            "source": "hookgate",
            "severity": severity(notices),
            "timestamp": rfc3339(first.at_ms),
            "component": first.route,
            "group": "hookgate",
            "class": first.kind.as_str(),
            "custom_details": {"notices": details},
        },
        "links": links,
    })
}

fn webhook(target: &NotifyTarget, notices: &[Notice]) -> Value {
    let details: Vec<Value> = notices
        .iter()
        .map(|notice| details(target, notice))
        .collect();
    json!({
        "type": "hookgate.notices",
        "timestamp": rfc3339(notices[0].at_ms),
        "data": {"target": target.name, "notices": details},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_and_escapes_what_senders_wrote() {
        assert_eq!(cut("abcdef", 3), "ab…");
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("ééé", 2), "é…");
        assert_eq!(mrkdwn("<@U1> & `x`"), "&lt;@U1&gt; &amp; 'x'");
        assert_eq!(encode("evt 1/ü"), "evt%201%2F%C3%BC");
    }
}
