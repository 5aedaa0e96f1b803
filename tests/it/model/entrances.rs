//! The record's life (docs/operations/README.md) as a model of its own: one event
//! reached through every entrance — a sender whose route is sync or async
//! (and may be reloaded from one to the other), the hybrid, a worker, an
//! operator's redelivery — each of which may crash, be released by SIGTERM,
//! or have its lease lapse. Checked exhaustively for small bounds.
//!
//! | action | code |
//! | --- | --- |
//! | `Deliver` | a sync route: `ingress::Gateway::claim` → `Records::claim` in `ClaimMode::Deliver` |
//! | `Accept` / `AcceptClaimed` | an async route: `ingress::Gateway::accept` → `ClaimMode::Accept`, or the hybrid's `ClaimMode::AcceptClaimed` |
//! | `Lease` | `worker::pass` → `Queue::lease_due` (every scope's queue, whatever the route's mode) |
//! | `Redeliver` | `ops::redeliver` (`Operator::redeliver`, and each event of a bulk action, `ops::bulk`) → `ClaimMode::Redeliver` (a queued event is made due) |
//! | `Call`, `Settle` | `delivery::attempt` (`Engine::attempt`): the call, then `Claim::complete` / `Claim::fail` — the store applies the record's duty (`Failure::state`) |
//! | `Release` | SIGTERM's `Claims::release_all` (and `POST …/release`, a lost claim answer) → `Records::release` |
//! | `Crash` | a holder dies (SIGKILL, or a caller hanging up on code that ran in its connection) |
//! | `Lapse` | the holder's lease runs out in the store |
//! | `Reload` | a reload turns the route sync ↔ async (or a second route of the other mode shares the scope) |
//!
//! The rules of `store::record::decide` are mirrored in [`Rules::claim`];
//! each `fixed_*` flag removes one fix, and the checker finds the defect
//! that fix closed.
//!
//! Properties: *one holder* — no entrance takes the record while another
//! holds it under a live lease; *an accepted event is never stranded* — once
//! a sender was told 2xx, the event is queued where a worker leases it, held
//! (its lease's end makes it due), completed or dead.

use stateright::{Checker, Model, Property};

/// The rules under check; `true` is the code as built.
#[derive(Clone)]
pub struct Rules {
    /// An acceptance that meets a failed record queues it (defect: it was
    /// answered "replayed" and left failed).
    fixed_accept_failed: bool,
    /// What a claim does to an accepted record's due entry.
    takeover: Takeover,
    /// A failure or release follows the record's duty, not the route's mode
    /// at the time (defect: an async event failed by a sync route's entrance
    /// after a reload, or released after a takeover, was left failed).
    fixed_duty: bool,
    /// Workers lease every scope, not only async routes' (defect: a reload
    /// to sync stranded the queue).
    fixed_scan_every_scope: bool,
}

/// What a claim by a sender or an operator does to an accepted record's
/// next attempt (its due entry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Takeover {
    /// As built: due again at the new lease's end.
    Kept,
    /// Redis before: the old, lapsed due time stays, so a worker leases
    /// the record beside its new holder.
    LeftStale,
    /// The SQL stores and memory before: the due time is dropped, so a
    /// release of the new holder leaves the record failed.
    Dropped,
}

