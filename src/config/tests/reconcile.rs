//! `[routes.reconcile]`: the sender matches the route, the window fits
//! both retentions, the credentials are read (and never shown), the API
//! is reached over https.

use super::*;

/// A Stripe (or GitHub, by `scheme`) route with `reconcile` lines, its
/// key file holding `sk_test_…`.
fn reconciling(scheme: &str, extra: &str, reconcile: &str) -> (String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, "rk_test_0123456789abcdef\n").unwrap();
    let text = route_with(
        &format!("scheme = \"{scheme}\"\nsecrets = [\"${{SECRET}}\"]"),
        extra,
    ) + &format!(
        "[routes.reconcile]\ncredentials_file = \"{}\"\n{reconcile}\n",
        key.display()
    );
    (text, dir)
}

#[test]
fn a_stripe_route_reconciles_with_the_senders_defaults() {
    let (text, _dir) = reconciling("stripe", "", "sender = \"stripe\"");
    let config = parse(&text).unwrap();
    let reconcile = config.live.routes[0].reconcile.clone().unwrap();
    assert_eq!(reconcile.sender.name, "stripe");
    assert_eq!(reconcile.api_base, "https://api.stripe.com");
    assert_eq!(reconcile.every, Duration::from_secs(300));
    assert_eq!(reconcile.lookback, Duration::from_secs(3 * 86_400));
    assert_eq!(reconcile.credentials.expose(), b"rk_test_0123456789abcdef");
    assert_eq!(
        reconcile
            .signing_secret
            .as_ref()
            .map(|s| s.expose().to_vec()),
        Some(b"whsec_test_0123456789".to_vec()),
        "signed with the route's first secret"
    );
    assert!(!format!("{reconcile:?}").contains("rk_test"), "never shown");
    let summary = config.summary();
    assert!(!summary.contains("rk_test"), "{summary}");
    assert!(
        summary.contains(
            "reconciles with stripe every 5m, 3d back (https://api.stripe.com; credentials "
        ),
        "{summary}"
    );
}

#[test]
fn a_window_beyond_either_retention_is_refused() {
    // Stripe lists 30 days; the route forgets completed events after 7.
    let (text, _dir) = reconciling("stripe", "", "sender = \"stripe\"\nlookback = \"10d\"");
    let found = problems(&text).join("\n");
    assert!(
        found.contains("at most the route's retention (7d)"),
        "{found}"
    );
    let (text, _dir) = reconciling(
        "stripe",
        "retention = \"60d\"\ndead_letter_retention = \"60d\"",
        "sender = \"stripe\"\nlookback = \"31d\"",
    );
    let found = problems(&text).join("\n");
    assert!(found.contains("stripe's API lists 30d back"), "{found}");
}

#[test]
fn the_sender_the_api_and_the_hook_are_checked() {
    let (text, _dir) = reconciling("stripe", "", "sender = \"github\"");
    let found = problems(&text).join("\n");
    assert!(
        found.contains(r#"routes of scheme "github"; this route's is "stripe""#),
        "{found}"
    );
    assert!(found.contains("needs the hook"), "{found}");

    let (text, _dir) = reconciling(
        "stripe",
        "",
        "sender = \"stripe\"\napi_base = \"http://stripe.internal\"",
    );
    let found = problems(&text).join("\n");
    assert!(found.contains("must be an https:// URL"), "{found}");

    let (text, _dir) = reconciling(
        "github",
        "",
        "sender = \"github\"\nhook = \"repos/octo/../hooks/1\"",
    );
    let found = problems(&text).join("\n");
    assert!(
        found.contains(r#"is not "repos/OWNER/REPO/hooks/ID""#),
        "{found}"
    );

    let (text, _dir) = reconciling(
        "github",
        "key = [\"json:/id\"]",
        "sender = \"github\"\nhook = \"orgs/octo/hooks/7\"",
    );
    let found = problems(&text).join("\n");
    assert!(found.contains("needs the route's default key"), "{found}");

    let (text, _dir) = reconciling(
        "github",
        "",
        "sender = \"github\"\nhook = \"orgs/octo/hooks/7\"",
    );
    let config = parse(&text).unwrap();
    let reconcile = config.live.routes[0].reconcile.clone().unwrap();
    assert_eq!(reconcile.hook.as_deref(), Some("orgs/octo/hooks/7"));
    assert!(
        reconcile.signing_secret.is_none(),
        "GitHub signs what it sends again"
    );
}

#[test]
fn missing_credentials_are_a_located_problem() {
    let text = route_with("scheme = \"stripe\"\nsecrets = [\"${SECRET}\"]", "")
        + "[routes.reconcile]\nsender = \"stripe\"\ncredentials_file = \"/nonexistent/key\"\n";
    let found = problems(&text).join("\n");
    assert!(found.contains("cannot read /nonexistent/key"), "{found}");
    assert!(
        found.contains("routes[0].reconcile.credentials_file"),
        "{found}"
    );
}
