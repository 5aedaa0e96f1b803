//! The config's unit tests: every located problem and every default the
//! validator gives, pinned. Here the file as a whole — server, store, admin,
//! keys, `check`'s warnings — and the helpers; `verify.rs` has the
//! senders' schemes and secrets, `delivery.rs` retries, dead letters, async
//! delivery and traffic control.

use std::path::Path;
use std::time::Duration;

use http::{HeaderMap, HeaderValue, Method, StatusCode};

use super::*;
use crate::key::KeySource;

mod delivery;
mod destinations;
mod notify;
mod order;
mod reconcile;
mod verify;

fn env(name: &str) -> Option<String> {
    match name {
        "SECRET" => Some("whsec_test_0123456789".to_owned()),
        "ADMIN_TOKEN" => Some("0123456789abcdef0123".to_owned()),
        _ => None,
    }
}

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, Path::new("gw.toml"), &env)
}

fn problems(text: &str) -> Vec<String> {
    match parse(text) {
        Ok(_) => panic!("config should be invalid:\n{text}"),
        Err(ConfigError::Invalid(problems)) => problems.iter().map(ToString::to_string).collect(),
        Err(other) => panic!("unexpected error {other}"),
    }
}

const MINIMAL: &str = r#"
[server]
listen = "127.0.0.1:8080"

[store]
backend = "memory"

[[routes]]
name = "orders"
path = "/hooks/orders"
upstream = "http://127.0.0.1:3000/orders"
key = ["header:X-Event-Id"]

[routes.verify]
scheme = "hmac"
secrets = ["${SECRET}"]
header = "X-Signature"
prefix = "sha256="
"#;

fn route_with(verify: &str, extra: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:8080\"\n[store]\nbackend = \"memory\"\n\
         [[routes]]\nname = \"r\"\npath = \"/r\"\nupstream = \"http://127.0.0.1:3000/\"\n{extra}\n\
         [routes.verify]\n{verify}\n"
    )
}

#[test]
fn applies_defaults() {
    let config = parse(MINIMAL).unwrap();
    assert_eq!(config.live.limits.max_body_bytes, 1 << 20);
    assert_eq!(
        config.fixed.server.header_read_timeout,
        Duration::from_secs(10)
    );
    assert_eq!(config.fixed.key_prefix, "hookgate:");
    assert_eq!(config.fixed.store.timeout, Duration::from_millis(500));
    assert_eq!(config.live.on_store_error, OnStoreError::Reject);
    let route = &config.live.routes[0];
    assert_eq!(route.methods, [Method::POST]);
    assert_eq!(route.keying.scope, "orders");
    assert_eq!(route.claim.processing_ttl, Duration::from_secs(30));
    assert_eq!(route.claim.retention, Duration::from_secs(7 * 86_400));
    assert_eq!(
        route.keying.idempotency_header.as_ref().unwrap(),
        "idempotency-key"
    );
    assert_eq!(route.claim.max_cached_body_bytes, 65_536);
    assert_eq!(route.verify.scheme.name, "hmac");
    // The secret from ${SECRET} verifies, with the configured header and prefix.
    let signed = |signature: &str| {
        let mut headers = HeaderMap::new();
        headers.insert("x-signature", HeaderValue::from_str(signature).unwrap());
        route.verify.verifier.verify(
            crate::verify::RequestLine::POST,
            &headers,
            b"{}",
            crate::clock::wall(),
        )
    };
    let tag = {
        use hmac::Mac;
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(b"whsec_test_0123456789").unwrap();
        mac.update(b"{}");
        hex::encode(mac.finalize().into_bytes())
    };
    assert_eq!(signed(&format!("sha256={tag}")), Ok(()));
    assert!(signed(&tag).is_err(), "the prefix is required");
    assert!(config.summary().contains("orders"));
    assert!(
        !config.summary().contains("whsec_test_0123456789"),
        "summary must not print secrets"
    );
}

#[test]
fn reports_unknown_keys_with_location_and_path() {
    let text = MINIMAL.replace("upstream = ", "upstraem_timeout = \"1s\"\nupstream = ");
    let found = problems(&text);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("gw.toml:11:1: routes[0].upstraem_timeout: unknown field"),
        "{found:?}"
    );
}

#[test]
fn reports_syntax_errors_with_location() {
    let found = problems("[server]\nlisten = \"x\nfoo = 1\n");
    assert!(found[0].starts_with("gw.toml:2:"), "{found:?}");
}

