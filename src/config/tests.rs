//! The config's unit tests: one concern, every located problem and every
//! default the validator gives, pinned (a long file of short tests).

use std::path::Path;
use std::time::Duration;

use http::{HeaderMap, HeaderValue, Method, StatusCode};

use super::*;
use crate::key::KeySource;

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
    assert_eq!(route.scope, "orders");
    assert_eq!(route.processing_ttl, Duration::from_secs(30));
    assert_eq!(route.retention, Duration::from_secs(7 * 86_400));
    assert_eq!(
        route.idempotency_header.as_ref().unwrap(),
        "idempotency-key"
    );
    assert_eq!(route.max_cached_body_bytes, 65_536);
    assert_eq!(route.scheme.name, "hmac");
    // The secret from ${SECRET} verifies, with the configured header and prefix.
    let signed = |signature: &str| {
        let mut headers = HeaderMap::new();
        headers.insert("x-signature", HeaderValue::from_str(signature).unwrap());
        route.verifier.verify(
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
fn a_route_must_say_how_it_verifies() {
    let text = MINIMAL.split("[routes.verify]").next().unwrap();
    let found = problems(text).join("\n");
    assert!(
        found.contains("routes[0]: route has no [routes.verify]"),
        "{found}"
    );

    let unsigned = format!("{text}[routes.verify]\nscheme = \"none\"\n");
    let config = parse(&unsigned).unwrap();
    let route = &config.live.routes[0];
    assert_eq!(route.scheme.name, "none");
    let now = crate::clock::wall();
    assert_eq!(
        route.verifier.verify(
            crate::verify::RequestLine::POST,
            &HeaderMap::new(),
            b"x",
            now
        ),
        Ok(())
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

#[test]
fn empty_idempotency_header_disables_injection() {
    let text = MINIMAL.replace("key = [", "idempotency_header = \"\"\nkey = [");
    assert!(parse(&text).unwrap().live.routes[0]
        .idempotency_header
        .is_none());
}

fn route_with(verify: &str, extra: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:8080\"\n[store]\nbackend = \"memory\"\n\
         [[routes]]\nname = \"r\"\npath = \"/r\"\nupstream = \"http://127.0.0.1:3000/\"\n{extra}\n\
         [routes.verify]\n{verify}\n"
    )
}

#[test]
fn provider_schemes_bring_their_defaults() {
    let stripe = parse(&route_with(
        "scheme = \"stripe\"\nsecrets = [\"whsec_x0123456789abcdef\"]",
        "",
    ))
    .unwrap();
    let route = &stripe.live.routes[0];
    assert_eq!(route.key, [KeySource::parse("json:/id").unwrap()]);
    assert!(!route.replay_guard);
    assert_eq!(route.retention, Duration::from_secs(7 * 86_400));

    let github = parse(&route_with(
        "scheme = \"github\"\nsecrets = [\"s-0123456789abcdef\"]",
        "",
    ))
    .unwrap();
    assert!(
        github.live.routes[0].replay_guard,
        "on by default: the delivery id is unsigned"
    );
    assert_eq!(
        github.live.routes[0].key[0].to_string(),
        "header:x-github-delivery"
    );

    let svix = parse(&route_with(
        "scheme = \"standard-webhooks\"\nsecrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]\ntolerance = \"2m\"",
        "replay_guard = \"body\"",
    ))
    .unwrap();
    let keys: Vec<String> = svix.live.routes[0]
        .key
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(keys, ["header:webhook-id", "header:svix-id"]);
    assert!(svix.live.routes[0].replay_guard);

    let shopify_off = parse(&route_with(
        "scheme = \"shopify\"\nsecrets = [\"s-0123456789abcdef\"]",
        "replay_guard = \"off\"",
    ))
    .unwrap();
    assert!(!shopify_off.live.routes[0].replay_guard);
}

#[test]
fn provider_scheme_mistakes_are_reported() {
    let bad_b64 = problems(&route_with(
        "scheme = \"standard-webhooks\"\nsecrets = [\"whsec_%%%%%%%%%%%%%%%%\"]",
        "",
    ))
    .join("\n");
    assert!(
        bad_b64.contains("routes[0].verify.secrets: a standard-webhooks secret must be"),
        "{bad_b64}"
    );
    let tolerance = problems(&route_with(
        "scheme = \"github\"\nsecrets = [\"s-0123456789abcdef\"]\ntolerance = \"5m\"",
        "",
    ))
    .join("\n");
    assert!(
        tolerance.contains("routes[0].verify.tolerance: scheme \"github\" has no timestamp"),
        "{tolerance}"
    );
    let no_secret = problems(&route_with("scheme = \"slack\"", "")).join("\n");
    assert!(
        no_secret.contains("routes[0].verify.secrets: list at least one secret"),
        "{no_secret}"
    );
    let header = problems(&route_with(
        "scheme = \"stripe\"\nsecrets = [\"s-0123456789abcdef\"]\nheader = \"X\"",
        "",
    ))
    .join("\n");
    assert!(
        header.contains("`header` only applies to scheme \"hmac\""),
        "{header}"
    );
}

#[test]
fn a_retention_shorter_than_the_retry_horizon_is_a_warning() {
    let config = parse(&route_with(
        "scheme = \"stripe\"\nsecrets = [\"s-0123456789abcdef\"]",
        "retention = \"1d\"",
    ))
    .unwrap();
    assert_eq!(config.warnings.len(), 1);
    assert!(
        config.warnings[0].contains("shorter than stripe's retry horizon of 3d"),
        "{:?}",
        config.warnings
    );
    assert!(config.summary().contains("warning: routes[0].retention"));
}

#[test]
fn weak_secrets_are_refused_for_every_scheme() {
    for verify in [
        "scheme = \"stripe\"\nsecrets = [\"whsec_short\"]",
        "scheme = \"github\"\nsecrets = [\"hunter2\"]",
        "scheme = \"shopify\"\nsecrets = [\"0123456789abcde\"]",
        "scheme = \"slack\"\nsecrets = [\"x\"]",
        "scheme = \"hmac\"\nsecrets = [\"short\"]\nheader = \"X-Sig\"",
    ] {
        let found = problems(&route_with(verify, "key = [\"json:/id\"]")).join("\n");
        assert!(
            found.contains("routes[0].verify.secrets[0]: secret is")
                && found.contains("at least 16 are required"),
            "{verify}: {found}"
        );
    }
    for secret in ["whsec_", "whsec_dGVzdA=="] {
        let verify = format!("scheme = \"standard-webhooks\"\nsecrets = [\"{secret}\"]");
        let found = problems(&route_with(&verify, "")).join("\n");
        assert!(
            found.contains("at least 16 are required"),
            "{secret}: {found}"
        );
    }
    let sixteen = "scheme = \"github\"\nsecrets = [\"0123456789abcdef\"]";
    assert!(parse(&route_with(sixteen, "")).is_ok());
}

#[test]
fn lifetimes_must_hold_together_and_fit() {
    let verify = "scheme = \"stripe\"\nsecrets = [\"whsec_0123456789abcdef\"]";
    let found = problems(&route_with(
        verify,
        "retention = \"20s\"\nprocessing_ttl = \"5s\"\nupstream_timeout = \"30s\"",
    ))
    .join("\n");
    assert!(
        found.contains("routes[0].retention: retention must be longer than upstream_timeout"),
        "{found}"
    );
    let found = problems(&route_with(verify, "retention = \"99999999999d\"")).join("\n");
    assert!(
        found.contains("routes[0].retention: must be at most 3650d"),
        "{found}"
    );
    assert!(parse(&route_with(verify, "retention = \"3650d\"")).is_ok());
}

#[test]
fn check_warns_when_an_unsigned_key_has_no_replay_guard() {
    let github = "scheme = \"github\"\nsecrets = [\"0123456789abcdef\"]";
    let off = parse(&route_with(github, "replay_guard = \"off\"")).unwrap();
    let warning = off.warnings.join("\n");
    assert!(
        warning.contains("header:x-github-delivery is not covered by the github signature"),
        "{warning}"
    );
    assert!(parse(&route_with(github, "")).unwrap().warnings.is_empty());
    let svix =
        "scheme = \"standard-webhooks\"\nsecrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]";
    assert!(
        parse(&route_with(svix, "")).unwrap().warnings.is_empty(),
        "webhook-id is signed"
    );
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
fn dead_letter_settings_have_defaults_and_bounds() {
    let verify = "scheme = \"stripe\"\nsecrets = [\"whsec_0123456789abcdef\"]";
    let config = parse(&route_with(verify, "")).unwrap();
    let route = &config.live.routes[0];
    assert_eq!(route.max_attempts, 0, "unlimited by default");
    assert_eq!(route.dead_letter_status, StatusCode::ACCEPTED);
    assert_eq!(
        route.dead_letter_retention,
        Duration::from_secs(30 * 86_400)
    );

    let config = parse(&route_with(
        verify,
        "max_attempts = 5\ndead_letter_status = 200\ndead_letter_retention = \"90d\"",
    ))
    .unwrap();
    let route = &config.live.routes[0];
    assert_eq!(route.max_attempts, 5);
    assert_eq!(route.dead_letter_status, StatusCode::OK);
    assert_eq!(
        route.dead_letter_retention,
        Duration::from_secs(90 * 86_400)
    );
    assert!(config
        .summary()
        .contains("dead letter after 5 failed attempts (answered 200), kept 90d"));

    let longer = parse(&route_with(verify, "retention = \"60d\"")).unwrap();
    assert_eq!(
        longer.live.routes[0].dead_letter_retention,
        Duration::from_secs(60 * 86_400),
        "never shorter than retention by default"
    );

    let found = problems(&route_with(
        verify,
        "max_attempts = 5000\ndead_letter_status = 99\nretention = \"7d\"\ndead_letter_retention = \"1d\"",
    ))
    .join("\n");
    assert!(
        found.contains("routes[0].max_attempts: must be between 0 (unlimited) and 1000"),
        "{found}"
    );
    assert!(
        found.contains("routes[0].dead_letter_status: must be an HTTP status"),
        "{found}"
    );
    assert!(
        found.contains(
            "routes[0].dead_letter_retention: dead_letter_retention must be at least retention"
        ),
        "{found}"
    );
}

/// The old async defaults, set explicitly, are kept — and `check` says
/// what they mean: about 27 minutes of retries against Stripe's 3 days.
#[test]
fn a_retry_horizon_shorter_than_the_senders_is_a_warning() {
    let verify = "scheme = \"stripe\"\nsecrets = [\"whsec_0123456789abcdef\"]";
    let old = "delivery = \"async\"\nmax_attempts = 12\nretry_backoff = { initial = \"1s\", max = \"10m\" }";
    let config = parse(&route_with(verify, old)).unwrap();
    let route = &config.live.routes[0];
    assert_eq!(route.max_attempts, 12);
    let settings = route.delivery.queue();
    // Eleven waits: 1+2+4+…+512 s, then the 10 min ceiling.
    assert_eq!(settings.horizon(12), Duration::from_secs(1623));
    assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
    assert!(
        config.warnings[0].contains("routes[0]: accepted events are retried for at most ≈27m")
            && config.warnings[0].contains("shorter than stripe's own retry horizon of 3d"),
        "{:?}",
        config.warnings
    );
    assert!(config
        .summary()
        .contains("retried for up to ≈27m (12 attempts), then parked"));
    // A horizon max_age cuts short, and one attempt (no retry at all).
    let capped = AsyncDelivery {
        max_age: Duration::from_secs(60),
        ..settings.clone()
    };
    assert_eq!(capped.horizon(12), Duration::from_secs(60));
    assert_eq!(capped.horizon(0), Duration::from_secs(60));
    assert_eq!(settings.horizon(1), Duration::ZERO);
}

#[test]
fn async_settings_have_defaults_and_belong_to_async_routes() {
    let verify = "scheme = \"stripe\"\nsecrets = [\"whsec_0123456789abcdef\"]";
    let config = parse(&route_with(verify, "delivery = \"async\"")).unwrap();
    let route = &config.live.routes[0];
    let DeliveryMode::Async(settings) = &route.delivery else {
        panic!("async expected");
    };
    assert_eq!(route.max_attempts, 0, "the async default: until max_age");
    assert_eq!(settings.accept_status, StatusCode::ACCEPTED);
    assert_eq!(settings.backoff_initial, Duration::from_secs(5));
    assert_eq!(settings.backoff_max, Duration::from_secs(3600));
    assert_eq!(settings.max_age, Duration::from_secs(3 * 86_400));
    assert_eq!(settings.max_in_flight, 16);
    assert_eq!(settings.respond_within, None);
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    assert!(
        config.summary().contains(
            "async: answers 202 once stored, up to 16 in flight, backoff 5s..1h, retried for up to 3d (max_age), then parked"
        ),
        "{}",
        config.summary()
    );

    let found = problems(&route_with(
        verify,
        "max_in_flight = 4\nrespond_within = \"1s\"",
    ))
    .join("\n");
    assert!(
        found.contains("routes[0].max_in_flight: only for delivery = \"async\""),
        "{found}"
    );
    assert!(
        found.contains("routes[0].respond_within: only for delivery = \"async\""),
        "{found}"
    );

    let found = problems(&route_with(
        verify,
        "delivery = \"async\"\naccept_status = 500\nrespond_within = \"60s\"\nretry_backoff = { initial = \"10s\", max = \"1s\" }\nmax_age = \"40d\"",
    ))
    .join("\n");
    assert!(
        found.contains("routes[0].accept_status: must be a 2xx status"),
        "{found}"
    );
    assert!(
        found.contains(
            "routes[0].respond_within: respond_within must be shorter than upstream_timeout"
        ),
        "{found}"
    );
    assert!(
        found.contains("routes[0].retry_backoff.max: must be at least initial"),
        "{found}"
    );
    assert!(
        found.contains("routes[0].max_age: max_age must be shorter than dead_letter_retention"),
        "{found}"
    );
    let found = problems(&route_with(verify, "delivery = \"later\"")).join("\n");
    assert!(
        found.contains("routes[0].delivery: \"later\" is not one of \"sync\", \"async\""),
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
    let allowed = config.live.routes[0].allow_from.as_ref().unwrap();
    assert_eq!(allowed.len(), 2);
    assert!(parse(&route_with(verify, "")).unwrap().live.routes[0]
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
fn circuit_breaker_and_upstream_rate_parse_with_defaults() {
    let verify = "scheme = \"stripe\"\nsecrets = [\"whsec_0123456789abcdef\"]";
    let config = parse(&route_with(
        verify,
        "circuit_breaker = { failures = 3 }\nupstream_rate = \"300/m\"",
    ))
    .unwrap();
    let route = &config.live.routes[0];
    let breaker = route.circuit_breaker.unwrap();
    assert_eq!(breaker.failures, 3);
    assert_eq!(breaker.window, Duration::from_secs(30));
    assert_eq!(breaker.open_for, Duration::from_secs(30));
    let rate = route.upstream_rate.unwrap();
    assert_eq!(rate.per_second, 5.0);
    assert_eq!(rate.burst, 5, "one second's calls by default");
    let config = parse(&route_with(
        verify,
        "upstream_rate = \"50/s\"\nupstream_burst = 10",
    ))
    .unwrap();
    assert_eq!(config.live.routes[0].upstream_rate.unwrap().burst, 10);
    assert!(config.summary().contains("upstream rate 50/s, burst 10"));

    for (bad, expected) in [
        (
            "upstream_rate = \"fast\"",
            "routes[0].upstream_rate: \"fast\" is not a rate",
        ),
        ("upstream_rate = \"0/s\"", "routes[0].upstream_rate"),
        ("upstream_rate = \"5/d\"", "routes[0].upstream_rate"),
        (
            "upstream_burst = 5",
            "routes[0].upstream_burst: only with upstream_rate",
        ),
        (
            "circuit_breaker = { failures = 0 }",
            "routes[0].circuit_breaker.failures: must be between 1",
        ),
        (
            "circuit_breaker = { open_for = \"soon\" }",
            "routes[0].circuit_breaker.open_for",
        ),
        (
            "circuit_breaker = { failures = 5, windw = \"1s\" }",
            "windw",
        ),
    ] {
        let found = problems(&route_with(verify, bad)).join("\n");
        assert!(found.contains(expected), "{bad}: {found}");
    }
}

#[test]
fn secrets_from_files_are_read_and_watched() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("orders-secret");
    std::fs::write(&secret, "from-a-mounted-file-0123\n").unwrap();
    let text = MINIMAL.replace("${SECRET}", &format!("${{file:{}}}", secret.display()));
    let config = parse(&text).unwrap();
    assert_eq!(
        config.files,
        vec![Path::new("gw.toml").to_owned(), secret.clone()],
        "the config file and the secret it read"
    );
    std::fs::remove_file(&secret).unwrap();
    let found = problems(&text).join("\n");
    assert!(
        found.contains("routes[0].verify.secrets[0]: cannot read"),
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

/// A secret of the shape each sender's dashboard hands out.
fn dashboard_secret(scheme: &str) -> &'static str {
    match scheme {
        "discord" => "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8",
        "adyen" => "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056",
        "sendgrid" => "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1flpVKS3GRqe62gw+2fNNRaINXvVpiglSI8eNEc6wEA3F+g==",
        "standard-webhooks" => "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        _ => "s3cr3t-0123456789abcdef",
    }
}

#[test]
fn every_sender_needs_only_its_scheme_and_secret() {
    for profile in crate::verify::PROFILES {
        if ["hmac", "none"].contains(&profile.name) {
            continue;
        }
        let extra = if profile.signs_url {
            "public_url = \"https://hooks.example.com/r\""
        } else {
            ""
        };
        let verify = format!(
            "scheme = \"{}\"\nsecrets = [\"{}\"]",
            profile.name,
            dashboard_secret(profile.name)
        );
        let config = parse(&route_with(&verify, extra))
            .unwrap_or_else(|error| panic!("{}: {error}", profile.name));
        assert!(
            config.warnings.is_empty(),
            "{}: {:?}",
            profile.name,
            config.warnings
        );
        let route = &config.live.routes[0];
        assert!(!route.key.is_empty(), "{}: a default key", profile.name);
        assert_eq!(
            route.retention, profile.default_retention,
            "{}",
            profile.name
        );
        if let Some(horizon) = profile.retry_horizon {
            assert!(
                profile.default_retention > horizon,
                "{}: retention outlasts the retries",
                profile.name
            );
        }
        let mismatch = if profile.retries_change_body {
            OnMismatch::Replay
        } else {
            OnMismatch::Reject
        };
        assert_eq!(route.on_mismatch, mismatch, "{}", profile.name);
    }
}

#[test]
fn url_signing_schemes_need_their_public_url() {
    let secret = "secrets = [\"s3cr3t-0123456789abcdef\"]";
    for scheme in ["twilio", "square", "hubspot"] {
        let missing =
            problems(&route_with(&format!("scheme = \"{scheme}\"\n{secret}"), "")).join("\n");
        assert!(
            missing.contains(&format!(
                "routes[0]: scheme \"{scheme}\" signs the URL the sender posts to; set `public_url`"
            )),
            "{missing}"
        );
    }
    let stray = problems(&route_with(
        &format!("scheme = \"stripe\"\n{secret}"),
        "public_url = \"https://hooks.example.com/r\"",
    ))
    .join("\n");
    assert!(
        stray.contains("routes[0].public_url: scheme \"stripe\" does not sign the URL"),
        "{stray}"
    );
    for bad in [
        "hooks.example.com/r",
        "ftp://hooks.example.com/r",
        "https://hooks.example.com/r?x=1",
        "https://hooks.example.com/r#top",
    ] {
        let problems = problems(&route_with(
            &format!("scheme = \"twilio\"\n{secret}"),
            &format!("public_url = \"{bad}\""),
        ));
        assert_eq!(problems.len(), 1, "{bad}: {problems:?}");
        assert!(
            problems[0].contains("routes[0].public_url") && problems[0].contains("without query"),
            "{bad}: {problems:?}"
        );
    }
}

#[test]
fn asymmetric_and_hex_keys_are_checked_when_loaded() {
    for (scheme, secret, says) in [
        ("discord", "not-a-hex-public-key-0123", "64 hex digits"),
        (
            "sendgrid",
            "not-a-base64-public-key-0123",
            "P-256 public key",
        ),
        ("adyen", "not-a-hex-hmac-key-0123456", "hex"),
    ] {
        let problems = problems(&route_with(
            &format!("scheme = \"{scheme}\"\nsecrets = [\"{secret}\"]"),
            "",
        ))
        .join("\n");
        assert!(
            problems.contains("routes[0].verify.secrets") && problems.contains(says),
            "{scheme}: {problems}"
        );
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
fn a_lowered_min_secret_bytes_admits_a_short_secret_with_a_warning() {
    // octokit's own test vectors use secrets of 3-11 bytes.
    let short = "scheme = \"github\"\nsecrets = [\"secret\"]";
    let refused = problems(&route_with(short, "")).join("\n");
    assert!(
        refused.contains("secret is 6 bytes; at least 16") && refused.contains("min_secret_bytes"),
        "{refused}"
    );
    let lowered = parse(&route_with(&format!("{short}\nmin_secret_bytes = 6"), "")).unwrap();
    let warnings = lowered.warnings.join("\n");
    assert!(
        warnings.contains("routes[0].verify.min_secret_bytes") && warnings.contains("6 bytes"),
        "{warnings}"
    );
    let still_short = route_with(&format!("{short}\nmin_secret_bytes = 7"), "");
    assert!(problems(&still_short).join("\n").contains("at least 7"));
    // Standard Webhooks counts the decoded key: 8 bytes behind whsec_.
    let svix = "scheme = \"standard-webhooks\"\nsecrets = [\"whsec_MDEyMzQ1Njc=\"]";
    assert!(parse(&route_with(svix, "")).is_err());
    assert!(parse(&route_with(&format!("{svix}\nmin_secret_bytes = 8"), "")).is_ok());
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
