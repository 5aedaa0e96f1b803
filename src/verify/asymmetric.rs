//! Senders that sign `timestamp + body` with a private key (Discord's
//! Ed25519, SendGrid's ECDSA P-256): a route holds only their public keys,
//! nothing that can sign. Any listed key may match (a rotation lists two);
//! the timestamp is checked after the signature, as for the HMAC schemes.

use std::time::{Duration, SystemTime};

use ring::signature::{UnparsedPublicKey, VerificationAlgorithm};

use super::{check_timestamp, VerifyError, VerifySpec};

#[derive(Debug)]
pub struct TimestampedKeys {
    pub algorithm: &'static dyn VerificationAlgorithm,
    /// Raw public keys in the algorithm's encoding: public, nothing to
    /// redact.
    pub keys: Vec<Vec<u8>>,
    pub tolerance: Duration,
}

impl TimestampedKeys {
    /// The route's `secrets` as public keys, each decoded by `parse` from
    /// the text the sender's dashboard shows.
    pub fn from_spec(
        algorithm: &'static dyn VerificationAlgorithm,
        spec: &VerifySpec,
        parse: impl Fn(&[u8]) -> Result<Vec<u8>, String>,
    ) -> Result<Self, String> {
        let keys = spec
            .secrets
            .iter()
            .map(|secret| parse(secret.expose()))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            algorithm,
            keys,
            tolerance: spec.tolerance,
        })
    }

    pub fn check(
        &self,
        timestamp: &str,
        signature: &[u8],
        body: &[u8],
        now: SystemTime,
    ) -> Result<(), VerifyError> {
        let mut message = Vec::with_capacity(timestamp.len() + body.len());
        message.extend_from_slice(timestamp.as_bytes());
        message.extend_from_slice(body);
        let verified = self.keys.iter().any(|key| {
            UnparsedPublicKey::new(self.algorithm, key)
                .verify(&message, signature)
                .is_ok()
        });
        if !verified {
            return Err(VerifyError::SignatureInvalid);
        }
        check_timestamp(timestamp, now, self.tolerance)
    }
}