#[test]
fn reports_every_validation_problem_with_its_key() {
    let text = MINIMAL
        .replace("${SECRET}", "${MISSING_SECRET}")
        .replace(
            "name = \"orders\"",
            "name = \"Orders!\"\nprocessing_ttl = \"30 seconds\"",
        )
        .replace("http://127.0.0.1:3000/orders", "ftp://x/");
    let found = problems(&text).join("\n");
    for expected in [
        "routes[0].name: \"Orders!\" must match [a-z0-9_-]+",
        "routes[0].processing_ttl:",
        "routes[0].upstream: \"ftp://x/\" must be an absolute http:// or https:// URL",
        "routes[0].verify.secrets[0]: environment variable `MISSING_SECRET` is not set",
    ] {
        assert!(
            found.contains(expected),
            "missing {expected:?} in:\n{found}"
        );
    }
    assert!(
        found.contains("gw.toml:17:12: routes[0].verify.secrets[0]"),
        "{found}"
    );
}

#[test]
fn rejects_duplicates_and_inconsistent_settings() {
    let twice = format!(
        "{MINIMAL}\n{}",
        &MINIMAL[MINIMAL.find("[[routes]]").unwrap()..]
    );
    let found = problems(&twice).join("\n");
    assert!(
        found.contains("routes[1].name: route name \"orders\" is used twice"),
        "{found}"
    );
    assert!(found.contains("routes[1].path"), "{found}");

    let short = MINIMAL.replace(
        "key = [",
        "retention = \"10s\"\nprocessing_ttl = \"30s\"\nkey = [",
    );
    assert!(problems(&short)
        .join("\n")
        .contains("retention must be longer than processing_ttl"));

    let no_key = MINIMAL.replace("key = [\"header:X-Event-Id\"]\n", "");
    assert!(problems(&no_key)
        .join("\n")
        .contains("scheme \"hmac\" has no default key"));

    let redis_without_url = MINIMAL.replace("backend = \"memory\"", "backend = \"redis\"");
    assert!(problems(&redis_without_url)
        .join("\n")
        .contains("store: backend \"redis\" needs `url"));

    let bad_method = MINIMAL.replace("key = [", "methods = [\"post\"]\nkey = [");
    assert!(problems(&bad_method)
        .join("\n")
        .contains("routes[0].methods[0]"));
}

#[test]
fn parses_store_and_admin() {
    let text = MINIMAL
        .replace(
            "backend = \"memory\"",
            "backend = \"redis\"\nurl = \"redis://127.0.0.1:6379/0\"\non_error = \"forward\"\ntimeout = \"250ms\"",
        )
        .replace("[store]", "[admin]\nlisten = \"127.0.0.1:9090\"\ntoken = \"${ADMIN_TOKEN}\"\n\n[store]");
    let config = parse(&text).unwrap();
    assert_eq!(
        config.fixed.store.backend,
        Backend::Redis {
            url: "redis://127.0.0.1:6379/0".into()
        }
    );
    assert_eq!(config.live.on_store_error, OnStoreError::Forward);
    assert_eq!(config.fixed.store.timeout, Duration::from_millis(250));
    let admin = config.fixed.admin.unwrap();
    assert_eq!(format!("{:?}", admin.token), "Some([redacted])");
}

/// Queue bounds: sizes in bytes or binary and decimal units, 0 for none,
/// only on async routes; the store's bound beside them.
#[test]
fn queue_bounds_read_sizes_and_are_async() {
    let routed = |extra: &str| MINIMAL.replace("key = [", &format!("{extra}\nkey = ["));
    let config = parse(&routed("delivery = \"async\"")).unwrap();
    let queue = config.live.routes[0].delivery.queue().clone();
    assert_eq!(
        (queue.max_queued, queue.max_queued_bytes),
        (100_000, 1 << 30)
    );
    let text = routed("delivery = \"async\"\nmax_queued = 0\nmax_queued_bytes = \"512MiB\"")
        .replace(
            "backend = \"memory\"",
            "backend = \"memory\"\nmax_queued_bytes = \"2GB\"",
        );
    let config = parse(&text).unwrap();
    let queue = config.live.routes[0].delivery.queue().clone();
    assert_eq!((queue.max_queued, queue.max_queued_bytes), (0, 512 << 20));
    assert_eq!(config.live.max_queued_bytes, 2_000_000_000);
    let refused = problems(&routed("delivery = \"async\"\nmax_queued_bytes = \"lots\""));
    assert!(
        refused
            .iter()
            .any(|p| p.contains("max_queued_bytes: \"lots\" is not a size")),
        "{refused:?}"
    );
    let refused = problems(&routed("max_queued = 10"));
    assert!(
        refused
            .iter()
            .any(|p| p.contains("max_queued: only for delivery = \"async\"")),
        "{refused:?}"
    );
}

