//! How `hookgate events|routes` print for a person: tables, one record,
//! the outcome of a redelivery (`--json` prints the admin API's answer
//! instead).

use std::borrow::Cow;
use std::time::UNIX_EPOCH;

use serde_json::Value;

pub(super) fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

pub(super) fn now_ms() -> u64 {
    hookgate::clock::wall()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// How long ago `ms` was, briefly: `42s`, `7m`, `3h`, `2d`.
pub(super) fn age(ms: Option<u64>) -> String {
    let Some(ms) = ms else { return "-".into() };
    span(now_ms().saturating_sub(ms) / 1000)
}

/// `secs` briefly, in its largest whole unit: `42s`, `7m`, `3h`, `2d`.
fn span(secs: u64) -> String {
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m", secs / 60),
        3600..86_400 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86_400),
    }
}

/// `refused 503`, `not_delivered`, `unknown`, or `-`.
pub(super) fn last_error(record: &Value) -> String {
    let error = &record["last_error"];
    match (error["class"].as_str(), error["status"].as_u64()) {
        (Some(class), Some(status)) => format!("{class} {status}"),
        (Some(class), None) => class.to_owned(),
        _ => "-".into(),
    }
}

pub(super) fn print_table(page: &Value, header: bool) {
    let events = page["events"].as_array().cloned().unwrap_or_default();
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(|event| {
            let route = event["route"].as_str().unwrap_or("");
            vec![
                // A destination's delivery shows as `route/destination`.
                match event["destination"].as_str() {
                    Some(destination) => format!("{route}/{destination}"),
                    None => route.to_owned(),
                },
                event["key"].as_str().unwrap_or("").to_owned(),
                event["state"].as_str().unwrap_or("").to_owned(),
                event["attempts"].to_string(),
                age(event["updated"].as_u64()),
                last_error(event),
            ]
        })
        .collect();
    let titles = ["ROUTE", "KEY", "STATE", "ATTEMPTS", "AGE", "LAST ERROR"];
    print_columns(header.then_some(&titles[..]), &rows);
    if header && rows.is_empty() {
        say!("(no events)");
    }
}

/// `paused 5m ago by alice: migrating the database`.
pub(super) fn paused_text(pause: &Value) -> String {
    let mut text = format!(
        "paused {} ago by {}",
        age(pause["since"].as_u64()),
        pause["by"].as_str().unwrap_or("?")
    );
    if let Some(reason) = pause["reason"].as_str() {
        text.push_str(&format!(": {reason}"));
    }
    text
}

pub(super) fn print_routes(routes: &Value) {
    let rows: Vec<Vec<String>> = (routes["routes"].as_array().into_iter().flatten())
        .map(|route| {
            let state = if route["paused"].is_null() {
                "running".to_owned()
            } else {
                paused_text(&route["paused"])
            };
            let breaker = route["circuit_breaker"]["state"]
                .as_str()
                .unwrap_or("-")
                .to_owned();
            let rate = match route["upstream_rate"]["per_second"].as_f64() {
                Some(rate) => format!("{rate}/s"),
                None => "-".into(),
            };
            let count = |name: &str| match route[name].as_u64() {
                Some(count) => count.to_string(),
                None => "-".into(),
            };
            vec![
                route["name"].as_str().unwrap_or("").to_owned(),
                route["delivery"].as_str().unwrap_or("").to_owned(),
                state,
                breaker,
                rate,
                count("queued"),
                count("dead_letters"),
                count("blocked"),
            ]
        })
        .collect();
    let titles = [
        "ROUTE", "DELIVERY", "STATE", "BREAKER", "RATE", "QUEUED", "DEAD", "BLOCKED",
    ];
    print_columns(Some(&titles), &rows);
}

/// `hookgate routes blocked`: each entity held by a dead event.
pub(super) fn print_blocked(blocked: &Value) {
    let rows: Vec<Vec<String>> = (blocked["blocked"].as_array().into_iter().flatten())
        .map(|held| {
            vec![
                held["entity"].as_str().unwrap_or("").to_owned(),
                held["dead_event"].as_str().unwrap_or("").to_owned(),
                held["since"]
                    .as_u64()
                    .map_or("-".into(), hookgate::clock::rfc3339),
                held["waiting"].as_u64().unwrap_or(0).to_string(),
            ]
        })
        .collect();
    if rows.is_empty() {
        say!("no entity is blocked");
        return;
    }
    print_columns(
        Some(&["ENTITY", "DEAD EVENT", "DEAD SINCE", "WAITING"]),
        &rows,
    );
    if blocked["more"] == true {
        say!("(more not shown: --limit up to 1000)");
    }
}

/// A table: each column as wide as its widest cell (of this page; `titles`
/// only on the first).
pub(super) fn print_columns(titles: Option<&[&str]>, rows: &[Vec<String>]) {
    let columns = rows
        .first()
        .map_or(0, Vec::len)
        .max(titles.map_or(0, <[_]>::len));
    let mut widths: Vec<usize> = vec![0; columns];
    for (width, title) in widths.iter_mut().zip(titles.into_iter().flatten()) {
        *width = title.len();
    }
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        say!("{}", padded.join("  ").trim_end());
    };
    if let Some(titles) = titles {
        line(titles.to_vec());
    }
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

