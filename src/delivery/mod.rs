//! One delivery, whatever its entrance: [`attempt`] runs one call of a
//! claimed event and settles it; [`policy`] decides what follows a failed
//! one.

pub mod attempt;
pub mod policy;

pub use self::attempt::{Attempt, Attempted, Kind, Settled};
