//! `scheme = "aws-sns"`: Amazon SNS signs each HTTPS delivery with the
//! private key of a certificate it publishes, and names that certificate's
//! URL in the message (docs.aws.amazon.com/sns/latest/dg/sns-verify-signature-of-message.html).
//!
//! The signed text is the message's own fields, `Name\nvalue\n` in a fixed
//! order; `SignatureVersion` 1 is RSA with SHA-1, 2 with SHA-256. The
//! certificate — a `.pem` document — is fetched only from an allowed host
//! (`cert_hosts`, SNS's own by default) and kept ([`super::fetched`]). An SNS signature proves only
//! that SNS sent the message — any AWS account can subscribe a URL to its
//! topic — so a route lists the topics it accepts (`topics`), and a
//! verified message from another topic is refused with 403.
//!
//! A `SubscriptionConfirmation` from a listed topic is confirmed by the
//! gateway (a GET of its `SubscribeURL`, on an allowed host) and answered
//! 200, never forwarded; an `UnsubscribeConfirmation` is answered 200. A
//! notification is forwarded once, keyed by its signed `MessageId`.
//! Raw message delivery carries no signature and cannot be verified.

use std::time::{Duration, SystemTime};

use futures_util::future::BoxFuture;
use http::{HeaderMap, StatusCode};
use ring::signature::{
    UnparsedPublicKey, VerificationAlgorithm, RSA_PKCS1_2048_8192_SHA1_FOR_LEGACY_USE_ONLY,
    RSA_PKCS1_2048_8192_SHA256,
};
use serde::Deserialize;

use super::fetched::{sns_hosts, FetchSpec, Fetcher};
use super::{Handshake, Profile, Reply, RequestLine, Verifier, Verify, VerifyError, DAY, HOUR};
use crate::key::OnMissingKey;

pub static PROFILE: Profile = Profile {
    name: "aws-sns",
    default_key: &["json:/MessageId"],
    // An HTTPS subscription's delivery policy retries for at most an hour
    // (by default three retries 20 s apart; docs: sns-message-delivery-retries).
    retry_horizon: Some(Duration::from_secs(HOUR)),
    default_retention: Duration::from_secs(DAY),
    replay_guard: false,
    timestamped: false,
    signed_headers: &[],
    signs_url: false,
    retries_change_body: false,
    retries_itself: true,
    on_missing_key: OnMissingKey::Reject,
    fetches_key: true,
    described: None,
    build: |spec| {
        let fetch = spec.fetch.unwrap_or_else(|| FetchSpec {
            hosts: sns_hosts(),
            roots: vec![],
        });
        Ok(Verifier::new(SnsVerifier {
            fetcher: Fetcher::new(&fetch)?,
            topics: spec.topics,
        }))
    },
};

/// The fields of an SNS message that are signed or say how.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Message {
    #[serde(rename = "Type")]
    kind: String,
    message_id: String,
    topic_arn: String,
    message: String,
    timestamp: String,
    subject: Option<String>,
    token: Option<String>,
    #[serde(rename = "SubscribeURL")]
    subscribe_url: Option<String>,
    signature_version: String,
    signature: String,
    #[serde(rename = "SigningCertURL")]
    signing_cert_url: String,
}

impl Message {
    fn parse(body: &[u8]) -> Result<Message, VerifyError> {
        serde_json::from_slice(body).map_err(|_| VerifyError::SignatureInvalid)
    }

    /// The text SNS signed: each field as `Name\nvalue\n`, in its order.
    fn signed_text(&self) -> Result<String, VerifyError> {
        let mut fields: Vec<(&str, &str)> = vec![("Message", &self.message)];
        fields.push(("MessageId", &self.message_id));
        match self.kind.as_str() {
            "Notification" => {
                if let Some(subject) = &self.subject {
                    fields.push(("Subject", subject));
                }
            }
            "SubscriptionConfirmation" | "UnsubscribeConfirmation" => {
                let url = self.subscribe_url.as_deref();
                fields.push(("SubscribeURL", url.ok_or(VerifyError::SignatureInvalid)?));
            }
            _ => return Err(VerifyError::SignatureInvalid),
        }
        fields.push(("Timestamp", &self.timestamp));
        if self.kind != "Notification" {
            let token = self.token.as_deref();
            fields.push(("Token", token.ok_or(VerifyError::SignatureInvalid)?));
        }
        fields.push(("TopicArn", &self.topic_arn));
        fields.push(("Type", &self.kind));
        Ok(fields
            .iter()
            .map(|(name, value)| format!("{name}\n{value}\n"))
            .collect())
    }

    fn algorithm(&self) -> Result<&'static dyn VerificationAlgorithm, VerifyError> {
        match self.signature_version.as_str() {
            "1" => Ok(&RSA_PKCS1_2048_8192_SHA1_FOR_LEGACY_USE_ONLY),
            "2" => Ok(&RSA_PKCS1_2048_8192_SHA256),
            _ => Err(VerifyError::SignatureInvalid),
        }
    }
}

