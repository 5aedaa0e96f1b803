//! The claim protocol of SPEC §4 as a model, checked exhaustively with
//! `stateright` for small bounds: gateways that claim, renew, call the
//! upstream and settle the claim by the outcome class; a store whose leases
//! expire; an upstream whose calls end final, refused, not delivered or
//! unknown (having done the work or not); gateways that crash at any step;
//! a sender that retries; an operator who forgets keys and force-releases
//! claims; and a clock of discrete ticks. One event is enough: the store
//! keeps events independent.
//!
//! Model action → code (keep this table true when the protocol changes):
//!
//! | action | code |
//! | --- | --- |
//! | `Deliver` | `pipeline::Gateway::claim` → `store::Backend::claim` (insert, or take over a released or lapsed record) |
//! | `Renew` | `claim::Claim::renewing` → `Backend::renew` (compare-and-set on the token, no expiry check) |
//! | `Upstream` | `upstream::Upstream::send` (the call and its outcome class) |
//! | `Settle` | `pipeline::Gateway::process` step 7 → `Claim::complete` / `release` / `hold` |
//! | `Crash` | the process dies: its claims are left to their leases |
//! | `Tick` | time passing (the store `Clock`, or Redis `TIME`) |
//! | `Forget` | admin `DELETE` → `Store::delete(key, force = false)` |
//! | `ForceRelease` | admin `POST …/release` → `Store::force_release` |
//!
//! Properties:
//! - the upstream performs the event's side effect once, plus at most once
//!   per documented window: a lease that ran out under a holder that may
//!   have acted (it crashed after forwarding, held an unknown outcome, or
//!   could not renew), and an operator's explicit reprocess or force-release;
//! - a completed record is never overwritten by a stale holder;
//! - (sanity) the event can complete, and a documented window can be hit.
//!
//! `HOOKGATE_MODEL_TICKS` raises the time bound (default 5) for a longer run.

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
}

impl Protocol {
    fn sync() -> Self {
        let ticks = std::env::var("HOOKGATE_MODEL_TICKS")
            .ok()
            .and_then(|value| value.parse().ok())
            .unwrap_or(5);
        Self {
            gateways: 2,
            lease: 2,
            ticks,
            deliveries: 3,
            hold_unknown: true,
            delete_checks_in_flight: true,
            fenced: true,
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum Record {
    Absent,
    Processing { token: u8, expires: u8 },
    Released,
    Completed { token: u8 },
}

/// How an upstream call ended (SPEC §4 step 7), and whether the upstream
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
    /// Side effects the upstream performed.
    effects: u8,
    /// Documented windows opened so far (see the module doc).
    windows: u8,
    /// Whether an operator action was used (each is used at most once).
    forgot: bool,
    force_released: bool,
    /// A completion landed on a record another holder had completed.
    overwritten: bool,
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
            effects: 0,
            windows: 0,
            forgot: false,
            force_released: false,
            overwritten: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (g, gateway) in state.gateways.iter().enumerate() {
            match gateway {
                Gateway::Idle if state.deliveries < self.deliveries => {
                    actions.push(Action::Deliver(g))
                }
                Gateway::Idle => {}
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
        if !state.forgot && state.record != Record::Absent {
            actions.push(Action::Forget);
        }
        if !state.force_released && matches!(state.record, Record::Processing { .. }) {
            actions.push(Action::ForceRelease);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        let now = state.now;
        let live = |record: &Record| matches!(record, Record::Processing { expires, .. } if *expires > now);
        match action {
            Action::Deliver(g) => {
                state.deliveries += 1;
                let claimable = match &state.record {
                    Record::Absent | Record::Released => true,
                    Record::Processing { expires, .. } => *expires <= now,
                    Record::Completed { .. } => false,
                };
                if claimable {
                    if let Record::Processing { token, .. } = state.record {
                        // Taking over a lapsed lease: its holder may have
                        // acted (crashed after forwarding, held an unknown
                        // outcome, or could not renew in time).
                        if self.holder_may_have_acted(&state, token) {
                            state.windows += 1;
                        }
                    }
                    let token = state.next_token;
                    state.next_token += 1;
                    state.record = Record::Processing {
                        token,
                        expires: now + self.lease,
                    };
                    state.gateways[g] = Gateway::Calling { token };
                }
            }
            Action::Renew(g) => {
                let Gateway::Calling { token } = state.gateways[g] else {
                    return None;
                };
                match &mut state.record {
                    Record::Processing {
                        token: held,
                        expires,
                    } if *held == token => *expires = now + self.lease,
                    _ => return None,
                }
            }
            Action::Upstream(g, outcome) => {
                let Gateway::Calling { token } = state.gateways[g] else {
                    return None;
                };
                state.effects += u8::from(outcome.did_work());
                state.gateways[g] = Gateway::Answered { token, outcome };
            }
            Action::Settle(g) => {
                let Gateway::Answered { token, outcome } = state.gateways[g] else {
                    return None;
                };
                state.gateways[g] = Gateway::Idle;
                let holds =
                    matches!(state.record, Record::Processing { token: held, .. } if held == token);
                match outcome {
                    Outcome::Final if holds || !self.fenced => {
                        state.overwritten |= matches!(state.record, Record::Completed { token: other } if other != token);
                        state.record = Record::Completed { token };
                    }
                    Outcome::Unknown { .. } if self.hold_unknown => {}
                    Outcome::Refused | Outcome::NotDelivered | Outcome::Unknown { .. } if holds => {
                        state.record = Record::Released;
                    }
                    _ => {}
                }
            }
            Action::Crash(g) => state.gateways[g] = Gateway::Idle,
            Action::Tick => state.now += 1,
            Action::Forget => {
                if live(&state.record) {
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
                state.record = Record::Released;
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "each side effect is the event's one, or a documented window's",
                |_, state: &State| state.effects <= 1 + state.windows,
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
                |_, state: &State| state.effects == 2,
            ),
        ]
    }
}

impl Protocol {
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
        readable(&path, |state| state.effects > 1 + state.windows)
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