impl Rules {
    fn as_built() -> Self {
        Self {
            fixed_accept_failed: true,
            takeover: Takeover::Kept,
            fixed_duty: true,
            fixed_scan_every_scope: true,
        }
    }
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Life {
    Absent,
    /// Claimed under `token`; `lapsed` once its lease ran out.
    Held {
        token: u8,
        lapsed: bool,
    },
    Queued,
    Failed,
    Completed,
    Dead,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Rec {
    life: Life,
    /// Owed a delivery by its queue (`Record::accepted`).
    accepted: bool,
    /// Has a next attempt (`next_attempt`, the due index): due now when
    /// queued, at the lease's end when held.
    next_attempt: bool,
    /// Held, but its next attempt is a lapsed lease's end: due now.
    stale: bool,
    attempts: u8,
}

/// The entrances that call the upstream.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Who {
    Sender,
    Worker,
    Operator,
}

const WHO: [Who; 3] = [Who::Sender, Who::Worker, Who::Operator];

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Holder {
    Idle,
    /// `route_async`: the mode of the route it entered by, when it did.
    Calling {
        token: u8,
        route_async: bool,
    },
    Answered {
        token: u8,
        ok: bool,
        route_async: bool,
    },
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct State {
    rec: Rec,
    holders: [Holder; 3],
    next_token: u8,
    async_mode: bool,
    reloaded: bool,
    deliveries: u8,
    redelivered: bool,
    released: bool,
    /// A sender was told 2xx for an acceptance.
    told_accepted: bool,
    /// An entrance took the record while another held a live lease.
    overlap: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Deliver,
    Accept { claimed: bool },
    Lease,
    Redeliver,
    Call(Who, bool),
    Settle(Who),
    Release(Who),
    Crash(Who),
    Lapse,
    Reload,
}

/// `max_attempts` of the queue (a sync record's sender retries unbounded).
const MAX_ATTEMPTS: u8 = 2;

fn slot(who: Who) -> usize {
    WHO.iter().position(|w| *w == who).unwrap()
}

/// What a claim in a mode does, as `decide` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Deliver,
    Redeliver,
    Accept,
    AcceptClaimed,
}

impl Rules {
    /// `Records::claim` in `mode` by `who`; whether `who` now holds it.
    fn claim(&self, state: &mut State, who: Who, mode: Mode) -> bool {
        let accepting = matches!(mode, Mode::Accept | Mode::AcceptClaimed);
        let rec = state.rec;
        let live = matches!(rec.life, Life::Held { lapsed: false, .. });
        let take = match rec.life {
            Life::Absent => true,
            // Before: any record answered an acceptance "in flight".
            Life::Held { .. } | Life::Failed if accepting && !self.fixed_accept_failed => {
                state.told_accepted = true;
                false
            }
            Life::Completed => false,
            Life::Dead => mode == Mode::Redeliver,
            Life::Queued => {
                // An operator makes it due; an acceptance is a duplicate.
                state.told_accepted |= accepting;
                false
            }
            Life::Held { .. } if live => {
                if accepting {
                    state.told_accepted = true;
                    // Adopt: the holder's failure will queue it, and its
                    // lease's end makes it due.
                    state.rec.accepted = true;
                    state.rec.next_attempt = true;
                }
                false
            }
            Life::Held { .. } if accepting && rec.accepted => {
                state.told_accepted = true;
                false // its worker's lapsed lease: due, a worker takes it
            }
            Life::Held { .. } | Life::Failed => true,
        };
        if mode == Mode::Accept && take {
            state.told_accepted = true;
            state.rec = Rec {
                life: Life::Queued,
                accepted: true,
                next_attempt: true,
                stale: false,
                attempts: rec.attempts,
            };
            return false;
        }
        if !take {
            return false;
        }
        if accepting {
            state.told_accepted = true;
        }
        let token = state.next_token;
        state.next_token += 1;
        let accepted = rec.accepted || mode == Mode::AcceptClaimed;
        let (next_attempt, stale) = match (self.takeover, mode) {
            (Takeover::Kept, _) | (_, Mode::AcceptClaimed) => (accepted, false),
            (Takeover::LeftStale, _) => (rec.next_attempt, rec.next_attempt),
            (Takeover::Dropped, _) => (false, false),
        };
        state.rec = Rec {
            life: Life::Held {
                token,
                lapsed: false,
            },
            accepted,
            next_attempt,
            stale,
            attempts: rec.attempts + 1,
        };
        state.holders[slot(who)] = Holder::Calling {
            token,
            route_async: state.async_mode,
        };
        true
    }

    /// Whether a worker finds the record due.
    fn leasable(&self, state: &State) -> bool {
        let scans = state.async_mode || self.fixed_scan_every_scope;
        let due = match state.rec.life {
            Life::Queued => true,
            Life::Held { lapsed: true, .. } => state.rec.next_attempt,
            Life::Held { lapsed: false, .. } => state.rec.stale,
            _ => false,
        };
        scans && due
    }

    /// Whether an event its sender was told is accepted sits where no
    /// entrance will take it up: failed (its sender stopped retrying),
    /// queued where no worker leases, or under a lapsed lease that makes
    /// it due for nobody.
    fn stranded(&self, state: &State) -> bool {
        state.told_accepted
            && match state.rec.life {
                Life::Completed | Life::Dead | Life::Held { lapsed: false, .. } => false,
                Life::Queued => !self.leasable(state),
                Life::Held { lapsed: true, .. } => !state.rec.next_attempt,
                Life::Failed | Life::Absent => true,
            }
    }

