//! Several destinations (docs/guide/destinations.md, "Several destinations") as a model: one
//! event accepted on a route with two destinations, fanned out by workers
//! of a fleet (any of which may crash, or have its lease lapse, at any
//! step), then delivered to each destination by that destination's own
//! workers, which crash and lapse too. Checked exhaustively for small
//! bounds.
//!
//! | action | code |
//! | --- | --- |
//! | `Accept` | `ingress::Gateway::accept` (`fanout::judge` judged the filters) while the route is paused: one write, the event's record queued, naming the destinations it passed |
//! | `AcceptHanding` | the same write as `ClaimMode::AcceptClaimed` (the route not paused): the event's record held by the accepting request's hand-out task |
//! | `FanLease` | `worker::pass` → `Queue::lease_due` on the route's scope |
//! | `Hand` | `Engine::hand_out`: `Records::claim` in `ClaimMode::Accept` in the destination's scope (an existing record is a duplicate) |
//! | `FanComplete` | `Engine::hand_out` → `Claim::complete` (fenced), after every destination was handed the event |
//! | `FanRelease` | a store error in `Engine::hand_out` → `Claim::release`: the event is due again |
//! | `Lease`, `Call`, `Settle` | the destination's own `worker::pass` and `Engine::attempt`, as for any async route |
//! | `Crash` | a worker dies (SIGKILL): its lease is left to lapse |
//! | `Lapse` | a lease runs out in the store |
//!
//! Properties: each destination gets only the events its filter passed;
//! each gets the event once, plus at most once per lapsed lease (the
//! documented window of every async delivery); an accepted event is never
//! stranded — its record is completed only once every destination it passed
//! holds it; and (sanity) one destination can complete while the other's
//! worker crashed.

use stateright::{Checker, Model, Property};

