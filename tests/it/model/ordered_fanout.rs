//! An ordered route with a destination and a stale guard (docs/operations/fleets.md,
//! "When a route changes shape") as a model: two events of one entity, each
//! with its `stale_by` value (every pair of values is checked), accepted
//! in order, handed out by two workers of a fleet (which crash at any step,
//! their leases lapsing), then delivered by the destination's two workers.
//! Checked exhaustively.
//!
//! | action | code |
//! | --- | --- |
//! | `Accept` | `ingress::Gateway::accept` → `Records::claim` in `ClaimMode::Accept` with the route's `OrderSpot` (`RouteConfig::order_place`: the entity, by acceptance alone) |
//! | `HandLease` | `worker::pass` → `Queue::lease_ordered` on the route's scope (`RouteConfig::queue_order`): an entity's head only, while none of its events is being handed out |
//! | `Hand` | `Engine::hand_out`: `Records::claim` in `ClaimMode::Accept` in the destination's scope with the destination's `OrderSpot`, its place the next of the sequence (an existing record is a duplicate) |
//! | `HandComplete` | `Engine::hand_out` → `Claim::complete`: the entity's next may be handed out |
//! | `Crash`, `Lapse` | a hand-out worker dies; its lease runs out in the store |
//! | `Lease`, `Deliver` | the destination's `worker::pass` → `Queue::lease_ordered` (the head by `stale_by` value, then place; a head older than the newest delivered value turns `stale`), then `Engine::attempt_stored` completing it |
//!
//! Properties: the destination receives the entity's events one at a
//! time, each once, by value and then in the order accepted, never one
//! older than what it delivered before; the stale guard drops only an
//! event older than the newest delivered; and (sanity) both are delivered,
//! one can be dropped stale, and a hand-out worker can crash on the way.

use stateright::{Checker, Model, Property};

/// Events of the one entity, accepted `0` then `1`.
const EVENTS: usize = 2;

/// The rules under check; `as_built` is the code.
#[derive(Clone)]
pub struct Rules {
    /// The route's hand-outs are leased in the entity's order (defect: an
    /// ordered route with destinations handed each event out at once, as
    /// an unordered one does).
    hand_out_in_order: bool,
    /// The destination's acceptance gives the event a place in the
    /// destination's order, with its `stale_by` value (defect: it was
    /// accepted there unordered, and the destination's workers leased it
    /// beside its siblings, with no stale guard).
    destination_places: bool,
}

impl Rules {
    fn as_built() -> Self {
        Rules {
            hand_out_in_order: true,
            destination_places: true,
        }
    }
}

/// The event's record on the route.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Route {
    Absent,
    Queued,
    /// Leased by hand-out worker `w`, alive or not.
    Held(u8),
    /// Its holder died: the lease runs out.
    Orphaned,
    Handed,
}

/// The event's record at the destination.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Dest {
    Absent,
    /// Queued with its place in the destination's sequence (`None`:
    /// accepted unordered).
    Queued(Option<u8>),
    InFlight(Option<u8>),
    Delivered,
    /// Older than the newest delivered when it was the head: never sent.
    Stale,
}

