//! One delivery, whatever its entrance: the [`Engine`] every entrance
//! holds, and the two kinds of work a claimed event is given —
//! [`attempt`], one call of it, settled, and [`fanout`], its hand-out to a
//! route's destinations; [`policy`], what follows a failed attempt;
//! [`places`] bounds the calls of a route under `max_in_flight`.

pub mod attempt;
pub mod engine;
pub mod fanout;
mod leased;
pub mod places;
pub mod policy;

pub use self::attempt::{Attempt, Kind, Settled, Traced};
pub use self::engine::{Engine, Parts};