    /// What a failure leaves: by the record's duty (as built), or — before
    /// — by whether the holder's route was async when it entered.
    fn failed(&self, state: &State, route_async: bool) -> Life {
        let rec = &state.rec;
        let queue_owes = match self.fixed_duty {
            true => rec.accepted,
            false => route_async,
        };
        match queue_owes {
            true if rec.attempts >= MAX_ATTEMPTS => Life::Dead,
            true => Life::Queued,
            false => Life::Failed,
        }
    }
}

impl Model for Rules {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        [false, true]
            .into_iter()
            .map(|async_mode| State {
                rec: Rec {
                    life: Life::Absent,
                    accepted: false,
                    next_attempt: false,
                    stale: false,
                    attempts: 0,
                },
                holders: [Holder::Idle; 3],
                next_token: 1,
                async_mode,
                reloaded: false,
                deliveries: 0,
                redelivered: false,
                released: false,
                told_accepted: false,
                overlap: false,
            })
            .collect()
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        let idle = |who: Who| state.holders[slot(who)] == Holder::Idle;
        if state.deliveries < 2 && idle(Who::Sender) {
            match state.async_mode {
                false => actions.push(Action::Deliver),
                true => actions.extend([
                    Action::Accept { claimed: false },
                    Action::Accept { claimed: true },
                ]),
            }
        }
        if idle(Who::Worker) && self.leasable(state) {
            actions.push(Action::Lease);
        }
        // An operator redelivers a record that keeps its request: failed,
        // dead, or accepted.
        let stored = match state.rec.life {
            Life::Failed | Life::Dead | Life::Queued => true,
            Life::Held { .. } => state.rec.accepted,
            Life::Absent | Life::Completed => false,
        };
        if idle(Who::Operator) && !state.redelivered && stored {
            actions.push(Action::Redeliver);
        }
        for who in WHO {
            match state.holders[slot(who)] {
                Holder::Idle => {}
                Holder::Calling { .. } => {
                    actions.extend([Action::Call(who, true), Action::Call(who, false)]);
                    actions.push(Action::Crash(who));
                }
                Holder::Answered { .. } => {
                    actions.push(Action::Settle(who));
                    actions.push(Action::Crash(who));
                }
            }
            if !state.released && state.holders[slot(who)] != Holder::Idle {
                actions.push(Action::Release(who));
            }
        }
        if matches!(state.rec.life, Life::Held { lapsed: false, .. }) {
            actions.push(Action::Lapse);
        }
        if !state.reloaded {
            actions.push(Action::Reload);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        let live_holder = matches!(state.rec.life, Life::Held { lapsed: false, token }
            if state.holders.iter().any(|h| matches!(h, Holder::Calling { token: t, .. } | Holder::Answered { token: t, .. } if *t == token)));
        let before = state.rec.life;
        let took = match action {
            Action::Deliver => {
                state.deliveries += 1;
                self.claim(&mut state, Who::Sender, Mode::Deliver)
            }
            Action::Accept { claimed } => {
                state.deliveries += 1;
                let mode = if claimed {
                    Mode::AcceptClaimed
                } else {
                    Mode::Accept
                };
                self.claim(&mut state, Who::Sender, mode)
            }
            Action::Redeliver => {
                state.redelivered = true;
                self.claim(&mut state, Who::Operator, Mode::Redeliver)
            }
            Action::Lease => {
                let token = state.next_token;
                state.next_token += 1;
                state.rec.life = Life::Held {
                    token,
                    lapsed: false,
                };
                state.rec.attempts += 1;
                state.rec.next_attempt = true;
                state.rec.stale = false;
                state.holders[slot(Who::Worker)] = Holder::Calling {
                    token,
                    route_async: state.async_mode,
                };
                true
            }
            Action::Call(who, ok) => {
                let Holder::Calling { token, route_async } = state.holders[slot(who)] else {
                    return None;
                };
                state.holders[slot(who)] = Holder::Answered {
                    token,
                    ok,
                    route_async,
                };
                false
            }
            Action::Settle(who) => {
                let Holder::Answered {
                    token,
                    ok,
                    route_async,
                } = state.holders[slot(who)]
                else {
                    return None;
                };
                state.holders[slot(who)] = Holder::Idle;
                if matches!(state.rec.life, Life::Held { token: t, .. } if t == token) {
                    state.rec.life = match ok {
                        true => Life::Completed,
                        false => self.failed(&state, route_async),
                    };
                    state.rec.next_attempt = state.rec.life == Life::Queued;
                    state.rec.stale = false;
                }
                false
            }
            Action::Release(who) => {
                state.released = true;
                let token = match state.holders[slot(who)] {
                    Holder::Calling { token, .. } | Holder::Answered { token, .. } => token,
                    Holder::Idle => return None,
                };
                state.holders[slot(who)] = Holder::Idle;
                if matches!(state.rec.life, Life::Held { token: t, .. } if t == token) {
                    // As built, by the duty; before, by the next attempt.
                    let queue_owes = match self.fixed_duty {
                        true => state.rec.accepted,
                        false => state.rec.next_attempt,
                    };
                    state.rec.life = if queue_owes {
                        Life::Queued
                    } else {
                        Life::Failed
                    };
                    state.rec.next_attempt = queue_owes;
                    state.rec.stale = false;
                }
                false
            }
            Action::Crash(who) => {
                state.holders[slot(who)] = Holder::Idle;
                false
            }
            Action::Lapse => {
                let Life::Held { token, .. } = state.rec.life else {
                    return None;
                };
                state.rec.life = Life::Held {
                    token,
                    lapsed: true,
                };
                false
            }
            Action::Reload => {
                state.reloaded = true;
                state.async_mode = !state.async_mode;
                false
            }
        };
        if took && live_holder && matches!(before, Life::Held { lapsed: false, .. }) {
            state.overlap = true;
        }
        Some(state)
    }