pub(super) fn print_record(record: &Value) {
    let field = |name: &str| match &record[name] {
        Value::Null => "-".to_owned(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    say!("route:        {}", field("route"));
    if !record["destination"].is_null() {
        say!("destination:  {}", field("destination"));
    }
    say!("key:          {}", field("key"));
    say!("state:        {}", field("state"));
    say!("attempts:     {}", field("attempts"));
    say!("first seen:   {} ago", age(record["first_seen"].as_u64()));
    say!("last change:  {} ago", age(record["updated"].as_u64()));
    say!("last error:   {}", last_error(record));
    if let Some(next) = record["next_attempt_at"].as_u64() {
        say!("next attempt: {}", until(next));
    }
    say!("response:     {}", field("response_status"));
    // A route with destinations: the event at each (`--destination` shows
    // one whole).
    for (name, delivery) in record["destinations"].as_object().into_iter().flatten() {
        match delivery["state"].as_str() {
            Some(state) => say!(
                "  to {name}: {state}, {} attempt(s), last error {}",
                delivery["attempts"],
                last_error(delivery)
            ),
            None => say!("  to {name}: not sent (its filter)"),
        }
    }
    print_history(record);
    if !record["replay_of"].is_null() {
        say!("replay of:    {}", field("replay_of"));
    }
    if let Some(replays) = record["replays"].as_array().filter(|r| !r.is_empty()) {
        let keys: Vec<&str> = replays.iter().filter_map(Value::as_str).collect();
        say!("replays:      {}", keys.join(", "));
    }
    let request = &record["request"];
    if request.is_null() {
        say!("request:      not stored (kept for failed, dead and replayed events)");
        return;
    }
    say!(
        "request:      {} {} bytes, sha256 {}",
        request["method"].as_str().unwrap_or(""),
        request["body_bytes"],
        request["body_sha256"].as_str().unwrap_or("")
    );
    for header in request["headers"].as_array().into_iter().flatten() {
        say!(
            "  {}: {}",
            header[0].as_str().unwrap_or(""),
            header[1].as_str().unwrap_or("")
        );
    }
    if let Some(body) = request["body_base64"].as_str() {
        use base64::Engine;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(body)
            .unwrap_or_default();
        say!("body:\n{}", String::from_utf8_lossy(&bytes));
    }
}

/// The record's failed attempts, newest first: when, entrance, how, the
/// upstream's status and time, the error, the start of the upstream's body.
fn print_history(record: &Value) {
    let Some(history) = record["history"].as_array().filter(|h| !h.is_empty()) else {
        return;
    };
    say!("failed attempts (newest first):");
    for attempt in history.iter().rev() {
        let how = match (attempt["class"].as_str(), attempt["status"].as_u64()) {
            (Some(class), Some(status)) => format!("{class} {status}"),
            (class, _) => class.unwrap_or("-").to_owned(),
        };
        say!(
            "  {} ago  {:<8} {:<16} {} ms",
            age(attempt["at"].as_u64()),
            attempt["kind"].as_str().unwrap_or("-"),
            how,
            attempt["duration_ms"]
        );
        if let Some(error) = attempt["error"].as_str() {
            say!("    error: {error}");
        }
        if let Some(body) = attempt["body"].as_str() {
            say!("    upstream said: {body}");
        }
    }
}

/// How far ahead `ms` is: `in 42s`, or `now` once it has passed.
fn until(ms: u64) -> String {
    let now = now_ms();
    if ms <= now {
        return "due now".into();
    }
    format!("in {}", span((ms - now) / 1000))
}

pub(super) fn print_sent(sent: &Value, json: bool, what: &str) {
    if json {
        say!("{}", pretty(sent));
        return;
    }
    let upstream = match (
        sent["upstream_status"].as_u64(),
        sent["upstream_error"].as_str(),
    ) {
        (Some(status), _) => format!("upstream answered {status}"),
        (None, Some(error)) => error.to_owned(),
        _ => "no answer".into(),
    };
    say!(
        "{what} {}/{} (attempt {}): {}, {upstream}",
        sent["route"].as_str().unwrap_or(""),
        sent["key"].as_str().unwrap_or(""),
        sent["attempt"],
        sent["state"].as_str().unwrap_or(""),
    );
}

/// Print `text`, escaped, on standard output; a reader that went away
/// (`… | head -1`) ends the command quietly, as every Unix tool does.
pub(crate) fn say(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(error) = writeln!(out, "{}", escaped(text)) {
        if error.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
    }
}

/// `text` with its control characters escaped (`\x1b` as `\u{1b}`),
/// newlines and tabs kept.
pub(crate) fn escaped(text: &str) -> Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.chars()
            .map(|c| match unsafe_char(c) {
                true => c.escape_unicode().to_string(),
                false => c.to_string(),
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::escaped;

    #[test]
    fn control_characters_reach_no_terminal() {
        let hostile = "title\x1b]0;owned\x07 \x1b[2J\x1b[8mhidden\u{9b}31m\r";
        let shown = escaped(hostile);
        assert!(!shown.chars().any(|c| c.is_control()), "{shown:?}");
        assert!(shown.contains("\\u{1b}]0;owned\\u{7}"), "{shown}");
        assert_eq!(escaped("two\nlines\tand a tab"), "two\nlines\tand a tab");
        assert!(matches!(escaped("plain"), std::borrow::Cow::Borrowed(_)));
    }
}
