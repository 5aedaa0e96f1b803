//! A route that stops ordering while it holds an ordered backlog
//! (docs/operations/fleets.md, "When a route changes shape") as a model: three
//! events of one entity accepted in order, two workers, a reload that
//! turns the route unordered and a restart onto the changed file at any
//! step. Checked exhaustively.
//!
//! | action | code |
//! | --- | --- |
//! | `Reload` | `reload::Reloader::apply`: the route's `order_by` gone (or the route made sync) |
//! | `Restart` | the process starts again on the changed file: the workers' memory (`worker::Orders`) is new |
//! | `Lease` | `worker::Orders::lease`: in order (`Queue::lease_ordered`) while the route orders, once the scope ordered in this process, and in a scope's first pass; else `Queue::lease_due`, whose ordered events are given back unsent (`lease_unordered`) and the scope leased in order from then on |
//! | `Deliver` | `Engine::attempt` completing the event |
//!
//! Properties: the upstream receives the backlog in the order accepted,
//! one event at a time; and (sanity) all of it is delivered after a reload,
//! and after a restart.

use stateright::{Checker, Model, Property};

const EVENTS: usize = 3;
const WORKERS: usize = 2;

/// The rules under check; `as_built` is the code.
#[derive(Clone)]
pub struct Rules {
    /// The workers remember a scope they leased in order (defect: they
    /// lease by what the route says now).
    remembers: bool,
    /// A scope's first pass in a process leases in order.
    first_pass: bool,
    /// An unordered lease gives an ordered event back unsent (defect: it
    /// is delivered beside its siblings).
    gives_back: bool,
}

impl Rules {
    fn as_built() -> Self {
        Rules {
            remembers: true,
            first_pass: true,
            gives_back: true,
        }
    }
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Event {
    Queued,
    InFlight(u8),
    Delivered,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct State {
    events: [Event; EVENTS],
    /// The route orders (before the reload).
    ordered_route: bool,
    /// The workers' memory: the scope was leased once, and in order.
    leased: bool,
    remembered: bool,
    reloaded: bool,
    restarted: bool,
    received: Vec<u8>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Reload,
    Restart,
    Lease(u8),
    Deliver(u8),
}

impl Rules {
    /// What a worker's pass leases now — the event it takes, if any — and
    /// whether the scope is remembered as ordered after it.
    fn lease(&self, state: &State) -> (Option<usize>, bool) {
        let in_order = state.ordered_route
            || (self.remembers && state.remembered)
            || (self.first_pass && !state.leased);
        if in_order {
            let head = (0..EVENTS).find(|&e| state.events[e] != Event::Delivered);
            let flying = (state.events.iter()).any(|e| matches!(e, Event::InFlight(_)));
            let taken = head.filter(|&h| !flying && state.events[h] == Event::Queued);
            return (taken, true);
        }
        // Unordered: any due event. Every event here is ordered, so with
        // the give-back it is handed back unsent, and the scope ordered.
        let due = (0..EVENTS).find(|&e| state.events[e] == Event::Queued);
        match (due, self.gives_back) {
            (Some(_), true) => (None, true),
            (first, _) => (first, state.remembered),
        }
    }
}

impl Model for Rules {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            events: [Event::Queued; EVENTS],
            ordered_route: true,
            leased: false,
            remembered: false,
            reloaded: false,
            restarted: false,
            received: Vec::new(),
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        if !state.reloaded {
            actions.push(Action::Reload);
        }
        if state.reloaded && !state.restarted {
            actions.push(Action::Restart);
        }
        for w in 0..WORKERS as u8 {
            let busy = state.events.contains(&Event::InFlight(w));
            if !busy {
                actions.push(Action::Lease(w));
            }
        }
        for e in 0..EVENTS as u8 {
            if matches!(state.events[e as usize], Event::InFlight(_)) {
                actions.push(Action::Deliver(e));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Reload => {
                state.ordered_route = false;
                state.reloaded = true;
            }
            Action::Restart => {
                // In flight: the killed calls' leases lapse.
                for event in &mut state.events {
                    if matches!(event, Event::InFlight(_)) {
                        *event = Event::Queued;
                    }
                }
                (state.leased, state.remembered, state.restarted) = (false, false, true);
            }
            Action::Lease(w) => {
                let (taken, remembered) = self.lease(&state);
                state.leased = true;
                state.remembered = remembered;
                if let Some(e) = taken {
                    state.events[e] = Event::InFlight(w);
                }
            }
            Action::Deliver(e) => {
                state.events[e as usize] = Event::Delivered;
                state.received.push(e);
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "the backlog is received in the order accepted",
                |_, state: &State| {
                    let mut firsts: Vec<u8> = Vec::new();
                    for e in &state.received {
                        if !firsts.contains(e) {
                            firsts.push(*e);
                        }
                    }
                    firsts.iter().enumerate().all(|(i, &e)| e as usize == i)
                },
            ),
            Property::always(
                "one event of the entity in flight at a time",
                |_, state: &State| {
                    (state.events.iter())
                        .filter(|e| matches!(e, Event::InFlight(_)))
                        .count()
                        <= 1
                },
            ),
            Property::sometimes("all delivered after a reload", |_, state: &State| {
                state.reloaded && !state.restarted && state.received.len() == EVENTS
            }),
            Property::sometimes("all delivered after a restart", |_, state: &State| {
                state.restarted && (state.events.iter()).all(|e| *e == Event::Delivered)
            }),
        ]
    }
}

fn check(rules: Rules) -> impl Checker<Rules> {
    super::exhaust(rules)
}

#[test]
fn a_backlog_keeps_its_order_through_a_reload_and_a_restart() {
    super::assert_exhausted("reload order", &check(Rules::as_built()));
}

/// Without the give-back and the memory, the reload reorders the backlog;
/// without the give-back and the first pass, a reload before the scope's
/// first pass (its route paused meanwhile), or a restart, does.
#[test]
fn the_checker_finds_each_reload_order_defect() {
    for (rules, name) in [
        (
            Rules {
                remembers: false,
                first_pass: true,
                gives_back: false,
            },
            "leased by what the route says now",
        ),
        (
            Rules {
                remembers: true,
                first_pass: false,
                gives_back: false,
            },
            "no first pass",
        ),
    ] {
        let checker = check(rules);
        let order = checker.discovery("the backlog is received in the order accepted");
        let one = checker.discovery("one event of the entity in flight at a time");
        let path = order
            .or(one)
            .unwrap_or_else(|| panic!("{name}: no counterexample"));
        eprintln!("{name}: {:?}", path.into_actions());
    }
}
