//! Ordered delivery (docs/guide/ordering.md, "Ordered delivery") as a model: three events
//! of one entity accepted in any order, leased by two workers of a fleet
//! under the store's ordered-lease rule, which crash, refuse and lose
//! their leases at any step, and an operator who redelivers a dead one.
//! Checked exhaustively for small bounds.
//!
//! The lease is the Redis store's script (`LEASE_ORDERED`; the embedded
//! store and PostgreSQL park and wake rows the same way, memory decides
//! the same rule from its maps). PostgreSQL's pass is several statements
//! rather than one step: it decides an entity under the entity's advisory
//! lock and parks only rows it has locked, and a settle's wake writes
//! the entity's next row whether or not it is parked yet, so it waits for
//! a pass that holds that row's lock and then sees the park — the step
//! stays atomic as far as an entity is concerned. A pass takes the woken
//! entities first, then the due
//! events; of an entity it meets it takes its *turn* once — its head (the
//! first pending event by `stale_by` value, then acceptance) turned stale
//! while older than the newest delivered, else leased when due and a
//! token is left, else put back in the due index — and every other event
//! of it leaves the due index until the entity is woken again — except the
//! head the pass itself leased, which it may meet later among the rows it
//! read (a lapsed lease is due at its end, after the siblings queued
//! meanwhile) and walks past: the pass goes on with its other tokens.
//!
//! | action | code |
//! | --- | --- |
//! | `Accept` | `ingress::Gateway::accept` → `Records::claim` in `ClaimMode::Accept` with an `OrderSpot`: the event's place (the next of the scope's sequence), in the due index |
//! | `Lease` | `worker::pass` → `Queue::lease_ordered` with one token |
//! | `Settle` | `Engine::attempt` → `Claim::complete` (fenced; the newest value delivered) or `Claim::fail` (queued again, or dead after `max_attempts`): each wakes the entity |
//! | `Crash` | a worker dies (SIGKILL): its lease is left to lapse |
//! | `Lapse` | a lease runs out in the store (a holder cut off, or dead) |
//! | `Redeliver`, `OperatorSettle` | admin `POST …/redeliver` of a dead event: `Records::claim` in `ClaimMode::Redeliver`, which holds the entity while it runs |
//!
//! Properties: an entity never has two events leased at once while
//! leases hold (a lapsed lease is the documented window); no event is
//! leased while an event that goes before it is pending; the stale guard
//! never drops an event as new as the newest delivered; and every event
//! is eventually delivered, stale, dead, or waiting behind a dead one
//! (with `on_blocked = "wait"`) — none is left in the queue with nobody
//! to lease it.

use stateright::{Checker, Model, Property};

/// Events of the one entity.
const EVENTS: usize = 3;
/// Workers of the fleet.
const WORKERS: usize = 2;
/// Failed attempts before an event is dead.
const MAX_ATTEMPTS: u8 = 2;

