//! The claim protocol (docs/guide/guarantee.md, "The guarantee, honestly" and "Failed events
//! and dead letters") as a model, checked exhaustively with `stateright`
//! for small bounds: gateways that claim, renew, call the
//! upstream and settle the claim by the outcome class (failed, held, or
//! parked as a dead letter after `max_attempts`); a store whose leases
//! expire; an upstream whose calls end final, refused, not delivered or
//! unknown (having done the work or not); gateways that crash at any step;
//! a sender that retries; an operator who forgets keys, force-releases
//! claims, redelivers (same key, forced or not) and replays (a new key);
//! and a clock of discrete ticks. One event is enough: the store keeps
//! events independent (a replay's key is a second, fresh one).
//!
//! Model action → code (keep this table true when the protocol changes):
//!
//! | action | code |
//! | --- | --- |
//! | `Deliver` | `ingress::Gateway::claim` → `store::Records::claim` in `ClaimMode::Deliver` (insert, or take over a failed or lapsed record; a dead one answers `dead_letter_status`); with `packed`, a new key's insert is Redis's packed claim (`store/redis/packed.rs`) |
//! | `Renew` | `claim::Claim::renewing` → `Records::renew` (compare-and-set on the token, no expiry check) |
//! | `Upstream` | `upstream::Upstream::send` (the call and its outcome class) |
//! | `Settle` | `delivery::attempt` (`Engine::attempt`, what follows by `delivery::policy::next`) → `Claim::complete` / `Claim::fail` (failed or dead by `max_attempts`; `hold` keeps token and lease on an unknown outcome) |
//! | `Crash` | the process dies: its claims are left to their leases |
//! | `Tick` | time passing (the store `Clock`, or Redis `TIME`) |
//! | `Forget` | admin `DELETE` → `store.records().delete(key, force = false)` |
//! | `ForceRelease` | admin `POST …/release` → `store.records().force_release` |
//! | `Redeliver` | admin `POST …/redeliver` → `Operator::redeliver` → `Records::claim` in `ClaimMode::Redeliver { force: false }` (a failed or dead record, never under a live lease), then the same attempt |
//! | `RedeliverForced` | `…/redeliver?force=true`: a completed record too |
//! | `Replay` | admin `POST …/replay` → `Operator::replay`: a claim of the fresh key `{key}.replay-{n}`, then the call and settle |
//!
//! Properties:
//! - the upstream performs the event's side effect under its key once, plus
//!   at most once per documented window: a lease that ran out under a
//!   holder that may have acted (it crashed after forwarding, or could not
//!   renew), an unknown outcome claimed again (by the sender's retry after
//!   the hold, or an operator's redelivery), and an operator's explicit
//!   reprocess (forget, force-release, forced redelivery);
//! - a replay performs it under its own new key, once;
//! - a completed record is never overwritten by a stale holder;
//! - a dead letter is never forwarded by a delivery;
//! - (sanity) the event can complete, be parked, be redelivered and
//!   replayed, and a documented window can be hit.
//!
//! `HOOKGATE_MODEL_TICKS` raises the time bound (default 5) for a longer run.
//!
//! [`entrances`] checks the record's life across every entrance — sync and
//! async senders, the hybrid, workers, operators, reloads between modes —
//! with its own action → code table; [`fanout`] one event handed to several
//! destinations and delivered by each; [`order`] one entity's events
//! delivered in order, one at a time; [`ordered_fanout`] an ordered
//! route's events handed to a destination that keeps their order and
//! its stale guard (dropping only what is older than the delivered head);
//! [`reload_order`] an ordered backlog drained in order after its route
//! stopped ordering, across a reload and a restart; [`reconcile`] an event
//! the sender delivers and two gateways' reconciliation passes recover,
//! in the sender's bytes and the API's.

mod entrances;
mod fanout;
mod guard;
mod order;
mod ordered_fanout;
mod reconcile;
mod reload_order;

use stateright::{Checker, Model, Property};