/// The rule under check; `true` is the code as built.
#[derive(Clone)]
pub struct Rules {
    /// The fan-out completes the event's record after handing it to every
    /// destination (defect: completed first, a crash between strands the
    /// destinations not yet handed it).
    fixed_complete_last: bool,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Life {
    Absent,
    Queued,
    Held { token: u8, lapsed: bool },
    Completed,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Worker {
    Idle,
    /// Fanning out under `token`: the next destination to hand, and whether
    /// the event's record was completed already (the defect's order).
    Fanning {
        token: u8,
        next: u8,
        completed: bool,
    },
    /// Calling a destination under `token`; `acted` once the upstream did
    /// the work, `ok` whether it answered finally.
    Calling {
        token: u8,
        acted: bool,
        ok: bool,
    },
}

/// One destination: its record, its workers, what its upstream did.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Destination {
    passes: bool,
    rec: Life,
    /// Leases taken of its record (each a fresh token).
    leases: u8,
    workers: [Worker; WORKERS],
    effects: u8,
    lapses: u8,
    crashed: bool,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct State {
    event: Life,
    /// The sender was told 2xx.
    told: bool,
    deliveries: u8,
    fanners: [Worker; 2],
    /// Leases taken of the event's record (each a fresh token).
    event_leases: u8,
    destinations: [Destination; 2],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// A delivery of the event; which destinations' filters pass it.
    Accept([bool; 2]),
    /// The same, the event's record claimed by hand-out task `.1`.
    AcceptHanding([bool; 2], usize),
    FanLease(usize),
    Hand(usize),
    FanComplete(usize),
    FanRelease(usize),
    FanCrash(usize),
    EventLapse,
    Lease(usize, usize),
    /// The upstream of destination `.0`, called by worker `.1`: did the
    /// work and answered (`true`), or refused without acting.
    Call(usize, usize, bool),
    Settle(usize, usize),
    Crash(usize, usize),
    Lapse(usize),
}

/// Leases of one record at most: tokens are per record, as fencing only
/// compares a record's tokens with each other.
const LEASES: u8 = 2;
/// Workers per destination (a fleet of two).
const WORKERS: usize = 2;

impl Rules {
    fn as_built() -> Self {
        Self {
            fixed_complete_last: true,
        }
    }

    /// Told 2xx, the event's record completed, and a destination it passed
    /// has no record: nothing will ever deliver it there.
    fn stranded(state: &State) -> bool {
        state.told
            && state.event == Life::Completed
            && (state.destinations.iter()).any(|d| d.passes && d.rec == Life::Absent)
    }
}

/// Hand-out task `w` holds the event's record under a fresh token.
fn lease_event(state: &mut State, w: usize) {
    let token = state.event_leases;
    state.event_leases += 1;
    state.event = Life::Held {
        token,
        lapsed: false,
    };
    state.fanners[w] = Worker::Fanning {
        token,
        next: 0,
        completed: false,
    };
}

fn claimable(life: Life) -> bool {
    matches!(life, Life::Queued | Life::Held { lapsed: true, .. })
}

impl Model for Rules {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let destination = Destination {
            passes: false,
            rec: Life::Absent,
            leases: 0,
            workers: [Worker::Idle; WORKERS],
            effects: 0,
            lapses: 0,
            crashed: false,
        };
        vec![State {
            event: Life::Absent,
            told: false,
            deliveries: 0,
            fanners: [Worker::Idle; 2],
            event_leases: 0,
            destinations: [destination; 2],
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        if state.deliveries < 1 {
            for passes in [[true, true], [true, false], [false, false]] {
                actions.push(Action::Accept(passes));
                if state.fanners[0] == Worker::Idle {
                    actions.push(Action::AcceptHanding(passes, 0));
                }
            }
        }
        for w in 0..2 {
            match state.fanners[w] {
                Worker::Idle if state.event_leases < LEASES && claimable(state.event) => {
                    actions.push(Action::FanLease(w))
                }
                Worker::Fanning {
                    next, completed, ..
                } => {
                    if next < 2 {
                        actions.push(Action::Hand(w));
                    }
                    let may_complete = match self.fixed_complete_last {
                        true => next == 2,
                        false => next == 0 && !completed,
                    };
                    if may_complete {
                        actions.push(Action::FanComplete(w));
                    }
                    if !completed {
                        actions.push(Action::FanRelease(w));
                    }
                    actions.push(Action::FanCrash(w));
                }
                _ => {}
            }
        }
        if matches!(state.event, Life::Held { lapsed: false, .. }) {
            actions.push(Action::EventLapse);
        }
        for (d, destination) in state.destinations.iter().enumerate() {
            for w in 0..WORKERS {
                match destination.workers[w] {
                    Worker::Idle if destination.leases < LEASES && claimable(destination.rec) => {
                        actions.push(Action::Lease(d, w))
                    }
                    Worker::Calling {
                        acted: false,
                        ok: false,
                        ..
                    } => {
                        // A refused call and its retry are the claim
                        // protocol's (`entrances.rs`); here every call acts.
                        actions.push(Action::Call(d, w, true));
                        actions.push(Action::Crash(d, w));
                    }
                    Worker::Calling { .. } => {
                        actions.push(Action::Settle(d, w));
                        actions.push(Action::Crash(d, w));
                    }
                    _ => {}
                }
            }
            if matches!(destination.rec, Life::Held { lapsed: false, .. }) {
                actions.push(Action::Lapse(d));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Accept(passes) => {
                state.deliveries += 1;
                if state.event == Life::Absent {
                    let any = passes.iter().any(|p| *p);
                    for (destination, passes) in state.destinations.iter_mut().zip(passes) {
                        destination.passes = passes;
                    }
                    // One write; an event no filter takes is recorded
                    // filtered, completed at once.
                    state.event = if any { Life::Queued } else { Life::Completed };
                }
                state.told = true;
            }
            Action::AcceptHanding(passes, w) => {
                let fresh = state.event == Life::Absent && passes.iter().any(|p| *p);
                let mut state = self.next_state(last, Action::Accept(passes))?;
                if fresh {
                    lease_event(&mut state, w);
                }
                return Some(state);
            }
            Action::FanLease(w) => lease_event(&mut state, w),
            Action::Hand(w) => {
                let Worker::Fanning {
                    token,
                    next,
                    completed,
                } = state.fanners[w]
                else {
                    return None;
                };
                let destination = &mut state.destinations[next as usize];
                // An acceptance: a record already there is a duplicate.
                if destination.passes && destination.rec == Life::Absent {
                    destination.rec = Life::Queued;
                }
                state.fanners[w] = match (next + 1, completed) {
                    (2, true) => Worker::Idle,
                    (next, _) => Worker::Fanning {
                        token,
                        next,
                        completed,
                    },
                };
            }
            Action::FanComplete(w) => {
                let Worker::Fanning { token, next, .. } = state.fanners[w] else {
                    return None;
                };
                // Fenced: a fan-out whose lease was taken over changes nothing.
                if matches!(state.event, Life::Held { token: t, .. } if t == token) {
                    state.event = Life::Completed;
                }
                state.fanners[w] = match next {
                    2 => Worker::Idle,
                    _ => Worker::Fanning {
                        token,
                        next,
                        completed: true,
                    },
                };
            }
            Action::FanRelease(w) => {
                let Worker::Fanning { token, .. } = state.fanners[w] else {
                    return None;
                };
                if matches!(state.event, Life::Held { token: t, .. } if t == token) {
                    state.event = Life::Queued;
                }
                state.fanners[w] = Worker::Idle;
            }
            Action::FanCrash(w) => state.fanners[w] = Worker::Idle,
            Action::EventLapse => {
                if let Life::Held { token, .. } = state.event {
                    state.event = Life::Held {
                        token,
                        lapsed: true,
                    };
                }
            }
            Action::Lease(d, w) => {
                let destination = &mut state.destinations[d];
                let token = destination.leases;
                destination.leases += 1;
                destination.rec = Life::Held {
                    token,
                    lapsed: false,
                };
                destination.workers[w] = Worker::Calling {
                    token,
                    acted: false,
                    ok: false,
                };
            }
            Action::Call(d, w, acted) => {
                let destination = &mut state.destinations[d];
                let Worker::Calling { token, .. } = destination.workers[w] else {
                    return None;
                };
                destination.effects += u8::from(acted);
                destination.workers[w] = Worker::Calling {
                    token,
                    acted,
                    ok: true,
                };
            }
            Action::Settle(d, w) => {
                let destination = &mut state.destinations[d];
                let Worker::Calling { token, acted, .. } = destination.workers[w] else {
                    return None;
                };
                if matches!(destination.rec, Life::Held { token: t, .. } if t == token) {
                    destination.rec = if acted { Life::Completed } else { Life::Queued };
                }
                destination.workers[w] = Worker::Idle;
            }
            Action::Crash(d, w) => {
                state.destinations[d].workers[w] = Worker::Idle;
                state.destinations[d].crashed = true;
            }
            Action::Lapse(d) => {
                let destination = &mut state.destinations[d];
                if let Life::Held { token, .. } = destination.rec {
                    destination.rec = Life::Held {
                        token,
                        lapsed: true,
                    };
                    destination.lapses += 1;
                }
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "a destination gets only the events its filter passed",
                |_, state: &State| {
                    (state.destinations.iter())
                        .all(|d| d.passes || (d.effects == 0 && d.rec == Life::Absent))
                },
            ),
            Property::always(
                "each destination gets the event once, outside the documented window",
                |_, state: &State| (state.destinations.iter()).all(|d| d.effects <= 1 + d.lapses),
            ),
            Property::always(
                "an accepted event is never stranded at a destination",
                |_, state: &State| !Rules::stranded(state),
            ),
            Property::sometimes(
                "one destination completes while the other's worker crashed",
                |_, state: &State| {
                    let [billing, crm] = &state.destinations;
                    billing.rec == Life::Completed
                        && billing.effects == 1
                        && crm.crashed
                        && crm.rec != Life::Completed
                },
            ),
            Property::sometimes("both destinations complete", |_, state: &State| {
                (state.destinations.iter()).all(|d| d.passes && d.rec == Life::Completed)
            }),
        ]
    }
}

fn check(rules: Rules) -> impl Checker<Rules> {
    super::exhaust(rules)
}

/// Every interleaving of fan-out and delivery across a fleet: each
/// destination once (outside the window), only what it passed, nothing
/// stranded.
#[test]
fn each_destination_gets_each_passing_event_once() {
    super::assert_exhausted("fan-out", &check(Rules::as_built()));
}

/// Completing the event's record before handing it out is the defect the
/// order closes: the checker finds the stranded destination.
#[test]
fn the_checker_finds_a_fan_out_that_completes_first() {
    let rules = Rules {
        fixed_complete_last: false,
    };
    let checker = check(rules);
    let path = checker
        .discovery("an accepted event is never stranded at a destination")
        .expect("the checker finds the stranded destination");
    // The actions up to the first stranded state.
    let end = (path.clone().into_states().iter())
        .position(Rules::stranded)
        .expect("a stranded state");
    eprintln!("complete first: {:?}", &path.into_actions()[..end]);
}