    fn within_boundary(&self, state: &State) -> bool {
        state.next_token <= 6
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "one holder: no entrance takes a record held under a live lease",
                |_, state: &State| !state.overlap,
            ),
            Property::always(
                "an accepted event is never stranded",
                |rules: &Rules, state: &State| !rules.stranded(state),
            ),
            Property::sometimes("an accepted event completes", |_, state: &State| {
                state.told_accepted && state.rec.life == Life::Completed
            }),
            Property::sometimes(
                "an accepted event is delivered after a reload to sync",
                |_, state: &State| {
                    state.told_accepted
                        && state.reloaded
                        && !state.async_mode
                        && state.rec.life == Life::Completed
                },
            ),
        ]
    }
}

fn check(rules: Rules) -> impl Checker<Rules> {
    super::exhaust(rules)
}

/// Every entrance, every interleaving: one holder, never stranded.
#[test]
fn every_entrance_keeps_one_holder_and_strands_no_accepted_event() {
    super::assert_exhausted("entrances", &check(Rules::as_built()));
}

/// Each fix is load-bearing: without it the checker finds the defect it
/// closed (each also has a test against the real gateway in
/// `tests/it/entrances.rs` and the store's in `tests/it/conformance/life.rs`).
#[test]
fn the_checker_finds_each_seam_defect_without_its_fix() {
    let cases: [(&str, Rules, &str); 5] = [
        (
            "an acceptance of a failed record answered \"replayed\"",
            Rules {
                fixed_accept_failed: false,
                ..Rules::as_built()
            },
            "an accepted event is never stranded",
        ),
        (
            "a takeover that leaves the old due time (Redis)",
            Rules {
                takeover: Takeover::LeftStale,
                ..Rules::as_built()
            },
            "one holder: no entrance takes a record held under a live lease",
        ),
        (
            "a takeover that drops the due time, released (the SQL stores)",
            Rules {
                takeover: Takeover::Dropped,
                fixed_duty: false,
                ..Rules::as_built()
            },
            "an accepted event is never stranded",
        ),
        (
            "a failure that follows the route's mode, not the record",
            Rules {
                fixed_duty: false,
                ..Rules::as_built()
            },
            "an accepted event is never stranded",
        ),
        (
            "workers that lease only async routes' scopes",
            Rules {
                fixed_scan_every_scope: false,
                ..Rules::as_built()
            },
            "an accepted event is never stranded",
        ),
    ];
    for (defect, rules, property) in cases {
        let checker = check(rules.clone());
        let path = checker
            .discovery(property)
            .unwrap_or_else(|| panic!("{defect}: the checker found nothing"));
        // The actions up to the first state that breaks the property.
        let states = path.clone().into_states();
        let broken = |state: &State| state.overlap || rules.stranded(state);
        let end = states.iter().position(broken).unwrap_or(states.len() - 1);
        let actions = path.into_actions();
        eprintln!("{defect}: {:?}", &actions[..end]);
    }
}
