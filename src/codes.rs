//! Every stable error code hookgate answers, with the status each listener
//! gives it and what it means: the one table `docs/reference/errors.md` is generated
//! from ([`markdown`]; a test keeps the two the same, and `error.rs`'s
//! tests keep this table true to the codes the errors answer).
//!
//! An error answer is an RFC 9457 problem (`application/problem+json`):
//! `type` `about:blank`, `title` the status's reason phrase, `status`,
//! `detail` the message, and the extension member
//! `error: {code, message}` that scripts written before it still read.

/// One code.
pub struct Code {
    pub code: &'static str,
    /// What a sender (the public listener) gets; 0: never answered there.
    pub sender: u16,
    /// What the admin API answers; 0: never answered there.
    pub admin: u16,
    pub meaning: &'static str,
}

const fn code(code: &'static str, sender: u16, admin: u16, meaning: &'static str) -> Code {
    Code {
        code,
        sender,
        admin,
        meaning,
    }
}

/// Every code, senders' first, in the order a request meets them.
pub static CODES: &[Code] = &[
    code("route_not_found", 404, 404, "no route has this path (a sender); no route of that name (the admin API)"),
    code("method_not_allowed", 405, 405, "the route (or admin path) takes other methods; `Allow` lists the route's"),
    code("source_not_allowed", 403, 0, "the sender's address is outside the route's `allow_from`, or an AWS SNS topic or certificate host it does not allow"),
    code("body_too_large", 413, 0, "the body is over `max_body_bytes`"),
    code("body_unreadable", 400, 0, "the sender broke off the body"),
    code("body_timeout", 408, 0, "the body did not arrive within `body_timeout`"),
    code("signature_invalid", 401, 0, "the signature does not verify under any of the route's secrets"),
    code("timestamp_out_of_tolerance", 401, 0, "an authentic delivery signed longer ago (or later) than `tolerance`"),
    code("sender_unreachable", 503, 0, "the key the sender publishes (AWS SNS's certificate) could not be fetched; `Retry-After`"),
    code("key_missing", 400, 0, "no key source yields a key (and `on_missing_key` is `reject`)"),
    code("key_invalid", 400, 400, "the key is not 1-255 visible ASCII bytes (a sender); a replay's key would be (the admin API)"),
    code("payload_mismatch", 422, 0, "the key was claimed with another body (`on_mismatch = \"reject\"`)"),
    code("in_flight", 409, 409, "a delivery of the key is running now; `Retry-After` (a sender). The admin API: forgetting or redelivering what a delivery holds, or what is queued, without `force`"),
    code("route_paused", 503, 409, "an operator paused the route: a sender retries after `Retry-After`; the admin API refuses to send its events again"),
    code("queue_full", 503, 0, "the async route (or the store) holds as many undelivered events as it may; `Retry-After`"),
    code("upstream_circuit_open", 503, 503, "the route's circuit breaker holds calls; `Retry-After`"),
    code("rate_limited", 429, 503, "the route's `upstream_rate` is spent; `Retry-After`"),
    code("store_unavailable", 503, 503, "the store did not answer within `store.timeout`; `Retry-After`"),
    code("record_unreadable", 503, 500, "the record is sealed under a key no `[store.encryption]` key opens"),
    code("upstream_unreachable", 502, 0, "the upstream could not be reached: nothing was forwarded"),
    code("upstream_timeout", 504, 0, "the upstream did not answer within `upstream_timeout`"),
    code("upstream_body_incomplete", 502, 0, "the upstream answered and its body broke off; the answer is recorded"),
    code("internal_error", 500, 0, "a fault of hookgate's own, logged"),
    code("not_found", 0, 404, "no such admin endpoint, or the admin API is off (no `admin.token`)"),
    code("unauthorized", 0, 401, "no bearer token, or a wrong one; `WWW-Authenticate: Bearer`"),
    code("csrf_token_invalid", 0, 403, "a console session's change without its `X-CSRF-Token`"),
    code("read_only", 0, 403, "a change asked with the read token"),
    code("destination_not_found", 0, 404, "`?destination=` names none of the route's"),
    code("destination_required", 0, 400, "an action on one delivery of a route with several destinations, without `?destination=`"),
    code("key_not_found", 0, 404, "the route holds no record of the key"),
    code("key_encoding_invalid", 0, 400, "a broken `%` escape in the key"),
    code("bad_request", 0, 400, "a bad query parameter (`state`, `limit`, `cursor`, `rate`, a filter, `since`), or too many replays"),
    code("bulk_not_found", 0, 404, "no bulk action of that id on this gateway"),
    code("not_in_flight", 0, 409, "nothing to release"),
    code("completed", 0, 409, "redelivering a completed event needs `?force=true`"),
    code("request_not_stored", 0, 409, "the record keeps no request to send again (only failed, dead, queued and replayed events do)"),
    code("config_invalid", 0, 422, "a reload was rejected; the running config keeps serving"),
    code("not_reconciled", 0, 404, "the route has no `[routes.reconcile]`"),
    code("reconcile_running", 0, 409, "a reconciliation pass of the route is running on some gateway"),
];

/// The code's row, if it is one.
pub fn find(code: &str) -> Option<&'static Code> {
    CODES.iter().find(|row| row.code == code)
}

/// `docs/reference/errors.md`'s table, as [`CODES`] has it.
pub fn markdown() -> String {
    let status = |status: u16| match status {
        0 => "—".to_owned(),
        status => status.to_string(),
    };
    let mut out = String::from(
        "| code | to a sender | from the admin API | means |\n| --- | --- | --- | --- |\n",
    );
    for row in CODES {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            row.code,
            status(row.sender),
            status(row.admin),
            row.meaning
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table in docs/reference/errors.md is this module's; with
    /// `HOOKGATE_WRITE_DOCS=1` the test writes it.
    #[test]
    fn docs_errors_md_holds_the_table_of_codes() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/reference/errors.md");
        let text = std::fs::read_to_string(path).expect("docs/reference/errors.md");
        let (begin, end) = (
            "<!-- codes: generated from src/codes.rs -->\n",
            "<!-- end of codes -->",
        );
        let start = text.find(begin).expect("the begin marker") + begin.len();
        let stop = text.find(end).expect("the end marker");
        let table = markdown();
        if std::env::var("HOOKGATE_WRITE_DOCS").as_deref() == Ok("1") {
            let written = format!("{}{table}{}", &text[..start], &text[stop..]);
            std::fs::write(path, written).unwrap();
            return;
        }
        assert_eq!(
            &text[start..stop],
            table,
            "docs/reference/errors.md is out of date: run HOOKGATE_WRITE_DOCS=1 cargo test --lib codes"
        );
    }

    #[test]
    fn each_code_is_listed_once() {
        let mut seen = std::collections::HashSet::new();
        for row in CODES {
            assert!(seen.insert(row.code), "{} twice", row.code);
            assert!(
                row.sender != 0 || row.admin != 0,
                "{} is answered nowhere",
                row.code
            );
        }
    }
}