impl Dest {
    fn place(self) -> Option<u8> {
        match self {
            Dest::Queued(place) | Dest::InFlight(place) => place,
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Hander {
    Idle,
    /// Holds event `e`'s lease; `handed` once the destination has it.
    Handing {
        e: u8,
        handed: bool,
    },
    Dead,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct State {
    /// Each event's `stale_by` value.
    values: [u8; EVENTS],
    accepted: u8,
    route: [Route; EVENTS],
    dest: [Dest; EVENTS],
    handers: [Hander; 2],
    /// The destination's sequence.
    seq: u8,
    /// What the destination's upstream received, in order.
    received: Vec<u8>,
    /// The newest value the destination delivered.
    newest: Option<u8>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Accept,
    HandLease(u8, u8),
    Hand(u8),
    HandComplete(u8),
    Crash(u8),
    Lapse(u8),
    Lease(u8),
    Deliver(u8),
}

impl Rules {
    /// Whether the route's scope may lease event `e` for a hand-out now.
    fn hand_leasable(&self, state: &State, e: usize) -> bool {
        let due = state.route[e] == Route::Queued;
        if !self.hand_out_in_order {
            return due;
        }
        // The entity's head: the first not handed out, nothing of it held.
        let head = (0..EVENTS).find(|&i| state.route[i] != Route::Handed);
        let held = (state.route.iter()).any(|r| matches!(r, Route::Held(_) | Route::Orphaned));
        due && head == Some(e) && !held
    }

    /// Whether the destination's workers may lease event `e` now.
    fn leasable(&self, state: &State, e: usize) -> bool {
        let Dest::Queued(place) = state.dest[e] else {
            return false;
        };
        let Some(place) = place else {
            return true;
        };
        // Its entity's head by (value, place), and nothing of the entity
        // in flight.
        let first = (0..EVENTS)
            .filter_map(|i| Some((state.values[i], state.dest[i].place()?)))
            .min();
        let flying = (state.dest.iter()).any(|d| matches!(d, Dest::InFlight(Some(_))));
        first == Some((state.values[e], place)) && !flying
    }
}

impl Model for Rules {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let pairs = [[1, 1], [1, 2], [2, 1]];
        (pairs.into_iter())
            .map(|values| State {
                values,
                accepted: 0,
                route: [Route::Absent; EVENTS],
                dest: [Dest::Absent; EVENTS],
                handers: [Hander::Idle; 2],
                seq: 0,
                received: Vec::new(),
                newest: None,
            })
            .collect()
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        if (state.accepted as usize) < EVENTS {
            actions.push(Action::Accept);
        }
        for w in 0..2u8 {
            match state.handers[w as usize] {
                Hander::Idle => {
                    for e in 0..EVENTS {
                        if self.hand_leasable(state, e) {
                            actions.push(Action::HandLease(w, e as u8));
                        }
                    }
                }
                Hander::Handing { handed, .. } => {
                    actions.push(match handed {
                        false => Action::Hand(w),
                        true => Action::HandComplete(w),
                    });
                    actions.push(Action::Crash(w));
                }
                Hander::Dead => {}
            }
        }
        for e in 0..EVENTS as u8 {
            if state.route[e as usize] == Route::Orphaned {
                actions.push(Action::Lapse(e));
            }
            if self.leasable(state, e as usize) {
                actions.push(Action::Lease(e));
            }
            if matches!(state.dest[e as usize], Dest::InFlight(_)) {
                actions.push(Action::Deliver(e));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Accept => {
                state.route[state.accepted as usize] = Route::Queued;
                state.accepted += 1;
            }
            Action::HandLease(w, e) => {
                state.route[e as usize] = Route::Held(w);
                state.handers[w as usize] = Hander::Handing { e, handed: false };
            }
            Action::Hand(w) => {
                let Hander::Handing { e, .. } = state.handers[w as usize] else {
                    return None;
                };
                if state.dest[e as usize] == Dest::Absent {
                    let place = self.destination_places.then_some(state.seq);
                    state.seq += 1;
                    state.dest[e as usize] = Dest::Queued(place);
                }
                state.handers[w as usize] = Hander::Handing { e, handed: true };
            }
            Action::HandComplete(w) => {
                let Hander::Handing { e, .. } = state.handers[w as usize] else {
                    return None;
                };
                // Fenced: only the holder completes.
                if state.route[e as usize] == Route::Held(w) {
                    state.route[e as usize] = Route::Handed;
                }
                state.handers[w as usize] = Hander::Idle;
            }
            Action::Crash(w) => {
                if let Hander::Handing { e, .. } = state.handers[w as usize] {
                    if state.route[e as usize] == Route::Held(w) {
                        state.route[e as usize] = Route::Orphaned;
                    }
                }
                state.handers[w as usize] = Hander::Dead;
            }
            Action::Lapse(e) => state.route[e as usize] = Route::Queued,
            Action::Lease(e) => {
                let place = state.dest[e as usize].place();
                let older = state
                    .newest
                    .is_some_and(|newest| state.values[e as usize] < newest);
                state.dest[e as usize] = match (place, older) {
                    (Some(_), true) => Dest::Stale,
                    _ => Dest::InFlight(place),
                };
            }
            Action::Deliver(e) => {
                state.dest[e as usize] = Dest::Delivered;
                state.received.push(e);
                let value = state.values[e as usize];
                state.newest = Some(state.newest.map_or(value, |newest| newest.max(value)));
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "the destination receives the entity's events in the order accepted, each once",
                |_, state: &State| {
                    // By value, then by acceptance; never one older than
                    // one before it.
                    let keyed: Vec<_> = (state.received.iter())
                        .map(|&e| (state.values[e as usize], e))
                        .collect();
                    keyed.windows(2).all(|pair| pair[0] < pair[1])
                },
            ),
            Property::always(
                "the stale guard drops only an event older than the newest delivered",
                |_, state: &State| {
                    (0..EVENTS).all(|e| {
                        state.dest[e] != Dest::Stale
                            || state.newest.is_some_and(|newest| state.values[e] < newest)
                    })
                },
            ),
            Property::always(
                "the destination has one event of the entity in flight at a time",
                |_, state: &State| {
                    (state.dest.iter())
                        .filter(|d| matches!(d, Dest::InFlight(_)))
                        .count()
                        <= 1
                },
            ),
            Property::sometimes("both are delivered", |_, state: &State| {
                state.received.len() == EVENTS
            }),
            Property::sometimes(
                "an event older than the delivered one is dropped stale",
                |_, state: &State| state.dest.contains(&Dest::Stale),
            ),
            Property::sometimes(
                "both are delivered after a hand-out worker died holding one",
                |_, state: &State| {
                    state.received.len() == EVENTS && state.handers.contains(&Hander::Dead)
                },
            ),
        ]
    }
}

fn check(rules: Rules) -> impl Checker<Rules> {
    super::exhaust(rules)
}

#[test]
fn an_ordered_routes_destination_receives_in_order() {
    super::assert_exhausted("ordered fan-out", &check(Rules::as_built()));
}

/// Each fix removed, the checker finds the destination receiving out of
/// order (or two at once).
#[test]
fn the_checker_finds_each_ordered_fan_out_defect() {
    for (rules, name) in [
        (
            Rules {
                hand_out_in_order: false,
                ..Rules::as_built()
            },
            "hand-outs unordered",
        ),
        (
            Rules {
                destination_places: false,
                ..Rules::as_built()
            },
            "destination unordered",
        ),
    ] {
        let checker = check(rules);
        let order = checker.discovery(
            "the destination receives the entity's events in the order accepted, each once",
        );
        let one =
            checker.discovery("the destination has one event of the entity in flight at a time");
        let path = order
            .or(one)
            .unwrap_or_else(|| panic!("{name}: no counterexample"));
        eprintln!("{name}: {:?}", path.into_actions());
    }
}
