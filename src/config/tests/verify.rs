//! How a route verifies: the senders' schemes and their defaults, secrets
//! (strength, files, formats) and the replay guard's warnings.

use super::*;

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
    assert_eq!(route.verify.scheme.name, "none");
    let now = crate::clock::wall();
    assert_eq!(
        route.verify.verifier.verify(
            crate::verify::RequestLine::POST,
            &HeaderMap::new(),
            b"x",
            now
        ),
        Ok(())
    );
}

#[test]
fn provider_schemes_bring_their_defaults() {
    let stripe = parse(&route_with(
        "scheme = \"stripe\"\nsecrets = [\"whsec_x0123456789abcdef\"]",
        "",
    ))
    .unwrap();
    let route = &stripe.live.routes[0];
    assert_eq!(route.keying.key, [KeySource::parse("json:/id").unwrap()]);
    assert!(!route.claim.replay_guard);
    assert_eq!(route.claim.retention, Duration::from_secs(7 * 86_400));

    let github = parse(&route_with(
        "scheme = \"github\"\nsecrets = [\"s-0123456789abcdef\"]",
        "",
    ))
    .unwrap();
    assert!(
        github.live.routes[0].claim.replay_guard,
        "on by default: the delivery id is unsigned"
    );
    assert_eq!(
        github.live.routes[0].keying.key[0].to_string(),
        "header:x-github-delivery"
    );

    let svix = parse(&route_with(
        "scheme = \"standard-webhooks\"\nsecrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]\ntolerance = \"2m\"",
        "replay_guard = \"body\"",
    ))
    .unwrap();
    let keys: Vec<String> = svix.live.routes[0]
        .keying
        .key
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(keys, ["header:webhook-id", "header:svix-id"]);
    assert!(svix.live.routes[0].claim.replay_guard);

    let shopify_off = parse(&route_with(
        "scheme = \"shopify\"\nsecrets = [\"s-0123456789abcdef\"]",
        "replay_guard = \"off\"",
    ))
    .unwrap();
    assert!(!shopify_off.live.routes[0].claim.replay_guard);
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

/// A secret of the shape each sender's dashboard hands out.
fn dashboard_secret(scheme: &str) -> &'static str {
    match scheme {
        "discord" => "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8",
        "adyen" => "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056",
        "sendgrid" => "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1flpVKS3GRqe62gw+2fNNRaINXvVpiglSI8eNEc6wEA3F+g==",
        "standard-webhooks" => "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "telnyx" => "A6EHv/POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg=",
        _ => as_its_vector(scheme).unwrap_or("s3cr3t-0123456789abcdef"),
    }
}

/// The secret of a shipped sender whose secret has a form of its own — a
/// Standard Webhooks `whsec_`, a public key — as its vector has it.
fn as_its_vector(name: &str) -> Option<&'static str> {
    static CATALOGUE: std::sync::LazyLock<crate::verify::Catalogue> =
        std::sync::LazyLock::new(|| toml::from_str(crate::verify::SENDERS).unwrap());
    let raw = CATALOGUE.schemes.iter().find(|raw| raw.name == name)?;
    let profile = crate::verify::Profile::named(name)?;
    let own_form = raw.builds_on.is_some()
        || (profile.described).is_some_and(|described| {
            described.signer.is_asymmetric() || described.secret_encoding.is_some()
        });
    own_form.then(|| raw.vectors.first().map(|vector| vector.secret.as_str()))?
}