/// Whether `pem`, a certificate valid at `now`, signed `message`. A
/// document that is not a certificate is the sender's fault, not the
/// delivery's: `SenderUnreachable`, so the sender retries.
fn signed_by(pem: &[u8], message: &Message, now: SystemTime) -> Result<(), VerifyError> {
    let unusable = |why: &str| {
        tracing::warn!(url = %message.signing_cert_url, "the SNS signing certificate is unusable: {why}");
        VerifyError::SenderUnreachable
    };
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem).map_err(|_| unusable("not PEM"))?;
    let cert = pem.parse_x509().map_err(|_| unusable("not X.509"))?;
    let now = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let now = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
    let validity = cert.validity();
    if now < validity.not_before.timestamp() || now > validity.not_after.timestamp() {
        return Err(unusable("outside its validity"));
    }
    let key = &cert.public_key().subject_public_key.data;
    let signature = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        &message.signature,
    )
    .map_err(|_| VerifyError::SignatureInvalid)?;
    UnparsedPublicKey::new(message.algorithm()?, key)
        .verify(message.signed_text()?.as_bytes(), &signature)
        .map_err(|_| VerifyError::SignatureInvalid)
}

#[derive(Debug)]
struct SnsVerifier {
    fetcher: Fetcher,
    topics: Vec<String>,
}

impl SnsVerifier {
    /// The certificate's URL, when it may be fetched: on an allowed host,
    /// and a `.pem` document, as SNS names them
    /// (`/SimpleNotificationService-<hex>.pem`).
    fn certificate(&self, message: &Message) -> Option<http::Uri> {
        let url = self.fetcher.allowed(&message.signing_cert_url)?;
        url.path().ends_with(".pem").then_some(url)
    }

    /// Whether `pem` signed `message` and its topic is one the route takes:
    /// the check both paths end in, once the certificate is at hand.
    fn accepts(&self, message: &Message, pem: &[u8], now: SystemTime) -> Result<(), VerifyError> {
        signed_by(pem, message, now)?;
        if !self.topics.contains(&message.topic_arn) {
            return Err(VerifyError::SourceNotAllowed);
        }
        Ok(())
    }

    async fn check(&self, body: &[u8], now: SystemTime) -> Result<Option<Handshake>, VerifyError> {
        let message = Message::parse(body)?;
        message.signed_text()?;
        message.algorithm()?;
        let Some(url) = self.certificate(&message) else {
            tracing::warn!(url = %message.signing_cert_url, "SigningCertURL is not on an allowed host");
            return Err(VerifyError::SignatureInvalid);
        };
        let pem = self.fetcher.document(&url).await?;
        if let Err(error) = self.accepts(&message, &pem, now) {
            if error == VerifyError::SenderUnreachable {
                self.fetcher.forget(&url);
            }
            return Err(error);
        }
        match message.kind.as_str() {
            "SubscriptionConfirmation" => {
                let subscribe = (message.subscribe_url.as_deref())
                    .and_then(|url| self.fetcher.allowed(url))
                    .ok_or(VerifyError::SignatureInvalid)?;
                self.fetcher.get(&subscribe).await?;
                tracing::info!(topic = %message.topic_arn, "confirmed the SNS subscription");
                Ok(Some(Handshake {
                    status: StatusCode::OK,
                    body: Reply::Json(serde_json::json!({ "confirmed": message.topic_arn })),
                }))
            }
            "UnsubscribeConfirmation" => Ok(Some(Handshake {
                status: StatusCode::OK,
                body: Reply::Empty,
            })),
            _ => Ok(None),
        }
    }
}

impl Verify for SnsVerifier {
    /// Without fetching: verified only under a certificate fetched before.
    fn verify(&self, _: &HeaderMap, body: &[u8], now: SystemTime) -> Result<(), VerifyError> {
        let message = Message::parse(body)?;
        let url = self
            .certificate(&message)
            .ok_or(VerifyError::SignatureInvalid)?;
        let pem = self
            .fetcher
            .kept(&url)
            .ok_or(VerifyError::SenderUnreachable)?;
        self.accepts(&message, &pem, now)
    }