/// `[store.backup]` is the embedded store's, with `every` and `dir`.
#[test]
fn store_backup_is_the_embedded_stores() {
    let embedded = |backup: &str| {
        MINIMAL.replace(
            "backend = \"memory\"",
            &format!("backend = \"embedded\"\npath = \"/var/lib/hookgate/h.db\"\n{backup}"),
        )
    };
    let config = parse(&embedded("[store.backup]\nevery = \"1h\"\ndir = \"/b\"")).unwrap();
    let backup = config.fixed.store.backup.unwrap();
    assert_eq!((backup.every, backup.keep), (Duration::from_secs(3600), 24));
    assert_eq!(backup.dir, std::path::PathBuf::from("/b"));
    let refused = problems(&embedded("[store.backup]\ndir = \"/b\"\nkeep = 0"));
    assert!(
        refused
            .iter()
            .any(|p| p.contains("store.backup: needs `every")),
        "{refused:?}"
    );
    let refused = problems(&embedded("[store.backup]\nevery = \"10ms\"\ndir = \"/b\""));
    assert!(
        refused
            .iter()
            .any(|p| p.contains("store.backup.every: must be at least 1s")),
        "{refused:?}"
    );
    let redis = MINIMAL.replace(
        "backend = \"memory\"",
        "backend = \"redis\"\nurl = \"redis://127.0.0.1:6379/0\"\n[store.backup]\nevery = \"1h\"\ndir = \"/b\"",
    );
    let refused = problems(&redis);
    assert!(
        refused
            .iter()
            .any(|p| p.contains("store.backup: only for the embedded store")),
        "{refused:?}"
    );
}

