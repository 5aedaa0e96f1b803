//! The replay guard on a sharded Redis Cluster (`store/redis/guard.rs`) as
//! a model: a body's guard and its events' records live in different slots,
//! so a delivery checks its own record, reads the guard, reads the record
//! the guard names, takes the guard by compare-and-set, and claims its key,
//! each a step of its own that any other delivery's steps may interleave
//! with. Two events of one body (keys A and B), A delivered twice at once
//! and B once; each delivery may crash at any step; a live holder renews
//! its lease and a crashed one's lapses; the holder completes or fails.
//! Checked exhaustively for small bounds.
//!
//! | action | code |
//! | --- | --- |
//! | `Inspect` | the claim script in `Guarded::Ask`: the key's own record answers, or it stops at the guard (`{4}`) |
//! | `ReadGuard` | `guard.rs` `READ`: the guard's value and age |
//! | `ReadFirst` | `guard.rs` `RECORD` on the key the guard names, and the decision in `take_guard` |
//! | `Take` | `guard.rs` `TAKE`: compare-and-set from the value read |
//! | `Claim` | the claim script in `Guarded::Took`, unless the take is half a lease old (`RedisStore::claim`) |
//! | `Settle` | the call and `Claim::complete` / `Claim::fail` (fenced by the token) |
//! | `Crash`, `Tick` | a gateway dies; time passes (live holders renew, `Claim::renewing`) |
//!
//! | (guard value) | `{key}\n{token}\n{at}\n{prev}`: `prev` is when the take it replaced was made, when that was the same key's |
//!
//! Property: no key of the body is claimed while another key of it answers
//! (completed, or a live lease) — what the claim script checks atomically
//! where key and guard share a slot. Each `fixed_*` flag removes one rule,
//! and the checker finds the duplicate that rule prevents.

use stateright::{Checker, Model, Property};

/// The protocol's rules; `true` is the code as built.
#[derive(Clone)]
pub struct Rules {
    /// A take younger than the lease whose record lacks its token means
    /// the taker is between take and claim: in flight.
    fixed_young_take: bool,
    /// The guard is taken by compare-and-set, not overwritten.
    fixed_compare_and_set: bool,
    /// A take older than half a lease is not used for a claim.
    fixed_stale_take: bool,
    /// A key's earlier take, superseded by its own later one, may still be
    /// claimed for half a lease: the body is not taken over until then.
    fixed_superseded_take: bool,
    lease: u8,
    ticks: u8,
}

