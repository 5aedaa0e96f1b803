//! Every scheme of code under arbitrary headers, and the timestamp
//! tolerance at its edges.

use http::HeaderValue;
use proptest::prelude::*;

use super::*;

/// Every scheme's verifier (but `none`), and the headers each reads.
fn every_scheme() -> Vec<(Verifier, &'static [&'static str])> {
    let spec = |secret: &str| VerifySpec {
        secrets: vec![Secret::new(secret)],
        tolerance: DEFAULT_TOLERANCE,
        hmac: Some(HmacOptions {
            header: HeaderName::from_static("x-signature"),
            algorithm: Algorithm::Sha512,
            encoding: Encoding::Base64,
            prefix: "sha512=".into(),
        }),
        public_url: Some("https://hooks.example.com/webhooks".into()),
        min_secret_bytes: MIN_SECRET_BYTES,
        handshake_token: None,
        fetch: None,
        topics: vec![],
        params: Default::default(),
    };
    let headers = |name: &str| -> &'static [&'static str] {
        match name {
            "github" => &["x-hub-signature-256"],
            "gitlab" => &["x-gitlab-token"],
            "linear" => &["linear-signature"],
            "twilio" => &["x-twilio-signature"],
            "square" => &["x-square-hmacsha256-signature"],
            "intercom" => &["x-hub-signature"],
            // Mailgun and Adyen sign in the body: no header helps.
            "mailgun" | "adyen" => &["x-mailgun-signature"],
            "aws-sns" => &["x-amz-sns-message-type"],
            "sendgrid" => &[
                "x-twilio-email-event-webhook-signature",
                "x-twilio-email-event-webhook-timestamp",
            ],
            "discord" => &["x-signature-ed25519", "x-signature-timestamp"],
            "zoom" => &["x-zm-signature", "x-zm-request-timestamp"],
            "hubspot" => &["x-hubspot-signature-v3", "x-hubspot-request-timestamp"],
            "typeform" => &["typeform-signature"],
            "woocommerce" => &["x-wc-webhook-signature"],
            "shopify" => &["x-shopify-hmac-sha256"],
            "slack" => &["x-slack-signature", "x-slack-request-timestamp"],
            "standard-webhooks" => &[
                "webhook-id",
                "webhook-timestamp",
                "webhook-signature",
                "svix-signature",
            ],
            "hmac" => &["x-signature"],
            other => panic!("no headers listed for scheme {other:?}"),
        }
    };
    // What each dashboard hands out: a token, a hex or base64 key.
    let secret = |name: &str| {
        match name {
        "discord" => "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8",
        "adyen" => "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056",
        "sendgrid" => "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1flpVKS3GRqe62gw+2fNNRaINXvVpiglSI8eNEc6wEA3F+g==",
        _ => "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    }
    };
    CODE.iter()
        .filter(|profile| profile.name != "none")
        .map(|profile| {
            let verifier = profile.verifier(spec(secret(profile.name)), false).unwrap();
            (verifier, headers(profile.name))
        })
        .collect()
}

/// Header values shaped like signatures: their separators, prefixes and
/// alphabets in random order, plus plain noise.
pub(crate) fn header_value() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("t=".to_owned()),
        Just("v1=".to_owned()),
        Just("timestamp=".to_owned()),
        Just("signature=".to_owned()),
        Just("v1,".to_owned()),
        Just("v0=".to_owned()),
        Just("sha256=".to_owned()),
        Just(",".to_owned()),
        Just(" ".to_owned()),
        Just("=".to_owned()),
        "[0-9]{1,20}",
        "[0-9a-f]{1,128}",
        "[A-Za-z0-9+/=_-]{1,90}",
        "[ -~]{0,40}",
    ];
    proptest::collection::vec(piece, 0..12).prop_map(|pieces| pieces.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_headers_never_panic_or_pass(
        values in proptest::collection::vec(header_value(), 4),
        raw in proptest::collection::vec(any::<u8>(), 0..200),
        body in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_614_265_330);
        for (verifier, names) in every_scheme() {
            let mut headers = HeaderMap::new();
            for (name, value) in names.iter().zip(&values) {
                headers.append(*name, HeaderValue::from_str(value).unwrap());
            }
            if let Ok(value) = HeaderValue::from_bytes(&raw) {
                headers.append(names[0], value);
            }
            prop_assert!(verifier.verify(RequestLine::POST, &headers, &body, now).is_err());
        }
    }
}

