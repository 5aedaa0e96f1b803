//! How a route delivers: lifetimes and retry horizons, dead letters, async
//! delivery's settings, the circuit breaker and the upstream rate.

use super::*;

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
fn dead_letter_settings_have_defaults_and_bounds() {
    let verify = "scheme = \"stripe\"\nsecrets = [\"whsec_0123456789abcdef\"]";
    let config = parse(&route_with(verify, "")).unwrap();
    let route = &config.live.routes[0];
    assert_eq!(route.failures.max_attempts, 0, "unlimited by default");
    assert_eq!(route.failures.dead_letter_status, StatusCode::ACCEPTED);
    assert_eq!(
        route.failures.dead_letter_retention,
        Duration::from_secs(30 * 86_400)
    );

    let config = parse(&route_with(
        verify,
        "max_attempts = 5\ndead_letter_status = 200\ndead_letter_retention = \"90d\"",
    ))
    .unwrap();
    let route = &config.live.routes[0];
    assert_eq!(route.failures.max_attempts, 5);
    assert_eq!(route.failures.dead_letter_status, StatusCode::OK);
    assert_eq!(
        route.failures.dead_letter_retention,
        Duration::from_secs(90 * 86_400)
    );
    assert!(config
        .summary()
        .contains("dead letter after 5 failed attempts (answered 200), kept 90d"));

    let longer = parse(&route_with(verify, "retention = \"60d\"")).unwrap();
    assert_eq!(
        longer.live.routes[0].failures.dead_letter_retention,
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
    assert_eq!(route.failures.max_attempts, 12);
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
    assert_eq!(
        route.failures.max_attempts, 0,
        "the async default: until max_age"
    );
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
fn circuit_breaker_and_upstream_rate_parse_with_defaults() {
    let verify = "scheme = \"stripe\"\nsecrets = [\"whsec_0123456789abcdef\"]";
    let config = parse(&route_with(
        verify,
        "circuit_breaker = { failures = 3 }\nupstream_rate = \"300/m\"",
    ))
    .unwrap();
    let route = &config.live.routes[0];
    let breaker = route.traffic.circuit_breaker.unwrap();
    assert_eq!(breaker.failures, 3);
    assert_eq!(breaker.window, Duration::from_secs(30));
    assert_eq!(breaker.open_for, Duration::from_secs(30));
    let rate = route.traffic.upstream_rate.unwrap();
    assert_eq!(rate.per_second, 5.0);
    assert_eq!(rate.burst, 5, "one second's calls by default");
    let config = parse(&route_with(
        verify,
        "upstream_rate = \"50/s\"\nupstream_burst = 10",
    ))
    .unwrap();
    assert_eq!(
        config.live.routes[0].traffic.upstream_rate.unwrap().burst,
        10
    );
    assert!(config.summary().contains("upstream rate 50/s, burst 10"));

    for (bad, expected) in [
        (
            "upstream_rate = \"fast\"",
            "routes[0].upstream_rate: \"fast\" is not a rate",
        ),
        ("upstream_rate = \"0/s\"", "routes[0].upstream_rate"),
        ("upstream_rate = \"5/d\"", "routes[0].upstream_rate"),
        // Slower than one an hour: its waits would not fit a timer.
        ("upstream_rate = \"1e-300/s\"", "routes[0].upstream_rate"),
        ("upstream_rate = \"0.5/h\"", "routes[0].upstream_rate"),
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
fn filters_compile_at_load_with_located_problems() {
    let verify = "scheme = \"stripe\"\nsecrets = [\"whsec_0123456789abcdef\"]";
    let config = parse(&route_with(
        verify,
        "filter = { \"json:/type\" = [\"invoice.*\", \"charge.succeeded\"] }",
    ))
    .unwrap();
    let filter = config.live.routes[0].filter.as_ref().unwrap();
    let passes = |body: &str| filter.passes(&HeaderMap::new(), body.as_bytes(), "");
    assert!(passes(r#"{"type":"invoice.paid"}"#));
    assert!(!passes(r#"{"type":"customer.created"}"#));
    assert!(
        (config.summary()).contains("forwards only json:/type = invoice.* | charge.succeeded"),
        "{}",
        config.summary()
    );
    for (bad, expected) in [
        (
            "filter = { \"jsn:/type\" = \"x\" }",
            "routes[0].filter.jsn:/type: \"jsn:/type\" is not a key source",
        ),
        (
            "filter = { \"json:/type\" = 3 }",
            "routes[0].filter.json:/type: patterns are strings",
        ),
        (
            "filter = { \"json:/type\" = [] }",
            "routes[0].filter.json:/type: give 1 to 100 patterns",
        ),
        (
            "filter = {}",
            "routes[0].filter: name at least one key source",
        ),
    ] {
        let found = problems(&route_with(verify, bad)).join("\n");
        assert!(found.contains(expected), "{bad}: {found}");
    }
}
