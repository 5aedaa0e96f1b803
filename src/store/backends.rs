//! The backends a [`Store`](super::Store) can hold, as one enum: a store
//! operation is its capability's trait method (`backend.rs`), called on
//! whichever backend the store holds by [`on!`] — no box per operation,
//! no hand-written mirror of the traits, no type parameter on `Store`.
//! Adding a backend is its folder, one variant here (and its arm in
//! `on!`), one settings variant (`BackendSettings`, `Store::open`) and
//! one name in the tests' list of backends (`tests/it/support/stores.rs`).

use super::{Cluster, EmbeddedStore, MemoryStore, PostgresStore, RedisStore, Sentinel, Single};

/// The enum, and each backend's conversion into it, from one list.
macro_rules! backends {
    ($($(#[$cfg:meta])? $variant:ident($backend:ty)),+ $(,)?) => {
        /// Every backend, by what it is. One per store, held for the
        /// process's life: the variants' sizes do not matter.
        #[allow(clippy::large_enum_variant)]
        pub enum Backends {
            $($(#[$cfg])? $variant($backend),)+
        }

        $($(#[$cfg])? impl From<$backend> for Backends {
            fn from(backend: $backend) -> Self {
                Backends::$variant(backend)
            }
        })+
    };
}

backends!(
    Memory(MemoryStore),
    Embedded(EmbeddedStore),
    Redis(RedisStore<Single>),
    Sentinel(RedisStore<Sentinel>),
    Cluster(RedisStore<Cluster>),
    Postgres(PostgresStore),
    // A backend whose answers come after the deadline (`late.rs`).
    #[cfg(test)]
    Late(super::late::LateAnswers),
);

/// `on!(backends, b => expression)`: `expression` with `b` bound to the
/// backend `backends` holds — a trait method called on it, `.await`ed
/// inside when it is an operation, so every arm has the same type.
macro_rules! on {
    ($backends:expr, $b:ident => $call:expr) => {
        match &$backends {
            $crate::store::backends::Backends::Memory($b) => $call,
            $crate::store::backends::Backends::Embedded($b) => $call,
            $crate::store::backends::Backends::Redis($b) => $call,
            $crate::store::backends::Backends::Sentinel($b) => $call,
            $crate::store::backends::Backends::Cluster($b) => $call,
            $crate::store::backends::Backends::Postgres($b) => $call,
            #[cfg(test)]
            $crate::store::backends::Backends::Late($b) => $call,
        }
    };
}
pub(crate) use on;