    fn fetching<'a>(
        &'a self,
        _: RequestLine<'a>,
        _: &'a HeaderMap,
        body: &'a [u8],
        now: SystemTime,
    ) -> Option<BoxFuture<'a, Result<Option<Handshake>, VerifyError>>> {
        Some(Box::pin(self.check(body, now)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(kind: &str) -> Message {
        Message {
            kind: kind.into(),
            message_id: "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324".into(),
            topic_arn: "arn:aws:sns:us-west-2:123456789012:MyTopic".into(),
            message: "Hello world!".into(),
            timestamp: "2012-05-02T00:54:06.655Z".into(),
            subject: Some("My First Message".into()),
            token: Some("2336412f37".into()),
            subscribe_url: Some(
                "https://sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription".into(),
            ),
            signature_version: "1".into(),
            signature: String::new(),
            signing_cert_url: String::new(),
        }
    }

    #[test]
    fn the_signed_text_is_the_documented_fields_in_order() {
        assert_eq!(
            message("Notification").signed_text().unwrap(),
            "Message\nHello world!\nMessageId\n22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324\n\
             Subject\nMy First Message\nTimestamp\n2012-05-02T00:54:06.655Z\n\
             TopicArn\narn:aws:sns:us-west-2:123456789012:MyTopic\nType\nNotification\n"
        );
        assert_eq!(
            message("SubscriptionConfirmation").signed_text().unwrap(),
            "Message\nHello world!\nMessageId\n22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324\n\
             SubscribeURL\nhttps://sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription\n\
             Timestamp\n2012-05-02T00:54:06.655Z\nToken\n2336412f37\n\
             TopicArn\narn:aws:sns:us-west-2:123456789012:MyTopic\nType\nSubscriptionConfirmation\n"
        );
        let mut unsubjected = message("Notification");
        unsubjected.subject = None;
        assert!(!unsubjected.signed_text().unwrap().contains("Subject"));
        assert!(message("Other").signed_text().is_err());
        let mut tokenless = message("SubscriptionConfirmation");
        tokenless.token = None;
        assert!(tokenless.signed_text().is_err());
    }

    /// Signed with `openssl dgst -sha256 -sign` under a throwaway key
    /// whose self-signed certificate (valid 2026-12-03 to 2036-11-30) is
    /// [`CERT`]: AWS publishes no vector with its certificate.
    const SIGNATURE: &str = "Iymz+vJze6Q/bGsydCmsJiBWh7OWh1JVdnd8naFqz7eiY7wuomJySGa4LcWW7KJG8FOfm2m+s+1vIFmDBy9Y2OAVXNnANdP8U2Hm9h6NQS3gprEh+uFyaNDZTkwuqMwBhcmSdYpxlx6MtSsTUOV4hef8ZnSyNWdZ5sWFWlJjaEXOE0fGGC3ukSStJ1whXN0SFlDGlRmWCf0m7uHjUYh//OiPG4HkXmPZ1qjOLvdoY9ZE5i5Z8OfBPSE296JySiOKwLwmu4ikbmtAcW0/ZS+m1u4DqWDieStQQFFSsSEy2C37LH5fr3ZLqswNAR6SAV8gXNoD9NrRiGBah2iigRyk3w==";
    const CERT: &str = "-----BEGIN CERTIFICATE-----\n\
MIIDGTCCAgGgAwIBAgIUG1aQqz2JsiVHAa7k6OIm4ZkzWg4wDQYJKoZIhvcNAQEL\n\
BQAwHDEaMBgGA1UEAwwRc25zLmFtYXpvbmF3cy5jb20wHhcNMjYxMjAzMTUzMDM1\n\
WhcNMzYxMTMwMTUzMDM1WjAcMRowGAYDVQQDDBFzbnMuYW1hem9uYXdzLmNvbTCC\n\
ASIwDQYJKoZIhvcNAQEBBQADggEPADCCAQoCggEBAKEF0iRhw48pLRFTEu8+g3u/\n\
5LxwguDN95cMtRTbI84+5i1MMwVB+vATr4/gzTLMmWFchHLuXfLETmcxfiRP8J/Q\n\
9VTHw7wBkpWtwhRGTOP+44ssK4kwzeVg4xaPzD+mti1/tlrYRZ2+6rgVnG8nXURW\n\
HxLwi+ZFmz2+yUr6fs6CoN8aNa8xZEF+FSXUAdifPKNbT47/tvKWJvZtNpvsrnpt\n\
CDtADBqbfoL8GBfkKIIsmwTa708BWbfRB3aexTnhR0+vjPpkEZ6YdWCnOag6QaIr\n\
W3qqvna8Sj3hv6Ls/UIdHs+C3D+Ia3lyTNKh8rx//y71AX6hWcjsFJ1zOJTY7f0C\n\
AwEAAaNTMFEwHQYDVR0OBBYEFB7JXLY9SuUIQx+nmSczuC5gQl8rMB8GA1UdIwQY\n\
MBaAFB7JXLY9SuUIQx+nmSczuC5gQl8rMA8GA1UdEwEB/wQFMAMBAf8wDQYJKoZI\n\
hvcNAQELBQADggEBADLzJOiggCX54LwGLYnwcYsKZf2hS/EQlIePSPn0Qhu2wo7e\n\
mp7WuA6VcXgnXP+0UmDf1jikZhLBzLEWIdK9U8xwFNrnTR0jbBgsA5N2ttJgxL5Y\n\
IZt+MgpHmpHkaFQta/aNzpV+ZiLPELGn4dlACkVf4UMKPMi0fs/fXt9hzVyQ5u/2\n\
PaN7/9zp0XKBnKRsG6VbujKolr5Ey3lOLcTdJHW9H3DSm80DnhrfzNU1kTa7zirJ\n\
8F3mbXvpSwvjlRmLrXlJnzh5jHCDDLq6h4T8yDibtJju7X4HSMIwB+yjTuQDQ6qk\n\
UzOCc1/lfa2g86O8XqyfZzKXYrD7ntnSSV3vZ7I=\n\
-----END CERTIFICATE-----";
    const CERT_URL: &str = "https://sns.us-west-2.amazonaws.com/SimpleNotificationService-1.pem";

    fn verifier(topic: &str) -> SnsVerifier {
        let fetcher = Fetcher::new(&FetchSpec {
            hosts: sns_hosts(),
            roots: vec![],
        })
        .unwrap();
        SnsVerifier {
            fetcher,
            topics: vec![topic.to_owned()],
        }
    }

    fn body(message: &str) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "Type": "Notification",
            "MessageId": "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324",
            "TopicArn": "arn:aws:sns:us-west-2:123456789012:MyTopic",
            "Subject": "My First Message",
            "Message": message,
            "Timestamp": "2012-05-02T00:54:06.655Z",
            "SignatureVersion": "2",
            "Signature": SIGNATURE,
            "SigningCertURL": CERT_URL,
        }))
        .unwrap()
    }

    #[test]
    fn a_message_verifies_under_its_kept_certificate_only() {
        let at = |year_secs: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(year_secs);
        let (in_2027, in_2040) = (at(1_798_761_600), at(2_208_988_800));
        let headers = HeaderMap::new();
        let topic = "arn:aws:sns:us-west-2:123456789012:MyTopic";
        let sns = verifier(topic);
        let good = body("Hello world!");
        assert_eq!(
            sns.verify(&headers, &good, in_2027),
            Err(VerifyError::SenderUnreachable),
            "nothing kept, nothing fetched by the synchronous check"
        );
        sns.fetcher.keep(&CERT_URL.parse().unwrap(), CERT);
        assert_eq!(sns.verify(&headers, &good, in_2027), Ok(()));
        assert_eq!(
            sns.verify(&headers, &body("Hello world?"), in_2027),
            Err(VerifyError::SignatureInvalid)
        );
        assert_eq!(
            sns.verify(&headers, &good, in_2040),
            Err(VerifyError::SenderUnreachable),
            "an expired certificate"
        );
        let other = verifier("arn:aws:sns:us-west-2:123456789012:Other");
        other.fetcher.keep(&CERT_URL.parse().unwrap(), CERT);
        assert_eq!(
            other.verify(&headers, &good, in_2027),
            Err(VerifyError::SourceNotAllowed)
        );
        let mut sha1 = serde_json::from_slice::<serde_json::Value>(&good).unwrap();
        sha1["SignatureVersion"] = "1".into();
        let sha1 = serde_json::to_vec(&sha1).unwrap();
        assert_eq!(
            sns.verify(&headers, &sha1, in_2027),
            Err(VerifyError::SignatureInvalid),
            "signed with SHA-256, not SHA-1"
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Messages shaped like SNS's, with arbitrary fields and
        /// signatures, under the kept certificate: never verified, never a
        /// panic.
        #[test]
        fn arbitrary_messages_never_verify(
            kind in "(Notification|SubscriptionConfirmation|UnsubscribeConfirmation|[A-Za-z]{0,12})",
            text in "[ -~]{0,40}",
            version in "[0-9]{0,2}",
            signature in "[A-Za-z0-9+/=]{0,400}",
            url_tail in "[ -~]{0,30}",
        ) {
            let sns = verifier("arn:aws:sns:us-west-2:123456789012:MyTopic");
            sns.fetcher.keep(&CERT_URL.parse().unwrap(), CERT);
            let in_2027 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_798_761_600);
            for url in [CERT_URL.to_owned(), format!("{CERT_URL}{url_tail}")] {
                let body = serde_json::to_vec(&serde_json::json!({
                    "Type": kind, "MessageId": text, "TopicArn": "arn:aws:sns:us-west-2:123456789012:MyTopic",
                    "Subject": text, "Message": text, "Timestamp": text, "Token": text,
                    "SubscribeURL": text, "SignatureVersion": version, "Signature": signature,
                    "SigningCertURL": url,
                }))
                .unwrap();
                proptest::prop_assert!(sns.verify(&HeaderMap::new(), &body, in_2027).is_err());
            }
        }
    }
}
