//! Who may do what on the admin listener: the admin token (`admin.token`)
//! may do everything the admin API offers; the read token
//! (`admin.read_token`) may read everything and change nothing, so an
//! on-call viewer does not hold the power to redeliver payments. Both the
//! bearer tokens of the admin API and the console's logins are judged here.

use subtle::ConstantTimeEq;

use crate::secret::Secret;

/// What a caller may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Holds the admin token: reads and changes.
    Operator,
    /// Holds the read token: reads (`GET`) only.
    Reader,
}

impl Role {
    /// As the audit log and the console name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Operator => "operator",
            Role::Reader => "reader",
        }
    }

    /// Whether this role may do what `needed` may: an operator all a
    /// reader may and more.
    pub fn covers(self, needed: Role) -> bool {
        self == Role::Operator || needed == Role::Reader
    }
}

/// The admin listener's tokens; without the admin token the admin API and
/// the console are off.
#[derive(Clone, Default)]
pub struct Tokens {
    pub operator: Option<Secret>,
    pub reader: Option<Secret>,
}

impl Tokens {
    /// Whether the admin API is on.
    pub fn on(&self) -> bool {
        self.operator.is_some()
    }

    /// The role `presented` grants, compared in constant time against
    /// each token (both are always compared).
    pub fn role_of(&self, presented: &[u8]) -> Option<Role> {
        let matches = |token: &Option<Secret>| {
            token
                .as_ref()
                .is_some_and(|token| bool::from(presented.ct_eq(token.expose())))
        };
        let operator = matches(&self.operator);
        let reader = matches(&self.reader);
        match (operator, reader) {
            (true, _) => Some(Role::Operator),
            (false, true) => Some(Role::Reader),
            (false, false) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_grants_its_role_and_a_reader_only_reads() {
        let tokens = Tokens {
            operator: Some(Secret::new("operator-token-0123456789")),
            reader: Some(Secret::new("reader-token-0123456789")),
        };
        assert_eq!(
            tokens.role_of(b"operator-token-0123456789"),
            Some(Role::Operator)
        );
        assert_eq!(
            tokens.role_of(b"reader-token-0123456789"),
            Some(Role::Reader)
        );
        assert_eq!(tokens.role_of(b"reader-token-012345678"), None);
        assert_eq!(tokens.role_of(b""), None);
        let without_reader = Tokens {
            reader: None,
            ..tokens
        };
        assert_eq!(without_reader.role_of(b"reader-token-0123456789"), None);
        assert!(Role::Operator.covers(Role::Operator) && Role::Operator.covers(Role::Reader));
        assert!(Role::Reader.covers(Role::Reader) && !Role::Reader.covers(Role::Operator));
    }
}
