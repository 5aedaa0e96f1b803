//! [`Secret`]: key material — signing secrets, the admin token — in a
//! newtype whose `Debug` and `Display` print `[redacted]`, so a secret can sit
//! in any struct that is logged without leaking. Its own module because both
//! `config` (which reads secrets) and `verify` (which uses them) need it.

use std::fmt;

/// Key material. `Debug` and `Display` print `[redacted]`, so a secret can sit
/// in any struct that is logged without leaking.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Box<[u8]>);

impl Secret {
    pub fn new(bytes: impl Into<Vec<u8>>) -> Self {
        Self(bytes.into().into_boxed_slice())
    }

    /// The raw key bytes; only verifiers and the admin token check call this.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_redacted() {
        let secret = Secret::new("hunter2");
        assert_eq!(format!("{secret:?} {secret}"), "[redacted] [redacted]");
        assert_eq!(secret.expose(), b"hunter2");
    }
}