/// Every sender needs its scheme and its secret (or key) alone — but what
/// its signature covers of the route's own (`public_url`, `params`).
#[test]
fn every_sender_needs_only_its_scheme_and_secret() {
    for profile in crate::verify::PROFILES.iter() {
        if ["hmac", "none"].contains(&profile.name) {
            continue;
        }
        let extra = if profile.signs_url {
            "public_url = \"https://hooks.example.com/r\""
        } else {
            ""
        };
        let token = match profile.challenge().and_then(|c| c.token.as_ref()) {
            Some(_) => "\nhandshake_token = \"verify-me\"",
            None => "",
        };
        // What the scheme signs of the route's own (PayPal's webhook id).
        let params: Vec<String> = (profile.described.iter())
            .flat_map(|d| d.params())
            .map(|name| format!("{name} = \"WH-1\""))
            .collect();
        let token = match params.is_empty() {
            true => token.to_owned(),
            false => format!("{token}\nparams = {{ {} }}", params.join(", ")),
        };
        let verify = if profile.fetches_key && profile.described.is_some() {
            // Its key is fetched from the sender's pinned hosts.
            format!("scheme = \"{}\"{token}", profile.name)
        } else if profile.fetches_key {
            format!(
                "scheme = \"{}\"\ntopics = [\"arn:aws:sns:us-east-1:1:t\"]",
                profile.name
            )
        } else {
            format!(
                "scheme = \"{}\"\nsecrets = [{}]{token}",
                profile.name,
                serde_json::to_string(dashboard_secret(profile.name)).unwrap()
            )
        };
        let parsed = parse(&route_with(&verify, extra));
        if profile.default_key.is_empty() {
            // A sender with no event id and nothing safe to stand for one.
            let error = parsed.unwrap_err().to_string();
            assert!(
                error.contains("has no default key"),
                "{}: {error}",
                profile.name
            );
            continue;
        }
        let config = parsed.unwrap_or_else(|error| panic!("{}: {error}", profile.name));
        assert!(
            config.warnings.is_empty(),
            "{}: {:?}",
            profile.name,
            config.warnings
        );
        let route = &config.live.routes[0];
        assert!(
            !route.keying.key.is_empty(),
            "{}: a default key",
            profile.name
        );
        assert_eq!(
            route.claim.retention, profile.default_retention,
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
        assert_eq!(route.keying.on_mismatch, mismatch, "{}", profile.name);
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
fn sns_routes_list_their_topics_and_no_secrets() {
    let topics = "topics = [\"arn:aws:sns:us-east-1:123456789012:orders\"]";
    for (verify, says) in [
        (
            "scheme = \"aws-sns\"",
            "routes[0].verify.topics: scheme \"aws-sns\" proves only",
        ),
        (
            &format!("scheme = \"aws-sns\"\n{topics}\nsecrets = [\"s3cr3t-0123456789abcdef\"]"),
            "routes[0].verify.secrets: scheme \"aws-sns\" has no secret",
        ),
        (
            &format!("scheme = \"aws-sns\"\n{topics}\ncert_hosts = [\"sns.*.amazonaws.com:http\"]"),
            "routes[0].verify.cert_hosts[0]:",
        ),
        (
            "scheme = \"github\"\nsecrets = [\"s3cr3t-0123456789abcdef\"]\ntopics = [\"t\"]",
            "routes[0].verify.topics: scheme \"github\" fetches no key",
        ),
        (
            "scheme = \"github\"\nsecrets = [\"s3cr3t-0123456789abcdef\"]\ncert_ca = \"ca.pem\"",
            "routes[0].verify.cert_ca: scheme \"github\" fetches no key",
        ),
    ] {
        let found = problems(&route_with(verify, "")).join("\n");
        assert!(found.contains(says), "{verify}: {found}");
    }
    let config = parse(&route_with(&format!("scheme = \"aws-sns\"\n{topics}"), "")).unwrap();
    let route = &config.live.routes[0];
    assert_eq!(route.keying.key[0].to_string(), "json:/MessageId");
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    let local = format!("scheme = \"aws-sns\"\n{topics}\ncert_hosts = [\"sns.*.amazonaws.com\", \"localhost:8443\"]");
    let config = parse(&route_with(&local, "")).unwrap();
    assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
    assert!(
        config.warnings[0].contains("\"localhost:8443\""),
        "{:?}",
        config.warnings
    );
}
