//! One delivery, whatever its entrance: the [`Engine`] every entrance
//! holds, [`attempt`] — one call of a claimed event, settled — and
//! [`policy`], what follows a failed one; [`places`] bounds the calls of a
//! route under `max_in_flight`.

pub mod attempt;
pub mod engine;
pub mod places;
pub mod policy;

pub use self::attempt::{Attempt, Attempted, Kind, Settled};
pub use self::engine::Engine;