/// The key as the IETF draft writes it: a quoted structured-field
/// string; the bare key by default.
#[test]
fn idempotency_header_format_quotes_the_key_as_the_draft_asks() {
    let format = |text: &str| {
        parse(text).unwrap().live.routes[0]
            .keying
            .idempotency_header_format
    };
    assert_eq!(format(MINIMAL).write("evt_1"), "evt_1");
    let text = MINIMAL.replace(
        "key = [",
        "idempotency_header_format = \"sf-string\"\nkey = [",
    );
    assert_eq!(format(&text).write("evt_1"), "\"evt_1\"");
    assert_eq!(format(&text).write(r#"a"b\c"#), r#""a\"b\\c""#);
    let bad = MINIMAL.replace("key = [", "idempotency_header_format = \"quoted\"\nkey = [");
    let refused = problems(&bad);
    assert!(
        refused
            .iter()
            .any(|p| p.contains("idempotency_header_format")),
        "{refused:?}"
    );
}

#[test]
fn empty_idempotency_header_disables_injection() {
    let text = MINIMAL.replace("key = [", "idempotency_header = \"\"\nkey = [");
    assert!(parse(&text).unwrap().live.routes[0]
        .keying
        .idempotency_header
        .is_none());
}

#[test]
fn trusted_proxies_are_address_ranges() {
    let text = MINIMAL.replace(
        "listen = \"127.0.0.1:8080\"",
        "listen = \"127.0.0.1:8080\"\ntrusted_proxies = [\"10.0.0.0/8\", \"fd00::/8\", \"192.0.2.1\"]",
    );
    let config = parse(&text).unwrap();
    let ranges: Vec<String> = config
        .live
        .trusted_proxies
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(ranges, ["10.0.0.0/8", "fd00::/8", "192.0.2.1/32"]);
    let bad = MINIMAL.replace(
        "listen = \"127.0.0.1:8080\"",
        "listen = \"127.0.0.1:8080\"\ntrusted_proxies = [\"10.0.0.0/40\"]",
    );
    let found = problems(&bad).join("\n");
    assert!(
        found.contains(
            "server.trusted_proxies[0]: \"10.0.0.0/40\": the prefix length must be 0 to 32"
        ),
        "{found}"
    );
}

#[test]
fn allow_from_takes_address_ranges() {
    let verify = "scheme = \"stripe\"\nsecrets = [\"whsec_0123456789abcdef\"]";
    let config = parse(&route_with(
        verify,
        "allow_from = [\"10.0.0.0/8\", \"192.0.2.7\"]",
    ))
    .unwrap();
    let allowed = config.live.routes[0].traffic.allow_from.as_ref().unwrap();
    assert_eq!(allowed.len(), 2);
    assert!(parse(&route_with(verify, "")).unwrap().live.routes[0]
        .traffic
        .allow_from
        .is_none());
    let found = problems(&route_with(
        verify,
        "allow_from = [\"10.0.0.0/8\", \"nonsense\"]",
    ))
    .join("\n");
    assert!(found.contains("routes[0].allow_from[1]"), "{found}");
    let found = problems(&route_with(verify, "allow_from = []")).join("\n");
    assert!(
        found.contains("routes[0].allow_from: list at least one address range"),
        "{found}"
    );
}

#[test]
fn drain_delay_and_watch_have_defaults() {
    let config = parse(MINIMAL).unwrap();
    assert_eq!(config.fixed.server.drain_delay, Duration::ZERO);
    assert!(config.fixed.server.watch);
    let text = MINIMAL.replace(
        "listen = \"127.0.0.1:8080\"",
        "listen = \"127.0.0.1:8080\"\ndrain_delay = \"5s\"\nwatch = false",
    );
    let config = parse(&text).unwrap();
    assert_eq!(config.fixed.server.drain_delay, Duration::from_secs(5));
    assert!(!config.fixed.server.watch);
    let text = MINIMAL.replace(
        "listen = \"127.0.0.1:8080\"",
        "listen = \"127.0.0.1:8080\"\ndrain_delay = \"0s\"",
    );
    assert_eq!(
        parse(&text).unwrap().fixed.server.drain_delay,
        Duration::ZERO
    );
}

/// `[admin] read_token`: a second token, valid like the first, beside it.
#[test]
fn a_read_token_is_checked_like_the_admin_token() {
    let with = |lines: &str| {
        MINIMAL.replace(
            "[store]",
            &format!("[admin]\nlisten = \"127.0.0.1:9090\"\n{lines}\n\n[store]"),
        )
    };
    let token = "token = \"a-real-random-token-8f3a9c\"";
    let config = parse(&with(&format!(
        "{token}\nread_token = \"a-reader-token-77e1b0d2\""
    )))
    .unwrap();
    let admin = config.fixed.admin.unwrap();
    assert_eq!(format!("{:?}", admin.read_token), "Some([redacted])");
    for (lines, problem) in [
        (
            "read_token = \"a-reader-token-77e1b0d2\"".to_owned(),
            "admin.read_token: read_token needs token",
        ),
        (
            format!("{token}\nread_token = \"a-real-random-token-8f3a9c\""),
            "admin.read_token: read_token must differ from token",
        ),
        (
            format!("{token}\nread_token = \"short\""),
            "admin.read_token: an admin token must be at least 16 characters",
        ),
        (
            format!("{token}\nread_token = \"example-reader-token-0123\""),
            "admin.read_token: the admin token looks like a placeholder",
        ),
    ] {
        let found = problems(&with(&lines)).join("\n");
        assert!(found.contains(problem), "{lines}: {found}");
    }
}

#[test]
fn check_catches_what_would_fail_or_bite_at_run_time() {
    let with_admin = |listen: &str, token: &str| {
        MINIMAL.replace(
            "[store]",
            &format!("[admin]\nlisten = \"{listen}\"\ntoken = \"{token}\"\n\n[store]"),
        )
    };
    let token = "a-real-random-token-8f3a9c";
    let found = problems(&with_admin("0.0.0.0:8080", token)).join("\n");
    assert!(
        found.contains("admin.listen: the admin listener 0.0.0.0:8080 would share port 8080"),
        "{found}"
    );
    assert!(parse(&with_admin("127.0.0.1:9090", token)).is_ok());
    for placeholder in ["replace-with-32-random-characters", "CHANGE-ME-0123456789"] {
        let found = problems(&with_admin("127.0.0.1:9090", placeholder)).join("\n");
        assert!(
            found.contains("admin.token: the admin token looks like a placeholder"),
            "{found}"
        );
    }
    let text = MINIMAL.replace(
        "listen = \"127.0.0.1:8080\"",
        "listen = \"127.0.0.1:8080\"\nshutdown_grace = \"25s\"",
    );
    let config = parse(&text).unwrap();
    assert!(
        config.warnings.iter().any(|warning| {
            warning.contains(
            "server.shutdown_grace (25s) is shorter than the upstream_timeout of route orders (30s)"
        )
        }),
        "{:?}",
        config.warnings
    );
    assert!(!parse(MINIMAL)
        .unwrap()
        .warnings
        .iter()
        .any(|warning| warning.contains("shutdown_grace")));
}

#[test]
fn telemetry_takes_an_http_otlp_endpoint() {
    assert!(parse(MINIMAL).unwrap().fixed.telemetry.is_none());
    let with = |lines: &str| format!("{MINIMAL}\n[telemetry]\n{lines}\n");
    let config = parse(&with("otlp_endpoint = \"http://collector:4318\"")).unwrap();
    let telemetry = config.fixed.telemetry.unwrap();
    assert_eq!(
        telemetry.otlp_endpoint.to_string(),
        "http://collector:4318/v1/traces"
    );
    assert_eq!(telemetry.service_name, "hookgate");
    assert_eq!(telemetry.sample_ratio, 1.0);
    assert!(!telemetry.record_keys, "keys stay off spans by default");
    let config = parse(&with(
        "otlp_endpoint = \"http://collector:4318/custom/traces\"\nsample_ratio = 0.1",
    ))
    .unwrap();
    let telemetry = config.fixed.telemetry.unwrap();
    assert_eq!(telemetry.otlp_endpoint.path(), "/custom/traces");
    assert_eq!(telemetry.sample_ratio, 0.1);
    for (bad, expected) in [
        (
            "otlp_endpoint = \"https://collector:4318\"",
            "telemetry.otlp_endpoint: \"https://collector:4318\" must be an http:// URL",
        ),
        (
            "otlp_endpoint = \"http://c:4318\"\nsample_ratio = 2.0",
            "telemetry.sample_ratio: must be between 0 and 1",
        ),
    ] {
        let found = problems(&with(bad)).join("\n");
        assert!(found.contains(expected), "{found}");
    }
}

#[test]
fn an_idempotency_header_that_hookgate_manages_is_refused() {
    let verify = "scheme = \"hmac\"\nsecrets = [\"s-0123456789abcdef\"]\nheader = \"X-Sig\"";
    for name in [
        "Host",
        "Content-Length",
        "Transfer-Encoding",
        "Connection",
        "TE",
        "X-Forwarded-For",
        "X-Request-Id",
    ] {
        let extra = format!("key = [\"header:X-Event-Id\"]\nidempotency_header = \"{name}\"");
        let text = route_with(verify, &extra);
        let found = problems(&text).join("\n");
        assert!(
            found.contains("routes[0].idempotency_header")
                && found.contains("hookgate sets or removes itself"),
            "{name}: {found}"
        );
    }
    let fine = route_with(
        verify,
        "key = [\"header:X-Event-Id\"]\nidempotency_header = \"X-Event-Id\"",
    );
    assert!(
        parse(&fine).is_ok(),
        "{:?}",
        parse(&fine).err().map(|e| e.to_string())
    );
}

#[test]
fn trusting_every_address_as_a_proxy_is_a_warning() {
    for everything in ["0.0.0.0/0", "::/0"] {
        let text = MINIMAL.replace(
            "listen = \"127.0.0.1:8080\"",
            &format!("listen = \"127.0.0.1:8080\"\ntrusted_proxies = [\"{everything}\"]"),
        );
        let config = parse(&text).unwrap();
        let warnings = config.warnings.join("\n");
        assert!(
            warnings.contains("server.trusted_proxies") && warnings.contains("allow_from"),
            "{everything}: {warnings:?}"
        );
    }
    let narrow = MINIMAL.replace(
        "listen = \"127.0.0.1:8080\"",
        "listen = \"127.0.0.1:8080\"\ntrusted_proxies = [\"10.0.0.0/8\"]",
    );
    let warnings = parse(&narrow).unwrap().warnings.join("\n");
    assert!(!warnings.contains("trusted_proxies"), "{warnings}");
}

#[test]
fn a_postgres_pool_a_fleet_cannot_open_on_a_default_server_is_a_warning() {
    let pool_warnings = |pool: &str| {
        let text = MINIMAL.replace(
            "backend = \"memory\"",
            &format!("backend = \"postgres\"\nurl = \"postgres://hg@db:5432/hg\"\n{pool}"),
        );
        let warnings = parse(&text).unwrap().warnings;
        warnings
            .into_iter()
            .filter(|warning| warning.contains("pool_size"))
            .collect::<Vec<_>>()
    };
    assert!(pool_warnings("").is_empty(), "16 + 3, twice: 38");
    let big = pool_warnings("pool_size = 64");
    assert_eq!(big.len(), 1, "{big:?}");
    assert!(big[0].contains("two gateways open 134"), "{}", big[0]);
}
