//! `[[routes.destinations]]`: each a delivery of its own with the route's
//! settings as defaults, and every mistake a located error.

use super::*;

/// The async route `stripe` with `destinations` (TOML tables) appended.
fn with_destinations(route_extra: &str, destinations: &str) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:8080"
[store]
backend = "memory"
[[routes]]
name = "stripe"
path = "/webhooks/stripe"
key = ["json:/id"]
max_attempts = 7
{route_extra}
[routes.verify]
scheme = "hmac"
secrets = ["${{SECRET}}"]
header = "X-Signature"
{destinations}
"#
    )
}

const TWO: &str = r#"
[[routes.destinations]]
name = "billing"
upstream = "http://billing:3000/stripe"
filter = { "json:/type" = ["invoice.*", "charge.succeeded"] }
max_in_flight = 2
retry_backoff = { initial = "1s", max = "10s" }
[[routes.destinations]]
name = "crm"
upstream = "http://crm:8080/hooks"
idempotency_header = "X-Event-Key"
"#;

#[test]
fn each_destination_is_a_delivery_of_its_own_with_the_routes_defaults() {
    let config = parse(&with_destinations("delivery = \"async\"", TWO)).unwrap();
    let route = &config.live.routes[0];
    assert!(route.fans_out());
    let names: Vec<&str> = route.destinations.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["stripe/billing", "stripe/crm"]);
    let billing = route.destination("billing").unwrap();
    assert_eq!(
        (billing.route_name(), billing.destination_name()),
        ("stripe", "billing")
    );
    assert_eq!(billing.keying.scope, "stripe/billing");
    assert_eq!(billing.call.upstream, "http://billing:3000/stripe");
    assert!(billing.filter.is_some());
    assert_eq!(billing.failures.max_attempts, 7, "the route's, by default");
    let DeliveryMode::Async(queue) = &billing.delivery else {
        panic!("async");
    };
    assert_eq!(queue.max_in_flight, 2);
    assert_eq!(queue.backoff_initial, Duration::from_secs(1));
    let crm = route.destination("crm").unwrap();
    assert!(crm.filter.is_none(), "no filter: every event");
    assert_eq!(
        crm.keying.idempotency_header.as_ref().unwrap(),
        "x-event-key"
    );
    let DeliveryMode::Async(queue) = &crm.delivery else {
        panic!("async");
    };
    assert_eq!(queue.max_in_flight, 16, "the route's");
    assert_eq!(
        config.live.scopes(),
        ["stripe", "stripe/billing", "stripe/crm"]
    );
    let summary = config.summary();
    assert!(
        summary.contains("destination billing -> http://billing:3000/stripe"),
        "{summary}"
    );
}

#[test]
fn mistakes_are_located() {
    let found = problems(&with_destinations("", TWO)).join("\n");
    assert!(
        found.contains("routes[0].destinations: several destinations need delivery = \"async\""),
        "{found}"
    );
    let twice = TWO.replace("name = \"crm\"", "name = \"billing\"");
    let found = problems(&with_destinations("delivery = \"async\"", &twice)).join("\n");
    assert!(
        found
            .contains("routes[0].destinations[1].name: destination name \"billing\" is used twice"),
        "{found}"
    );
    let bad = TWO.replace("\"json:/type\"", "\"jsn:/type\"");
    let found = problems(&with_destinations("delivery = \"async\"", &bad)).join("\n");
    assert!(
        found.contains("routes[0].destinations[0].filter.jsn:/type"),
        "{found}"
    );
    let both = with_destinations("delivery = \"async\"\nupstream = \"http://x/\"", TWO);
    let found = problems(&both).join("\n");
    assert!(
        found.contains("routes[0].upstream: a route has one `upstream` or several"),
        "{found}"
    );
    let found = problems(&with_destinations("delivery = \"async\"", "")).join("\n");
    assert!(
        found.contains("routes[0]: missing field `upstream`"),
        "{found}"
    );
    let hybrid = with_destinations("delivery = \"async\"\nrespond_within = \"1s\"", TWO);
    let found = problems(&hybrid).join("\n");
    assert!(
        found.contains("respond_within forwards to one upstream"),
        "{found}"
    );
    let upper = TWO.replace("name = \"crm\"", "name = \"CRM\"");
    let found = problems(&with_destinations("delivery = \"async\"", &upper)).join("\n");
    assert!(
        found.contains("routes[0].destinations[1].name: \"CRM\" must match [a-z0-9_-]+"),
        "{found}"
    );
}