#[test]
fn timestamps_are_checked_both_ways_at_the_edges() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    let five_minutes = Duration::from_secs(300);
    for (ts, ok) in [
        ("999701", true),  // 299 s old
        ("999700", true),  // exactly 300 s
        ("999699", false), // 301 s old
        ("1000299", true), // 299 s ahead
        ("1000301", false),
    ] {
        let result = check_timestamp(ts, now, five_minutes);
        assert_eq!(result.is_ok(), ok, "{ts}");
        if !ok {
            assert_eq!(result, Err(VerifyError::TimestampOutOfTolerance));
        }
    }
    assert_eq!(
        check_timestamp("12a", now, five_minutes),
        Err(VerifyError::SignatureInvalid)
    );
    assert_eq!(
        check_timestamp("", now, five_minutes),
        Err(VerifyError::SignatureInvalid)
    );
    assert_eq!(
        check_timestamp("99999999999999999999999", now, five_minutes),
        Err(VerifyError::SignatureInvalid)
    );
}

/// What a route with `secret` and no other settings gives its verifier.
pub(crate) fn spec_of(secret: &Secret) -> VerifySpec {
    VerifySpec {
        secrets: vec![secret.clone()],
        tolerance: DEFAULT_TOLERANCE,
        hmac: None,
        public_url: None,
        min_secret_bytes: 1,
        handshake_token: None,
        fetch: None,
        topics: vec![],
        params: Default::default(),
    }
}

/// What hookgate signs as a sender (an event reconciliation fetched from
/// the sender's API) passes that sender's own verifier, and only with its
/// body: for every sender described as data that signs with a secret.
#[test]
fn what_hookgate_signs_as_a_sender_its_verifier_accepts() {
    let whsec = Secret::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
    let at = 1_733_230_000;
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(at);
    let body = br#"{"id":"evt_1","event_id":"evt_1","type":"charge.succeeded"}"#;
    let mut signed = Vec::new();
    for profile in PROFILES.iter() {
        let Some(described) = profile.described else {
            continue;
        };
        // A secret in the form the sender shows it.
        let secret = match described.secret_encoding {
            Some(encoding) => Secret::new(encoding.encode(b"a key of sixteen bytes or more")),
            None => whsec.clone(),
        };
        let headers = match profile.sign(&secret, at, body) {
            Ok(headers) => headers,
            Err(why) => {
                let covers_more = (described.signed.iter()).any(|piece| {
                    matches!(piece, described::Piece::Header(_) | described::Piece::Url)
                });
                assert!(
                    described.signer.is_asymmetric() || covers_more || described.jwt.is_some(),
                    "{}: {why}",
                    profile.name
                );
                continue;
            }
        };
        let verifier = profile.verifier(spec_of(&secret), false).unwrap();
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(name, HeaderValue::from_str(&value).unwrap());
        }
        let verdict = verifier.verify(RequestLine::POST, &map, body, now);
        assert_eq!(verdict, Ok(()), "{}: {map:?}", profile.name);
        // A token binds no body: any body passes with it.
        let changed = verifier.verify(RequestLine::POST, &map, b"{}", now);
        let token = described.signer == described::Signer::Token;
        let expected = if token {
            Ok(())
        } else {
            Err(VerifyError::SignatureInvalid)
        };
        assert_eq!(changed, expected, "{}", profile.name);
        signed.push(profile.name);
    }
    assert!(
        signed.contains(&"stripe") && signed.len() >= 40,
        "{signed:?}"
    );
}

/// Stripe's `whsec_…` secret signs as written: the same secret base64
/// decoded does not verify.
#[test]
fn stripes_secret_is_used_as_written() {
    let stripe = Profile::named("stripe").unwrap();
    let (at, body) = (1_492_774_577, b"{}".as_slice());
    let headers = stripe
        .sign(&Secret::new("whsec_test_secret"), at, body)
        .unwrap();
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        map.append(name, HeaderValue::from_str(&value).unwrap());
    }
    let decoded = Secret::new("test_secret");
    let verifier = stripe.verifier(spec_of(&decoded), false).unwrap();
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(at);
    let verdict = verifier.verify(RequestLine::POST, &map, body, now);
    assert_eq!(verdict, Err(VerifyError::SignatureInvalid));
}
