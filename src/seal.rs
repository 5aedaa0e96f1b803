//! Sealing what the store keeps of a sender's request or an upstream's
//! answer (data at rest): AES-256-GCM through `ring::aead`, under the first
//! of the configured keys, with the record's identity as associated data,
//! so a sealed value moved to another record does not open. Any configured
//! key opens; a key is rotated by putting the new one first.
//!
//! A sealed value is `0x01` (the format), the key's id (4 bytes: the start
//! of SHA-256 over a label and the key, so the id says nothing of the
//! key), a random 96-bit nonce, then the ciphertext and its 16-byte tag.
//! Random nonces keep one key safe for about 2³² seals; rotation keeps
//! each key far below that.
//!
//! This module only seals and opens; where values are sealed is the
//! store's business.

use std::fmt;

use base64::Engine;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use sha2::{Digest, Sha256};

/// The sealed format this release writes.
const FORMAT: u8 = 1;
const ID_LEN: usize = 4;
const HEADER_LEN: usize = 1 + ID_LEN + NONCE_LEN;
const TAG_LEN: usize = 16;

/// Why a sealed value did not open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// Sealed under a key no longer (or not yet) configured.
    #[error("sealed under a key that is not configured (key id {0:08x})")]
    UnknownKey(u32),
    /// The bytes were changed, or belong to another record.
    #[error("the sealed value does not authenticate: changed, or another record's")]
    Unauthentic,
    /// Not a sealed value of a format this release reads.
    #[error("not a sealed value")]
    Malformed,
}

struct Key {
    id: [u8; ID_LEN],
    key: LessSafeKey,
}

/// The configured keys: the first seals, any opens.
pub struct Keys {
    keys: Vec<Key>,
    random: SystemRandom,
}

impl fmt::Debug for Keys {
    /// Key ids only: the keys themselves are never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids: Vec<String> = (self.keys.iter()).map(|key| hex::encode(key.id)).collect();
        f.debug_struct("Keys").field("ids", &ids).finish()
    }
}

impl Keys {
    /// Keys as configured: each 32 bytes, as 64 hex digits or standard
    /// base64; at least one, none twice. The error names the key by its
    /// position only.
    pub fn parse(texts: &[String]) -> Result<Keys, String> {
        if texts.is_empty() {
            return Err("at least one key is needed: the first encrypts".into());
        }
        let mut keys: Vec<Key> = Vec::new();
        for (i, text) in texts.iter().enumerate() {
            let bytes = decode(text.trim())
                .ok_or_else(|| format!("keys[{i}] is not 32 bytes as 64 hex digits or base64"))?;
            let id = key_id(&bytes);
            if keys.iter().any(|key| key.id == id) {
                return Err(format!("keys[{i}] is listed twice"));
            }
            let unbound = UnboundKey::new(&AES_256_GCM, &bytes)
                .map_err(|_| format!("keys[{i}] is not an AES-256 key"))?;
            keys.push(Key {
                id,
                key: LessSafeKey::new(unbound),
            });
        }
        Ok(Keys {
            keys,
            random: SystemRandom::new(),
        })
    }

    /// `plain` sealed under the first key, bound to `record` (its scope
    /// and key, as the store names it).
    pub fn seal(&self, record: &str, plain: &[u8]) -> Vec<u8> {
        let key = &self.keys[0];
        let mut nonce = [0u8; NONCE_LEN];
        self.random
            .fill(&mut nonce)
            .expect("the system's random source answers");
        let mut sealed = Vec::with_capacity(HEADER_LEN + plain.len() + TAG_LEN);
        sealed.push(FORMAT);
        sealed.extend_from_slice(&key.id);
        sealed.extend_from_slice(&nonce);
        sealed.extend_from_slice(plain);
        let mut body = sealed.split_off(HEADER_LEN);
        key.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(record.as_bytes()),
                &mut body,
            )
            .expect("AES-GCM seals any length the store keeps");
        sealed.extend_from_slice(&body);
        sealed
    }

    /// The plaintext of `sealed`, if it was sealed for `record` under a
    /// configured key and not changed since.
    pub fn open(&self, record: &str, sealed: &[u8]) -> Result<Vec<u8>, SealError> {
        let id = sealing_key(sealed).ok_or(SealError::Malformed)?;
        let key = (self.keys.iter())
            .find(|key| u32::from_be_bytes(key.id) == id)
            .ok_or(SealError::UnknownKey(id))?;
        let nonce: [u8; NONCE_LEN] = sealed[1 + ID_LEN..HEADER_LEN]
            .try_into()
            .expect("a nonce's length");
        let mut body = sealed[HEADER_LEN..].to_vec();
        let plain = key
            .key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(record.as_bytes()),
                &mut body,
            )
            .map_err(|_| SealError::Unauthentic)?;
        let len = plain.len();
        body.truncate(len);
        Ok(body)
    }

    /// The keys' ids (hex), the sealing one first: what `hookgate check`
    /// and the marker of a sealed record show, never the keys.
    pub fn ids(&self) -> Vec<String> {
        (self.keys.iter()).map(|key| hex::encode(key.id)).collect()
    }

    /// Whether `sealed` is under the first key already (what a
    /// re-encryption leaves alone).
    pub fn is_current(&self, sealed: &[u8]) -> bool {
        sealing_key(sealed) == Some(u32::from_be_bytes(self.keys[0].id))
    }
}

