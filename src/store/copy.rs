//! `hookgate store copy`: every live record of one store written into
//! another, so that deduplication survives a change of backend
//! (docs/operations/stores.md, "Moving between stores").
//!
//! The source is read the way an operator's listing reads it — one scope
//! and one state at a time, by index, a page after another — and each
//! record is read whole with its expiry and written under the
//! destination's key layout and prefix ([`Transfer`](super::Transfer)):
//! completed with the recorded response, failed and dead with their
//! requests, queued with their due time, in flight with their lease, each
//! with the retention it has left. A record the destination holds changed
//! at or after the source's is kept, so a copy never overwrites what is
//! newer and running it again (after an interruption, or after the switch)
//! copies only what changed. Route pauses are copied where the destination
//! has none.
//!
//! The source may keep serving: a record that changes while the copy runs
//! moves to the head of its listing and may be missed by this pass, never
//! half written; the next pass takes it.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use futures_util::stream::{self, TryStreamExt};

use super::{Cursor, RecordState, Store, StoreError};

/// Records read from one page of a listing at a time.
const PAGE: usize = 500;

/// Records copied at once (each is a read and a write).
const PARALLEL: usize = 16;

/// A scope to copy, and whether its routes check the replay guard (then
/// each record's body guard is copied too).
#[derive(Debug, Clone)]
pub struct CopyScope {
    pub scope: String,
    pub guard: bool,
}

/// What one state's records came to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Written to the destination.
    pub copied: u64,
    /// The destination's record was as new or newer, and kept.
    pub kept: u64,
    /// Expired (or forgotten) between the listing and the read.
    pub gone: u64,
}

/// The counts of a copy, per state, and the pauses copied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Copied {
    pub states: BTreeMap<RecordState, Counts>,
    pub controls: u64,
}

impl Copied {
    pub fn total(&self) -> Counts {
        self.states
            .values()
            .fold(Counts::default(), |sum, n| Counts {
                copied: sum.copied + n.copied,
                kept: sum.kept + n.kept,
                gone: sum.gone + n.gone,
            })
    }
}

impl fmt::Display for Copied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let line = |f: &mut fmt::Formatter<'_>, name: &str, n: &Counts| {
            let Counts { copied, kept, gone } = n;
            writeln!(
                f,
                "{name:<11} copied {copied:>8}  kept {kept:>8}  gone {gone:>6}"
            )
        };
        for (state, n) in &self.states {
            line(f, state.as_str(), n)?;
        }
        line(f, "all", &self.total())?;
        writeln!(f, "pauses      copied {:>8}", self.controls)
    }
}

enum Outcome {
    Copied,
    Kept,
    Gone,
}

/// Copy every live record of `scopes` from `from` to `to`, and the route
/// pauses `to` lacks.
pub async fn copy(from: &Store, to: &Store, scopes: &[CopyScope]) -> Result<Copied, StoreError> {
    let mut copied = Copied::default();
    for scope in scopes {
        for state in RecordState::ALL {
            let counts = copied.states.entry(state).or_default();
            let mut cursor: Option<Cursor> = None;
            loop {
                let page = from
                    .listing()
                    .list(&[scope.scope.as_str()], Some(state), PAGE, cursor.as_ref())
                    .await?;
                let outcomes: Vec<Outcome> = stream::iter(page.records.iter().map(Ok))
                    .map_ok(|listed| copy_one(from, to, scope, &listed.id))
                    .try_buffer_unordered(PARALLEL)
                    .try_collect()
                    .await?;
                for outcome in outcomes {
                    match outcome {
                        Outcome::Copied => counts.copied += 1,
                        Outcome::Kept => counts.kept += 1,
                        Outcome::Gone => counts.gone += 1,
                    }
                }
                match page.next {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
        }
    }
    let present = to.fleet().controls().await?;
    for (route, value) in from.fleet().controls().await? {
        if !present.iter().any(|(name, _)| *name == route) {
            to.fleet().set_control(&route, Some(&value)).await?;
            copied.controls += 1;
        }
    }
    Ok(copied)
}

async fn copy_one(
    from: &Store,
    to: &Store,
    scope: &CopyScope,
    id: &str,
) -> Result<Outcome, StoreError> {
    let Some((record, expires_at_ms)) = from.export(&from.key(&scope.scope, id)).await? else {
        return Ok(Outcome::Gone);
    };
    let guard = scope
        .guard
        .then(|| to.guard_key(&scope.scope, &record.body_sha256));
    let key = to.key(&scope.scope, id);
    Ok(
        match to
            .import(&key, &record, expires_at_ms, guard.as_ref())
            .await?
        {
            true => Outcome::Copied,
            false => Outcome::Kept,
        },
    )
}

/// The deadline a copy gives each operation: a copy is not a sender
/// waiting, and a page of listing may take longer than `store.timeout`.
pub const COPY_TIMEOUT: Duration = Duration::from_secs(30);