/// The scenario and the rules under check; `as_built` is the code.
#[derive(Clone)]
pub struct Rules {
    /// Each event's `stale_by` value (`None`: the route has none, or the
    /// event lacks it).
    values: [Option<u8>; EVENTS],
    /// `on_blocked = "skip"`.
    skip_dead: bool,
    /// Refusals and lapses of a live holder's lease, at most.
    faults: u8,
    /// A turn sees an event in flight and leases nothing (defect: the
    /// head is the first event not in flight).
    one_in_flight: bool,
    /// Stale only when strictly older than the newest delivered (defect:
    /// an equal value too).
    strictly_older: bool,
    /// A turn reached from a later sibling leases the head itself (defect,
    /// the shape the script had: it put the head back in the due index,
    /// and the same pass, meeting the head as an entity already seen,
    /// took it out — nothing left to wake the entity).
    head_leased_in_turn: bool,
    /// A pass walks on past the head it leased (its other tokens serve
    /// other entities) and skips that head when it meets it among the rows
    /// it read (defect, the shape the embedded and PostgreSQL stores had:
    /// a head whose lease had lapsed is due after the siblings accepted
    /// while it was in flight, so the pass leased it for a sibling, then
    /// met it as a row of an entity already seen and parked it — a day out
    /// of the due index once its new lease lapsed too).
    spares_its_lease: bool,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Rec {
    Absent,
    Queued,
    Held { token: u8, lapsed: bool },
    Completed,
    Dead,
    Stale,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Event {
    rec: Rec,
    /// Its place in the scope's sequence (0: not accepted yet).
    seq: u8,
    attempts: u8,
    /// In the due index.
    due: bool,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Worker {
    Idle,
    Calling { event: usize, token: u8 },
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct State {
    events: [Event; EVENTS],
    next_seq: u8,
    /// `{source}!E:{entity}`: the event last leased, the newest value
    /// delivered.
    busy: Option<usize>,
    newest: Option<u8>,
    /// `{source}!wake` holds the entity now, or at its busy lease's end.
    wake: bool,
    wake_at_end: bool,
    workers: [Worker; WORKERS],
    /// The operator's redelivery in flight: event and token.
    operator: Option<(usize, u8)>,
    tokens: u8,
    faults: u8,
    // What a consumer would notice.
    two_in_flight: bool,
    overtaken: bool,
    newest_dropped: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Accept(usize),
    Lease(usize),
    /// Worker `.0`'s call ended: delivered (`true`) or refused.
    Settle(usize, bool),
    Crash(usize),
    Lapse(usize),
    Redeliver(usize),
    OperatorSettle,
}

impl Rules {
    pub fn as_built(values: [Option<u8>; EVENTS], skip_dead: bool) -> Self {
        Self {
            values,
            skip_dead,
            faults: 2,
            one_in_flight: true,
            strictly_older: true,
            head_leased_in_turn: true,
            spares_its_lease: true,
        }
    }

    /// `(has a value, value, place)`: the order of an entity's events.
    fn place(&self, state: &State, i: usize) -> (bool, u8, u8) {
        let value = self.values[i];
        (value.is_some(), value.unwrap_or(0), state.events[i].seq)
    }

    /// Still holds its place among the entity's pending events.
    fn pending(&self, rec: Rec) -> bool {
        match rec {
            Rec::Queued | Rec::Held { .. } => true,
            Rec::Dead => !self.skip_dead,
            _ => false,
        }
    }

    fn in_flight(rec: Rec) -> bool {
        matches!(rec, Rec::Held { lapsed: false, .. })
    }

    fn leasable(rec: Rec) -> bool {
        matches!(rec, Rec::Queued | Rec::Held { lapsed: true, .. })
    }

    /// The entity's head: the first of its pending events.
    fn head(&self, state: &State) -> Option<usize> {
        (0..EVENTS)
            .filter(|&i| state.events[i].seq > 0 && self.pending(state.events[i].rec))
            .filter(|&i| self.one_in_flight || !Self::in_flight(state.events[i].rec))
            .min_by_key(|&i| self.place(state, i))
    }

    fn stale(&self, state: &State, i: usize) -> bool {
        match (self.values[i], state.newest) {
            (Some(value), Some(newest)) if self.strictly_older => value < newest,
            (Some(value), Some(newest)) => value <= newest,
            _ => false,
        }
    }

    /// Lease `i` for worker `w`, noting what a consumer would see.
    fn take(&self, state: &mut State, i: usize, w: usize) {
        let others = (0..EVENTS).filter(|&j| j != i);
        let flying = others.clone().any(|j| Self::in_flight(state.events[j].rec));
        state.two_in_flight |= flying;
        state.overtaken |= others
            .filter(|&j| state.events[j].seq > 0 && self.pending(state.events[j].rec))
            .any(|j| self.place(state, j) < self.place(state, i));
        let token = state.tokens;
        state.tokens += 1;
        state.events[i].rec = Rec::Held {
            token,
            lapsed: false,
        };
        // Due again at its lease's end.
        state.events[i].due = true;
        state.workers[w] = Worker::Calling { event: i, token };
        state.busy = Some(i);
    }

    /// The entity's turn in a pass with worker `w`'s token unused while
    /// `free`: stale heads turn stale, then the head is leased (when due)
    /// or put back in the due index. Returns the event it put back.
    fn turn(&self, state: &mut State, w: usize, free: &mut bool) -> Option<usize> {
        if let Some(busy) = state.busy {
            if Self::in_flight(state.events[busy].rec) && self.one_in_flight {
                state.wake_at_end = true;
                return None;
            }
            state.busy = None;
        }
        loop {
            let head = self.head(state)?;
            let rec = state.events[head].rec;
            if rec == Rec::Dead {
                return None;
            }
            if self.stale(state, head) {
                state.newest_dropped |= self.values[head] >= state.newest;
                state.events[head].rec = Rec::Stale;
                state.events[head].due = false;
                continue;
            }
            if Self::leasable(rec) && *free {
                *free = false;
                self.take(state, head, w);
                return None;
            }
            // Due at its next look (in flight: its lease's end).
            state.events[head].due = true;
            return Some(head);
        }
    }

    /// One pass of the ordered lease with worker `w`'s one token.
    fn pass(&self, state: &mut State, w: usize) {
        let mut free = true;
        let mut seen = false;
        let mut placed = None;
        if state.wake {
            state.wake = false;
            seen = true;
            placed = self.turn(state, w, &mut free);
        }
        // The due events as the pass read them, by when each became due: a
        // lapsed lease at its end, after every sibling queued meanwhile.
        let mut due: Vec<usize> = (0..EVENTS)
            .filter(|&i| state.events[i].due && Self::leasable(state.events[i].rec))
            .collect();
        due.sort_by_key(|&i| {
            let lapsed = matches!(state.events[i].rec, Rec::Held { lapsed: true, .. });
            (lapsed, state.events[i].seq)
        });
        for i in due {
            // The pass walks on with its other tokens (for other entities),
            // past the head it leased (its token spent, the head is busy).
            let leased = !free && state.busy == Some(i);
            if placed == Some(i) || (self.spares_its_lease && leased) {
                continue;
            }
            if !(state.events[i].due && Self::leasable(state.events[i].rec)) {
                state.events[i].due = false;
                continue;
            }
            state.events[i].due = false;
            if seen {
                continue;
            }
            seen = true;
            if self.head_leased_in_turn {
                placed = self.turn(state, w, &mut free);
            } else {
                // The earlier shape: the head is leased only when the pass
                // met it first; a later sibling puts it back, unmarked.
                let head = self.head(state);
                if head == Some(i) {
                    placed = self.turn(state, w, &mut free);
                } else if let Some(head) = head {
                    state.events[head].due = true;
                }
            }
        }
    }

    /// Settled for good, or waiting behind a dead event that holds it.
    fn done(&self, state: &State, i: usize) -> bool {
        match state.events[i].rec {
            Rec::Completed | Rec::Stale | Rec::Dead => true,
            Rec::Absent => false,
            _ => (0..EVENTS).any(|j| {
                !self.skip_dead
                    && state.events[j].rec == Rec::Dead
                    && self.place(state, j) < self.place(state, i)
            }),
        }
    }

    /// Whether a worker or the operator still runs event `i`'s call under
    /// `token` (else its lease lapses with nobody to renew it).
    fn held_by_someone(state: &State, i: usize, token: u8) -> bool {
        state.workers.contains(&Worker::Calling { event: i, token })
            || state.operator == Some((i, token))
    }

    /// Event `i` delivered: completed, its value the newest if newer.
    fn delivered(&self, state: &mut State, i: usize) {
        state.events[i].rec = Rec::Completed;
        state.events[i].due = false;
        if let Some(value) = self.values[i] {
            state.newest = Some(state.newest.map_or(value, |n| n.max(value)));
        }
    }

    /// The end of the lease `token` of event `i`: the entity is woken if a
    /// turn waited for it.
    fn lease_ended(state: &mut State, i: usize) {
        if state.busy == Some(i) && state.wake_at_end {
            state.wake_at_end = false;
            state.wake = true;
        }
    }
}

impl Model for Rules {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let event = Event {
            rec: Rec::Absent,
            seq: 0,
            attempts: 0,
            due: false,
        };
        vec![State {
            events: [event; EVENTS],
            next_seq: 1,
            busy: None,
            newest: None,
            wake: false,
            wake_at_end: false,
            workers: [Worker::Idle; WORKERS],
            operator: None,
            tokens: 0,
            faults: 0,
            two_in_flight: false,
            overtaken: false,
            newest_dropped: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for i in 0..EVENTS {
            if state.events[i].rec == Rec::Absent {
                actions.push(Action::Accept(i));
            }
            if let Rec::Held {
                token,
                lapsed: false,
            } = state.events[i].rec
            {
                if !Rules::held_by_someone(state, i, token) || state.faults < self.faults {
                    actions.push(Action::Lapse(i));
                }
            }
            if state.events[i].rec == Rec::Dead && state.operator.is_none() && !self.skip_dead {
                actions.push(Action::Redeliver(i));
            }
        }
        for w in 0..WORKERS {
            match state.workers[w] {
                Worker::Idle => actions.push(Action::Lease(w)),
                Worker::Calling { .. } => {
                    actions.push(Action::Settle(w, true));
                    if state.faults < self.faults {
                        actions.push(Action::Settle(w, false));
                        actions.push(Action::Crash(w));
                    }
                }
            }
        }
        if state.operator.is_some() {
            actions.push(Action::OperatorSettle);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Accept(i) => {
                let event = &mut state.events[i];
                event.rec = Rec::Queued;
                event.seq = state.next_seq;
                event.due = true;
                state.next_seq += 1;
            }
            Action::Lease(w) => {
                self.pass(&mut state, w);
                // A pass that changes nothing is no step.
                if state == *last {
                    return None;
                }
            }
            Action::Settle(w, delivered) => {
                let Worker::Calling { event: i, token } = state.workers[w] else {
                    return None;
                };
                state.workers[w] = Worker::Idle;
                state.faults += u8::from(!delivered);
                // Fenced: a lease taken over changes nothing.
                if !matches!(state.events[i].rec, Rec::Held { token: t, .. } if t == token) {
                    return Some(state);
                }
                let event = &mut state.events[i];
                if delivered {
                    self.delivered(&mut state, i);
                } else {
                    event.attempts += 1;
                    event.rec = match event.attempts >= MAX_ATTEMPTS {
                        true => Rec::Dead,
                        false => Rec::Queued,
                    };
                    event.due = event.rec == Rec::Queued;
                }
                Rules::lease_ended(&mut state, i);
                state.wake = true;
            }
            Action::Crash(w) => {
                state.workers[w] = Worker::Idle;
                state.faults += 1;
            }
            Action::Lapse(i) => {
                let Rec::Held { token, .. } = state.events[i].rec else {
                    return None;
                };
                state.faults += u8::from(Rules::held_by_someone(&state, i, token));
                state.events[i].rec = Rec::Held {
                    token,
                    lapsed: true,
                };
                Rules::lease_ended(&mut state, i);
            }
            Action::Redeliver(i) => {
                let token = state.tokens;
                state.tokens += 1;
                state.two_in_flight |=
                    (0..EVENTS).any(|j| j != i && Rules::in_flight(state.events[j].rec));
                state.events[i].rec = Rec::Held {
                    token,
                    lapsed: false,
                };
                state.operator = Some((i, token));
                state.busy = Some(i);
            }
            Action::OperatorSettle => {
                let (i, token) = state.operator.take()?;
                if matches!(state.events[i].rec, Rec::Held { token: t, .. } if t == token) {
                    self.delivered(&mut state, i);
                    Rules::lease_ended(&mut state, i);
                    state.wake = true;
                }
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "an entity never has two events in flight while leases hold",
                |_, state: &State| !state.two_in_flight,
            ),
            Property::always(
                "no event is leased while one that goes before it is pending",
                |_, state: &State| !state.overtaken,
            ),
            Property::always(
                "the stale guard never drops an event as new as the newest delivered",
                |_, state: &State| !state.newest_dropped,
            ),
            Property::eventually(
                "every event is delivered, stale, dead or waiting behind a dead one",
                |model: &Rules, state: &State| (0..EVENTS).all(|i| model.done(state, i)),
            ),
            Property::sometimes("every event is delivered", |_, state: &State| {
                state.events.iter().all(|e| e.rec == Rec::Completed)
            }),
        ]
    }
}

fn check(rules: Rules) -> impl Checker<Rules> {
    super::exhaust(rules)
}

/// Acceptance order, a dead event that holds its entity and is
/// redelivered: every interleaving of a fleet with crashes, refusals and
/// lapses keeps the order and the entity's one event in flight.
#[test]
fn ordered_leases_by_acceptance_hold_under_faults() {
    let rules = Rules::as_built([None; EVENTS], false);
    super::assert_exhausted("ordered by acceptance", &check(rules));
}

/// Order by `stale_by` with a tie and an older event that may arrive
/// last, dead events skipped: the stale guard drops only what is older
/// than the newest delivered.
#[test]
fn ordered_leases_by_value_hold_under_faults() {
    let rules = Rules::as_built([Some(2), Some(1), Some(2)], true);
    let checker = check(rules);
    super::assert_exhausted("ordered by value", &checker);
    let stale = checker.discovery("every event is delivered");
    assert!(stale.is_some(), "and sometimes every event is delivered");
}

/// Each defect the rule closes is found by the checker.
#[test]
fn the_checker_finds_each_ordering_defect() {
    let values = [Some(2), Some(1), Some(2)];
    let defects = [
        (
            "an entity never has two events in flight while leases hold",
            Rules {
                one_in_flight: false,
                ..Rules::as_built([None; EVENTS], false)
            },
        ),
        (
            "the stale guard never drops an event as new as the newest delivered",
            Rules {
                strictly_older: false,
                ..Rules::as_built(values, true)
            },
        ),
        (
            "every event is delivered, stale, dead or waiting behind a dead one",
            Rules {
                head_leased_in_turn: false,
                ..Rules::as_built(values, true)
            },
        ),
        (
            "every event is delivered, stale, dead or waiting behind a dead one",
            Rules {
                spares_its_lease: false,
                ..Rules::as_built([None; EVENTS], false)
            },
        ),
    ];
    for (property, rules) in defects {
        let checker = check(rules);
        let path = checker.discovery(property);
        assert!(path.is_some(), "the checker finds: {property}");
        eprintln!("{property}: {:?}", path.unwrap().into_actions());
    }
}