/// The bounds and the protocol rules under check.
#[derive(Clone)]
struct Protocol {
    gateways: usize,
    /// `processing_ttl`, in ticks.
    lease: u8,
    /// Time runs from 0 to this.
    ticks: u8,
    /// How many deliveries the sender makes (first plus retries).
    deliveries: u8,
    /// `on_unknown = "hold"`.
    hold_unknown: bool,
    /// `DELETE` refuses a key whose claim is live (unless forced).
    delete_checks_in_flight: bool,
    /// `complete` compares the fencing token.
    fenced: bool,
    /// `max_attempts`: failed attempts before the event is parked.
    max_attempts: u8,
    /// A delivery's claim of a dead letter is answered, not taken.
    dead_letters_answer: bool,
    /// The operator forgets keys and force-releases claims.
    forgets: bool,
    /// The operator redelivers (plain and forced) and replays.
    redelivers: bool,
    /// Redis's packed claim (`store.packed_claims`): a new key's lease end
    /// is Redis's clock as the gateway last read it, so it may come a tick
    /// early.
    packed: bool,
}

/// `HOOKGATE_MODEL_TICKS`, or `default`.
fn ticks(default: u8) -> u8 {
    std::env::var("HOOKGATE_MODEL_TICKS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

impl Protocol {
    /// The sync protocol, with an operator who forgets keys and
    /// force-releases claims; no attempt limit.
    fn sync() -> Self {
        Self {
            gateways: 2,
            lease: 2,
            ticks: ticks(5),
            deliveries: 3,
            hold_unknown: true,
            delete_checks_in_flight: true,
            fenced: true,
            max_attempts: 0,
            dead_letters_answer: true,
            forgets: true,
            redelivers: false,
            packed: false,
        }
    }

    /// Dead letters on top: `max_attempts = 2` parks the event; the operator
    /// redelivers (plain and forced) and replays instead of forgetting.
    fn dead_letters() -> Self {
        Self {
            ticks: ticks(4),
            max_attempts: 2,
            forgets: false,
            redelivers: true,
            ..Self::sync()
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum Record {
    Absent,
    Processing {
        token: u8,
        expires: u8,
        attempts: u8,
    },
    /// `Failed`, or `Dead` when `dead`; `held` is the claim an unknown
    /// outcome keeps until its lease runs out; `unknown` says the last
    /// attempt's outcome was unknown (the work may be done).
    Failed {
        attempts: u8,
        dead: bool,
        held: Option<(u8, u8)>,
        unknown: bool,
    },
    Completed {
        token: u8,
    },
}

/// A key of the model: the event's own, or its replay's.
const EVENT: usize = 0;
const REPLAY: usize = 1;

/// How an upstream call ended (docs/guide/what-a-sender-sees.md, "What a sender sees"), and whether the upstream
/// did the work.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
enum Outcome {
    Final,
    Refused,
    NotDelivered,
    /// A timeout or a broken connection: the work may or may not be done.
    Unknown {
        done: bool,
    },
}

impl Outcome {
    const ALL: [Outcome; 5] = [
        Outcome::Final,
        Outcome::Refused,
        Outcome::NotDelivered,
        Outcome::Unknown { done: true },
        Outcome::Unknown { done: false },
    ];

    fn did_work(self) -> bool {
        matches!(self, Outcome::Final | Outcome::Unknown { done: true })
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum Gateway {
    Idle,
    /// Holds the claim of `token`; its upstream call is running.
    Calling {
        token: u8,
    },
    /// The call ended with `outcome`; the claim is not settled yet.
    Answered {
        token: u8,
        outcome: Outcome,
    },
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct State {
    now: u8,
    record: Record,
    next_token: u8,
    gateways: Vec<Gateway>,
    deliveries: u8,
    /// Side effects the upstream performed, per key (the event's, its
    /// replay's).
    effects: [u8; 2],
    /// Documented windows opened so far (see the module doc).
    windows: u8,
    /// Whether an operator action was used (each is used at most once).
    forgot: bool,
    force_released: bool,
    redelivered: bool,
    force_redelivered: bool,
    replayed: bool,
    /// A completion landed on a record another holder had completed.
    overwritten: bool,
    /// A delivery claimed a dead letter.
    dead_forwarded: bool,
    /// The event was parked at some point.
    parked: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Action {
    Deliver(usize),
    Renew(usize),
    Upstream(usize, Outcome),
    Settle(usize),
    Crash(usize),
    Tick,
    Forget,
    ForceRelease,
    Redeliver(usize),
    RedeliverForced(usize),
    /// A replay's claim, call and settle, on its own fresh key; modelled in
    /// one step, since nothing else ever touches that key.
    Replay,
}

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: 0,
            record: Record::Absent,
            next_token: 1,
            gateways: vec![Gateway::Idle; self.gateways],
            deliveries: 0,
            effects: [0, 0],
            windows: 0,
            forgot: false,
            force_released: false,
            redelivered: false,
            force_redelivered: false,
            replayed: false,
            overwritten: false,
            dead_forwarded: false,
            parked: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (g, gateway) in state.gateways.iter().enumerate() {
            match gateway {
                Gateway::Idle => {
                    if state.deliveries < self.deliveries {
                        actions.push(Action::Deliver(g));
                    }
                    let failed = matches!(state.record, Record::Failed { .. });
                    let completed = matches!(state.record, Record::Completed { .. });
                    if self.redelivers && !state.redelivered && failed {
                        actions.push(Action::Redeliver(g));
                    }
                    if self.redelivers && !state.force_redelivered && completed {
                        actions.push(Action::RedeliverForced(g));
                    }
                }
                Gateway::Calling { .. } => {
                    actions.push(Action::Renew(g));
                    for outcome in Outcome::ALL {
                        actions.push(Action::Upstream(g, outcome));
                    }
                    actions.push(Action::Crash(g));
                }
                Gateway::Answered { .. } => {
                    actions.push(Action::Settle(g));
                    actions.push(Action::Crash(g));
                }
            }
        }
        if state.now < self.ticks {
            actions.push(Action::Tick);
        }
        if self.forgets && !state.forgot && state.record != Record::Absent {
            actions.push(Action::Forget);
        }
        let claimed = matches!(state.record, Record::Processing { .. })
            || matches!(state.record, Record::Failed { held: Some(_), .. });
        if self.forgets && !state.force_released && claimed {
            actions.push(Action::ForceRelease);
        }
        let stored = matches!(
            state.record,
            Record::Failed { .. } | Record::Completed { .. }
        );
        if self.redelivers && !state.replayed && stored {
            actions.push(Action::Replay);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        let now = state.now;
        match action {
            Action::Deliver(g) => {
                state.deliveries += 1;
                match self.claim(&mut state, g, false) {
                    Claimed::New => {}
                    // A dead letter: answered dead_letter_status, not forwarded.
                    Claimed::Dead | Claimed::Refused => {}
                }
            }
            Action::Redeliver(g) => {
                state.redelivered = true;
                if self.claim(&mut state, g, true) != Claimed::New {
                    return None; // 409 in_flight
                }
            }
            Action::RedeliverForced(g) => {
                state.force_redelivered = true;
                let Record::Completed { .. } = state.record else {
                    return None;
                };
                // An operator's explicit reprocess of a completed event.
                state.windows += 1;
                let token = state.take_token();
                state.record = Record::Processing {
                    token,
                    expires: now + self.lease,
                    attempts: 1,
                };
                state.gateways[g] = Gateway::Calling { token };
            }
            Action::Replay => {
                state.replayed = true;
                state.effects[REPLAY] += 1;
            }
            Action::Renew(g) => {
                let Gateway::Calling { token } = state.gateways[g] else {
                    return None;
                };
                match &mut state.record {
                    Record::Processing {
                        token: held,
                        expires,
                        ..
                    } if *held == token => *expires = now + self.lease,
                    _ => return None,
                }
            }
            Action::Upstream(g, outcome) => {
                let Gateway::Calling { token } = state.gateways[g] else {
                    return None;
                };
                state.effects[EVENT] += u8::from(outcome.did_work());
                state.gateways[g] = Gateway::Answered { token, outcome };
            }
            Action::Settle(g) => {
                let Gateway::Answered { token, outcome } = state.gateways[g] else {
                    return None;
                };
                state.gateways[g] = Gateway::Idle;
                let attempts = match state.record {
                    Record::Processing {
                        token: held,
                        attempts,
                        ..
                    } if held == token => Some(attempts),
                    _ => None,
                };
                match (outcome, attempts) {
                    (Outcome::Final, _) if attempts.is_some() || !self.fenced => {
                        state.overwritten |= matches!(state.record, Record::Completed { token: other } if other != token);
                        state.record = Record::Completed { token };
                    }
                    (Outcome::Final, None) => {}
                    (_, Some(attempts)) => {
                        let unknown = matches!(outcome, Outcome::Unknown { .. });
                        let dead = self.max_attempts > 0 && attempts >= self.max_attempts;
                        let held = match state.record {
                            Record::Processing { token, expires, .. }
                                if unknown && self.hold_unknown =>
                            {
                                Some((token, expires))
                            }
                            _ => None,
                        };
                        state.parked |= dead;
                        state.record = Record::Failed {
                            attempts,
                            dead,
                            held,
                            unknown,
                        };
                    }
                    (_, None) => {}
                }
            }
            Action::Crash(g) => state.gateways[g] = Gateway::Idle,
            Action::Tick => state.now += 1,
            Action::Forget => {
                if state.lease_live() {
                    if self.delete_checks_in_flight {
                        return None; // 409 in_flight
                    }
                } else {
                    // An operator asking to process a settled event again
                    // (or forgetting a lapsed claim) is a documented window.
                    state.windows += 1;
                }
                state.forgot = true;
                state.record = Record::Absent;
            }
            Action::ForceRelease => {
                state.windows += 1;
                state.force_released = true;
                state.record = match state.record {
                    // The window is counted here, once: the released holder
                    // may still act.
                    Record::Processing { attempts, .. } => Record::Failed {
                        attempts,
                        dead: false,
                        held: None,
                        unknown: false,
                    },
                    Record::Failed { attempts, dead, .. } => Record::Failed {
                        attempts,
                        dead,
                        held: None,
                        unknown: false,
                    },
                    _ => return None,
                };
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::always(
                "each side effect is the event's one, or a documented window's",
                |_, state: &State| state.effects[EVENT] <= 1 + state.windows,
            ),
            Property::always(
                "a replay acts once, under its own new key",
                |_, state: &State| state.effects[REPLAY] <= 1,
            ),
            Property::always(
                "a dead letter is never forwarded by a delivery",
                |_, state: &State| !state.dead_forwarded,
            ),
            Property::always(
                "a completed record is never overwritten by a stale holder",
                |_, state: &State| !state.overwritten,
            ),
            Property::sometimes("the event completes", |_, state: &State| {
                matches!(state.record, Record::Completed { .. })
            }),
            Property::sometimes(
                "a documented window lets a second side effect through",
                |_, state: &State| state.effects[EVENT] == 2,
            ),
        ];
        if self.redelivers {
            properties.extend([
                Property::sometimes("the event is parked", |_, state: &State| state.parked),
                Property::sometimes(
                    "a parked event is redelivered and completes",
                    |_, state: &State| {
                        state.parked
                            && state.redelivered
                            && matches!(state.record, Record::Completed { .. })
                    },
                ),
                Property::sometimes("a replay acts", |_, state: &State| {
                    state.effects[REPLAY] == 1
                }),
            ]);
        }
        properties
    }
}

/// What a claim found.
#[derive(Debug, PartialEq, Eq)]
enum Claimed {
    New,
    Dead,
    /// Completed, or in flight.
    Refused,
}

impl State {
    fn take_token(&mut self) -> u8 {
        let token = self.next_token;
        self.next_token += 1;
        token
    }

    /// Whether the record holds a live lease (a running claim, or a held
    /// unknown outcome).
    fn lease_live(&self) -> bool {
        match self.record {
            Record::Processing { expires, .. } => expires > self.now,
            Record::Failed {
                held: Some((_, expires)),
                ..
            } => expires > self.now,
            _ => false,
        }
    }
}

impl Protocol {
    /// `Records::claim` of the event's key by gateway `g`, a delivery or
    /// (`redeliver`) an operator's redelivery.
    fn claim(&self, state: &mut State, g: usize, redeliver: bool) -> Claimed {
        let live = state.lease_live();
        let attempts = match state.record {
            Record::Absent => 0,
            Record::Completed { .. } => return Claimed::Refused,
            Record::Failed { dead: true, .. } if !redeliver && self.dead_letters_answer => {
                return Claimed::Dead;
            }
            _ if live => return Claimed::Refused,
            Record::Processing {
                token, attempts, ..
            } => {
                // Taking over a lapsed lease: its holder may have acted
                // (crashed after forwarding, or could not renew in time).
                if self.holder_may_have_acted(state, token) {
                    state.windows += 1;
                }
                attempts
            }
            Record::Failed {
                attempts,
                unknown,
                dead,
                ..
            } => {
                state.dead_forwarded |= dead && !redeliver;
                // The last attempt's outcome was unknown: the work may be
                // done, and this claim sends it again with the same key.
                if unknown {
                    state.windows += 1;
                }
                attempts
            }
        };
        let token = state.take_token();
        let early = self.packed && state.record == Record::Absent;
        state.record = Record::Processing {
            token,
            expires: state.now + self.lease - u8::from(early),
            attempts: attempts + 1,
        };
        state.gateways[g] = Gateway::Calling { token };
        Claimed::New
    }

    /// Whether the gateway that held `token` may have had the upstream act:
    /// it is still calling, answered after acting, or is gone (crashed,
    /// possibly after acting — the model does not remember, so it counts).
    fn holder_may_have_acted(&self, state: &State, token: u8) -> bool {
        !state.gateways.iter().any(|gateway| match gateway {
            Gateway::Answered {
                token: held,
                outcome,
            } => *held == token && !outcome.did_work(),
            _ => false,
        })
    }
}

/// A counterexample as one action per line, up to the first state where
/// `broken` holds, and that state.
fn readable(path: &stateright::Path<State, Action>, broken: fn(&State) -> bool) -> String {
    let states = path.clone().into_states();
    let actions = path.clone().into_actions();
    let end = states.iter().position(broken).unwrap_or(states.len() - 1);
    let mut out: Vec<String> = actions[..end]
        .iter()
        .enumerate()
        .map(|(step, action)| format!("  {}. {action:?}", step + 1))
        .collect();
    out.push(format!("  => {:?}", states[end]));
    out.join("\n")
}

/// Breadth first on one thread, so a counterexample is a shortest one.
fn exhaust<M>(model: M) -> impl Checker<M>
where
    M: Model + Send + Sync + 'static,
    M::State: std::hash::Hash + Send + Sync + Clone + PartialEq + 'static,
    M::Action: Clone + PartialEq,
{
    model
        .checker()
        .threads(1)
        .timeout(std::time::Duration::from_secs(50))
        .spawn_bfs()
        .join()
}

/// Every interleaving within the bounds checked, every property held.
fn assert_exhausted<M: Model>(name: &str, checker: &impl Checker<M>)
where
    M::State: std::fmt::Debug + std::hash::Hash + Clone + PartialEq,
    M::Action: std::fmt::Debug + Clone + PartialEq,
{
    assert!(
        checker.is_done(),
        "{name}: the state space was not exhausted in time"
    );
    checker.assert_properties();
    eprintln!(
        "model ({name}): {} states, every interleaving checked",
        checker.unique_state_count()
    );
}

fn check(protocol: Protocol) -> impl Checker<Protocol> {
    protocol
        .checker()
        .timeout(std::time::Duration::from_secs(50))
        .spawn_bfs()
        .join()
}

/// The protocol as built: every property holds over every interleaving
/// within the bounds.
#[test]
fn the_sync_claim_protocol_holds_its_properties() {
    let checker = check(Protocol::sync());
    assert!(
        checker.is_done(),
        "the bounded state space was not exhausted in time"
    );
    checker.assert_properties();
    eprintln!(
        "model: {} states, every interleaving checked",
        checker.unique_state_count()
    );
}

/// The checker finds the races the code guards against: without the
/// in-flight check on `DELETE`, or without fencing on `complete`, it reports
/// a counterexample (the regression tests against the real gateway are
/// `hostile::senders::a_delete_during_a_running_call_is_refused_unless_forced`
/// and the conformance suite's `an_expired_holder_is_fenced_out`).
/// The packed claim's lease, stamped from Redis's clock as last read, may
/// end early: that is the lapsed-lease window the properties already
/// count, reached sooner, and nothing more.
#[test]
fn the_packed_claim_holds_the_sync_properties() {
    let checker = check(Protocol {
        packed: true,
        ..Protocol::sync()
    });
    assert!(
        checker.is_done(),
        "the bounded state space was not exhausted in time"
    );
    checker.assert_properties();
}

#[test]
fn the_checker_finds_the_races_the_code_prevents() {
    let unguarded_delete = check(Protocol {
        delete_checks_in_flight: false,
        ..Protocol::sync()
    });
    let path = unguarded_delete
        .discovery("each side effect is the event's one, or a documented window's")
        .expect("a delete during a running call lets a duplicate through");
    eprintln!(
        "counterexample without the in-flight check:\n{}",
        readable(&path, |state| state.effects[EVENT] > 1 + state.windows)
    );

    let unfenced = check(Protocol {
        fenced: false,
        ..Protocol::sync()
    });
    assert!(
        unfenced
            .discovery("a completed record is never overwritten by a stale holder")
            .is_some(),
        "without fencing a stale holder overwrites a completion"
    );
}

/// Dead letters on top of the sync protocol: events are parked after
/// `max_attempts`, redelivered with the same key and replayed under a new
/// one, and every property still holds.
#[test]
fn the_dead_letter_protocol_holds_its_properties() {
    let checker = check(Protocol::dead_letters());
    assert!(
        checker.is_done(),
        "the bounded state space was not exhausted in time"
    );
    checker.assert_properties();
    eprintln!(
        "model (dead letters): {} states, every interleaving checked",
        checker.unique_state_count()
    );
}

/// The dead-letter rule is load-bearing: a store that let a delivery claim
/// a dead letter would forward a parked event (the regression test against
/// the real gateway is
/// `dead_letters::the_nth_refused_attempt_parks_the_event_and_later_deliveries_are_not_forwarded`).
#[test]
fn the_checker_finds_a_forwarded_dead_letter() {
    let open = check(Protocol {
        dead_letters_answer: false,
        ..Protocol::dead_letters()
    });
    let path = open
        .discovery("a dead letter is never forwarded by a delivery")
        .expect("without the dead-letter answer a parked event is forwarded");
    eprintln!(
        "counterexample without the dead-letter answer:\n{}",
        readable(&path, |state| state.dead_forwarded)
    );
}

/// Asynchronous delivery (docs/guide/async-delivery.md, "Asynchronous delivery") as a model of its own: the sender's
/// deliveries are accepted into the store (answered once stored); workers
/// lease the queued event with a fencing token, call the upstream and
/// settle the attempt (completed, queued again, or dead after
/// `max_attempts`); workers crash at any step and leases lapse under them.
/// Time is abstract here: a queued event is due whenever a worker looks,
/// a lease may lapse at any moment.
///
/// | action | code |
/// | --- | --- |
/// | `Accept` | `ingress::Gateway::accept` → `Records::claim` in `ClaimMode::Accept` |
/// | `Lease` | `worker::pass` → `Queue::lease_due`; `Engine::deliver_due` parks a spent event (`delivery::policy::spent`) |
/// | `Upstream`, `Settle` | `Engine::deliver_due` → `Engine::attempt_stored` (a failure queues the next attempt) |
/// | `Lapse` | a worker's lease runs out (it crashed, or stalled past `processing_ttl`) |
#[derive(Clone)]
struct AsyncProtocol {
    workers: usize,
    max_attempts: u8,
    deliveries: u8,
    /// A worker parks an event leased more often than `max_attempts`
    /// instead of calling again.
    parks_spent: bool,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum Event {
    Absent,
    /// `unknown`: the last attempt's outcome was unknown.
    Queued {
        attempts: u8,
        unknown: bool,
    },
    Leased {
        token: u8,
        attempts: u8,
        lapsed: bool,
    },
    Completed,
    Dead,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct AsyncState {
    event: Event,
    next_token: u8,
    workers: Vec<Gateway>,
    deliveries: u8,
    /// A sender was answered `accept_status`.
    accepted: bool,
    effects: u8,
    windows: u8,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum AsyncAction {
    Accept,
    Lease(usize),
    Upstream(usize, Outcome),
    Settle(usize),
    Crash(usize),
    Lapse,
}

impl Model for AsyncProtocol {
    type State = AsyncState;
    type Action = AsyncAction;

    fn init_states(&self) -> Vec<AsyncState> {
        vec![AsyncState {
            event: Event::Absent,
            next_token: 1,
            workers: vec![Gateway::Idle; self.workers],
            deliveries: 0,
            accepted: false,
            effects: 0,
            windows: 0,
        }]
    }

    fn actions(&self, state: &AsyncState, actions: &mut Vec<AsyncAction>) {
        if state.deliveries < self.deliveries {
            actions.push(AsyncAction::Accept);
        }
        let leasable = matches!(
            state.event,
            Event::Queued { .. } | Event::Leased { lapsed: true, .. }
        );
        for (w, worker) in state.workers.iter().enumerate() {
            match worker {
                Gateway::Idle if leasable => actions.push(AsyncAction::Lease(w)),
                Gateway::Idle => {}
                Gateway::Calling { .. } => {
                    for outcome in Outcome::ALL {
                        actions.push(AsyncAction::Upstream(w, outcome));
                    }
                    actions.push(AsyncAction::Crash(w));
                }
                Gateway::Answered { .. } => {
                    actions.push(AsyncAction::Settle(w));
                    actions.push(AsyncAction::Crash(w));
                }
            }
        }
        if matches!(state.event, Event::Leased { lapsed: false, .. }) {
            actions.push(AsyncAction::Lapse);
        }
    }

    fn next_state(&self, last: &AsyncState, action: AsyncAction) -> Option<AsyncState> {
        let mut state = last.clone();
        match action {
            AsyncAction::Accept => {
                state.deliveries += 1;
                if state.event == Event::Absent {
                    state.event = Event::Queued {
                        attempts: 0,
                        unknown: false,
                    };
                }
                // Answered only now: the event is stored.
                state.accepted = true;
            }
            AsyncAction::Lease(w) => {
                let attempts = match state.event {
                    Event::Queued { attempts, unknown } => {
                        // The last outcome was unknown: this attempt may
                        // do the work again, under the same key.
                        state.windows += u8::from(unknown);
                        attempts
                    }
                    Event::Leased {
                        token,
                        attempts,
                        lapsed: true,
                    } => {
                        if holder_may_have_acted(&state.workers, token) {
                            state.windows += 1;
                        }
                        attempts
                    }
                    _ => return None,
                };
                if self.parks_spent && attempts >= self.max_attempts {
                    state.event = Event::Dead;
                    return Some(state);
                }
                let token = state.next_token;
                state.next_token += 1;
                state.event = Event::Leased {
                    token,
                    attempts: attempts + 1,
                    lapsed: false,
                };
                state.workers[w] = Gateway::Calling { token };
            }
            AsyncAction::Upstream(w, outcome) => {
                let Gateway::Calling { token } = state.workers[w] else {
                    return None;
                };
                state.effects += u8::from(outcome.did_work());
                state.workers[w] = Gateway::Answered { token, outcome };
            }
            AsyncAction::Settle(w) => {
                let Gateway::Answered { token, outcome } = state.workers[w] else {
                    return None;
                };
                state.workers[w] = Gateway::Idle;
                let Event::Leased {
                    token: held,
                    attempts,
                    ..
                } = state.event
                else {
                    return Some(state); // fenced out
                };
                if held != token {
                    return Some(state); // fenced out
                }
                state.event = match outcome {
                    Outcome::Final => Event::Completed,
                    _ if attempts >= self.max_attempts => Event::Dead,
                    _ => Event::Queued {
                        attempts,
                        unknown: matches!(outcome, Outcome::Unknown { .. }),
                    },
                };
            }
            AsyncAction::Crash(w) => state.workers[w] = Gateway::Idle,
            AsyncAction::Lapse => {
                let Event::Leased {
                    token, attempts, ..
                } = state.event
                else {
                    return None;
                };
                state.event = Event::Leased {
                    token,
                    attempts,
                    lapsed: true,
                };
            }
        }
        Some(state)
    }

    fn within_boundary(&self, state: &AsyncState) -> bool {
        // Without parking, a crash loop leases forever; the bound ends it.
        state.next_token <= 2 * self.max_attempts + 3
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "each side effect is the event's one, or a documented window's",
                |_, state: &AsyncState| state.effects <= 1 + state.windows,
            ),
            Property::always(
                "nothing is delivered that was not accepted",
                |_, state: &AsyncState| state.accepted || state.effects == 0,
            ),
            Property::eventually(
                "every accepted event ends completed or dead",
                |_, state: &AsyncState| {
                    state.accepted && matches!(state.event, Event::Completed | Event::Dead)
                },
            ),
            Property::sometimes(
                "an event completes after a retry",
                |_, state: &AsyncState| state.event == Event::Completed && state.next_token > 2,
            ),
        ]
    }
}

/// Whether the worker that held `token` may have had the upstream act (see
/// [`Protocol::holder_may_have_acted`]).
fn holder_may_have_acted(workers: &[Gateway], token: u8) -> bool {
    !workers.iter().any(|worker| match worker {
        Gateway::Answered {
            token: held,
            outcome,
        } => *held == token && !outcome.did_work(),
        _ => false,
    })
}

impl AsyncProtocol {
    fn spec() -> Self {
        Self {
            workers: 2,
            max_attempts: 2,
            deliveries: 2,
            parks_spent: true,
        }
    }
}

/// Every accepted event is eventually completed or dead, whatever the
/// workers' crashes and the upstream's answers; no event is delivered
/// twice outside a documented window.
#[test]
fn the_async_protocol_delivers_every_accepted_event_or_parks_it() {
    let checker = AsyncProtocol::spec()
        .checker()
        .timeout(std::time::Duration::from_secs(50))
        .spawn_bfs()
        .join();
    assert!(
        checker.is_done(),
        "the state space was not exhausted in time"
    );
    checker.assert_properties();
    eprintln!(
        "model (async): {} states, every interleaving checked",
        checker.unique_state_count()
    );
}

/// The liveness rule is load-bearing: workers that attempted an event again
/// however often its attempts died with them would lease a poison event
/// forever (the fix: `delivery::policy::spent`).
#[test]
fn the_checker_finds_a_poison_event_leased_forever() {
    let checker = AsyncProtocol {
        parks_spent: false,
        ..AsyncProtocol::spec()
    }
    .checker()
    .timeout(std::time::Duration::from_secs(50))
    .spawn_bfs()
    .join();
    let path = checker
        .discovery("every accepted event ends completed or dead")
        .expect("a crash loop never settles the event");
    let actions = path.into_actions();
    eprintln!("counterexample without parking a spent event: {actions:?}");
    assert!(actions.iter().any(|a| matches!(a, AsyncAction::Crash(_))));
}