/// The id of the key `sealed` was sealed under, when it is a sealed value
/// of a format this release reads; as [`Keys::ids`] shows it, `{:08x}`.
pub fn sealing_key(sealed: &[u8]) -> Option<u32> {
    if sealed.len() < HEADER_LEN + TAG_LEN || sealed[0] != FORMAT {
        return None;
    }
    let id: [u8; ID_LEN] = sealed[1..1 + ID_LEN].try_into().expect("four bytes");
    Some(u32::from_be_bytes(id))
}

/// 32 bytes from 64 hex digits or standard base64.
fn decode(text: &str) -> Option<[u8; 32]> {
    let bytes = match text.len() {
        64 => hex::decode(text).ok()?,
        _ => base64::engine::general_purpose::STANDARD
            .decode(text)
            .ok()?,
    };
    bytes.try_into().ok()
}

fn key_id(key: &[u8; 32]) -> [u8; ID_LEN] {
    let digest = Sha256::new()
        .chain_update(b"hookgate key id\0")
        .chain_update(key)
        .finalize();
    digest[..ID_LEN].try_into().expect("four bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
    const TWO_BASE64: &str = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";

    fn keys(texts: &[&str]) -> Keys {
        Keys::parse(&texts.iter().map(|t| t.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn a_sealed_value_opens_for_its_record_only() {
        let keys = keys(&[ONE]);
        let plain = b"{\"email\":\"ada@example.com\"}";
        let sealed = keys.seal("stripe:evt_1", plain);
        assert!(!sealed.windows(5).any(|w| w == b"email"), "no plaintext");
        assert_eq!(keys.open("stripe:evt_1", &sealed).unwrap(), plain);
        assert_eq!(
            keys.open("stripe:evt_2", &sealed),
            Err(SealError::Unauthentic),
            "moved to another record"
        );
        assert_ne!(
            sealed,
            keys.seal("stripe:evt_1", plain),
            "a fresh nonce each time"
        );
        assert_eq!(
            keys.open("stripe:evt_1", &keys.seal("stripe:evt_1", b""))
                .unwrap(),
            b""
        );
    }

    #[test]
    fn every_changed_byte_fails_authentication() {
        let keys = keys(&[ONE]);
        let sealed = keys.seal("r:k", b"payload");
        for i in HEADER_LEN..sealed.len() {
            let mut changed = sealed.clone();
            changed[i] ^= 0x01;
            assert_eq!(
                keys.open("r:k", &changed),
                Err(SealError::Unauthentic),
                "byte {i}"
            );
        }
        assert_eq!(keys.open("r:k", &sealed[..10]), Err(SealError::Malformed));
        assert_eq!(
            keys.open("r:k", b"plain text, never sealed"),
            Err(SealError::Malformed)
        );
    }

    #[test]
    fn keys_rotate_by_order() {
        let old = keys(&[ONE]);
        let sealed = old.seal("r:k", b"kept under the old key");
        let rotated = keys(&[TWO_BASE64, ONE]);
        assert_eq!(
            rotated.open("r:k", &sealed).unwrap(),
            b"kept under the old key"
        );
        assert!(!rotated.is_current(&sealed) && old.is_current(&sealed));
        let resealed = rotated.seal("r:k", b"kept under the old key");
        assert!(rotated.is_current(&resealed));
        let dropped = keys(&[TWO_BASE64]);
        assert!(matches!(
            dropped.open("r:k", &sealed),
            Err(SealError::UnknownKey(_))
        ));
        assert!(dropped.open("r:k", &resealed).is_ok());
    }

    #[test]
    fn keys_are_32_bytes_once_each_and_never_printed() {
        let parse =
            |texts: &[&str]| Keys::parse(&texts.iter().map(|t| t.to_string()).collect::<Vec<_>>());
        assert!(parse(&[]).unwrap_err().contains("at least one key"));
        assert!(parse(&["abcd"])
            .unwrap_err()
            .contains("keys[0] is not 32 bytes"));
        assert!(parse(&[ONE, &ONE[..62]]).unwrap_err().contains("keys[1]"));
        assert!(parse(&[ONE, ONE])
            .unwrap_err()
            .contains("keys[1] is listed twice"));
        let shown = format!("{:?}", keys(&[ONE, TWO_BASE64]));
        assert!(
            !shown.contains(ONE) && !shown.contains(TWO_BASE64),
            "{shown}"
        );
    }
}