impl Rules {
    fn as_built() -> Rules {
        Rules {
            fixed_young_take: true,
            fixed_compare_and_set: true,
            fixed_stale_take: true,
            fixed_superseded_take: true,
            lease: 2,
            ticks: 5,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Life {
    Absent,
    Processing { token: u8, until: u8 },
    Completed,
    Failed,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Rec {
    life: Life,
    /// The guard token the record's last claim took.
    guard_token: Option<u8>,
}

/// A guard's value: the first key, the take's token, when, and when the
/// take it replaced was made if that was the same key's.
type Guard = (u8, u8, u8, Option<u8>);

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    Start,
    Inspected,
    ReadGuard { read: Option<Guard> },
    Taking { read: Option<Guard> },
    Took { token: u8, at: u8 },
    Holding { token: u8 },
    Done,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    now: u8,
    records: [Rec; 2],
    guard: Option<Guard>,
    /// Each delivery's key and step.
    deliveries: [(u8, Step); 3],
    next_token: u8,
    /// A key was claimed while another key of the body answered.
    doubled: bool,
    /// B was answered from A's record (sanity).
    answered_from_other: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Inspect(usize),
    ReadGuard(usize),
    ReadFirst(usize),
    Take(usize),
    Claim(usize),
    Complete(usize),
    Fail(usize),
    Crash(usize),
    Tick,
}

fn answers(rec: &Rec, now: u8) -> bool {
    match rec.life {
        Life::Completed => true,
        Life::Processing { until, .. } => until > now,
        Life::Absent | Life::Failed => false,
    }
}

impl Model for Rules {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let absent = Rec {
            life: Life::Absent,
            guard_token: None,
        };
        vec![State {
            now: 0,
            records: [absent.clone(), absent],
            guard: None,
            deliveries: [(0, Step::Start), (0, Step::Start), (1, Step::Start)],
            next_token: 1,
            doubled: false,
            answered_from_other: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (i, (_, step)) in state.deliveries.iter().enumerate() {
            match step {
                Step::Start => actions.push(Action::Inspect(i)),
                Step::Inspected => actions.push(Action::ReadGuard(i)),
                Step::ReadGuard { .. } => actions.push(Action::ReadFirst(i)),
                Step::Taking { .. } => actions.push(Action::Take(i)),
                Step::Took { .. } => actions.push(Action::Claim(i)),
                Step::Holding { .. } => {
                    actions.push(Action::Complete(i));
                    actions.push(Action::Fail(i));
                }
                Step::Done => continue,
            }
            actions.push(Action::Crash(i));
        }
        if state.now < self.ticks {
            actions.push(Action::Tick);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        let now = state.now;
        match action {
            Action::Tick => {
                state.now += 1;
                // A live holder renews its lease; only a crashed one lapses
                // (renewals failing for a whole lease is the documented
                // window of the claim protocol, `model/mod.rs`).
                for (key, step) in &state.deliveries {
                    if let Step::Holding { token } = step {
                        let life = &mut state.records[*key as usize].life;
                        if matches!(life, Life::Processing { token: t, .. } if t == token) {
                            *life = Life::Processing {
                                token: *token,
                                until: state.now + self.lease,
                            };
                        }
                    }
                }
            }
            Action::Crash(i) => state.deliveries[i].1 = Step::Done,
            Action::Inspect(i) => {
                let key = state.deliveries[i].0 as usize;
                state.deliveries[i].1 = if answers(&state.records[key], now) {
                    Step::Done
                } else {
                    Step::Inspected
                };
            }
            Action::ReadGuard(i) => {
                state.deliveries[i].1 = Step::ReadGuard { read: state.guard };
            }
            Action::ReadFirst(i) => {
                let key = state.deliveries[i].0;
                let Step::ReadGuard { read } = state.deliveries[i].1.clone() else {
                    return None;
                };
                state.deliveries[i].1 = match read {
                    Some((first, token, at, prev)) if first != key => {
                        let rec = &state.records[first as usize];
                        let landed = rec.guard_token == Some(token);
                        // The other key may still claim with a take of its own.
                        let young = self.fixed_young_take && !landed && now - at < self.lease;
                        let superseded = self.fixed_superseded_take
                            && prev.is_some_and(|prev| now - prev < self.lease.div_ceil(2));
                        if answers(rec, now) {
                            state.answered_from_other = true;
                            Step::Done
                        } else if young || superseded {
                            Step::Done
                        } else {
                            Step::Taking { read }
                        }
                    }
                    _ => Step::Taking { read },
                };
            }
            Action::Take(i) => {
                let key = state.deliveries[i].0;
                let Step::Taking { read } = state.deliveries[i].1.clone() else {
                    return None;
                };
                if self.fixed_compare_and_set && state.guard != read {
                    state.deliveries[i].1 = Step::Inspected;
                } else {
                    let token = state.next_token;
                    state.next_token += 1;
                    let prev = read.and_then(|(first, _, at, _)| (first == key).then_some(at));
                    state.guard = Some((key, token, now, prev));
                    state.deliveries[i].1 = Step::Took { token, at: now };
                }
            }
            Action::Claim(i) => {
                let key = state.deliveries[i].0 as usize;
                let Step::Took { token, at } = state.deliveries[i].1 else {
                    return None;
                };
                let stale = self.fixed_stale_take && now - at >= self.lease.div_ceil(2);
                if stale || answers(&state.records[key], now) {
                    state.deliveries[i].1 = Step::Done;
                } else {
                    if answers(&state.records[1 - key], now) {
                        state.doubled = true;
                    }
                    state.records[key] = Rec {
                        life: Life::Processing {
                            token,
                            until: now + self.lease,
                        },
                        guard_token: Some(token),
                    };
                    state.deliveries[i].1 = Step::Holding { token };
                }
            }
            Action::Complete(i) | Action::Fail(i) => {
                let key = state.deliveries[i].0 as usize;
                let Step::Holding { token } = state.deliveries[i].1 else {
                    return None;
                };
                if matches!(state.records[key].life, Life::Processing { token: t, .. } if t == token)
                {
                    state.records[key].life = match action {
                        Action::Complete(_) => Life::Completed,
                        _ => Life::Failed,
                    };
                }
                state.deliveries[i].1 = Step::Done;
            }
        }
        Some(state)
    }

    fn within_boundary(&self, state: &State) -> bool {
        state.next_token <= 8
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "no key is claimed while another key of its body answers",
                |_, state: &State| !state.doubled,
            ),
            Property::sometimes(
                "a delivery is answered from the other key",
                |_, state: &State| state.answered_from_other,
            ),
            Property::sometimes(
                "after a failure the other key is claimed",
                |_, state: &State| {
                    state.records.iter().any(|r| r.life == Life::Failed)
                        && state
                            .records
                            .iter()
                            .any(|r| matches!(r.life, Life::Processing { .. } | Life::Completed))
                },
            ),
        ]
    }
}

fn check(rules: Rules) -> impl Checker<Rules> {
    super::exhaust(rules)
}

#[test]
fn the_split_replay_guard_never_claims_beside_an_answering_key() {
    super::assert_exhausted("guard", &check(Rules::as_built()));
}

#[test]
fn the_checker_finds_the_duplicate_each_guard_rule_prevents() {
    let cases = [
        (
            "a young take read as abandoned",
            Rules {
                fixed_young_take: false,
                ..Rules::as_built()
            },
        ),
        (
            "a guard overwritten instead of compared and set",
            Rules {
                fixed_compare_and_set: false,
                ..Rules::as_built()
            },
        ),
        (
            "a body taken over while a superseded take of its key may still claim",
            Rules {
                fixed_superseded_take: false,
                ..Rules::as_built()
            },
        ),
        (
            "a take used for a claim after the others may consider it abandoned",
            Rules {
                fixed_stale_take: false,
                lease: 2,
                ticks: 5,
                ..Rules::as_built()
            },
        ),
    ];
    for (defect, rules) in cases {
        let checker = check(rules);
        let path = checker
            .discovery("no key is claimed while another key of its body answers")
            .unwrap_or_else(|| panic!("{defect}: the checker found nothing"));
        eprintln!("{defect}: {:?}", path.into_actions());
    }
}
