//! Reconciliation (docs/guide/reconciliation.md) as a model: one Stripe event,
//! which the sender delivers (its own bytes) and retries until it is
//! answered 2xx, and which two gateways' passes find missing in the
//! sender's API and deliver (the API's bytes) — every step of each
//! interleaving with the others'. Checked exhaustively.
//!
//! | action | code |
//! | --- | --- |
//! | `Send` | the sender's delivery: `ingress::Gateway::claim` → `Records::claim` in `ClaimMode::Deliver`; a completed record answers a replay, unless `answer::check_body` refuses the body (`payload_mismatch`) |
//! | `TakeLease` | `Reconciler::pass`: the route's `lease:` key claimed in `ClaimMode::Deliver` (held while the pass runs, then completed for `every`: a gateway that finds it taken runs no pass) |
//! | `Read` | `Pass::needed`: `store.records().get` of the event's key, and `pass::needs` on it |
//! | `Claim` | `Gateway::deliver_fetched` → the same claim as the sender's, the record's body `fetched-…` |
//! | `Call`, `Settle` | the attempt (`Engine::attempt`): the upstream's side effect, then `complete` |
//!
//! Properties: the upstream does the event's side effect once; the
//! sender's own retry is never refused for the API's rendering of the
//! event (it would retry, refused, until it gives up); no two passes run
//! at once. Each `fixed_*` flag removes one rule, and the checker finds
//! what that rule prevents.

use stateright::{Checker, Model, Property};

/// The rules under check; `true` is the code as built.
#[derive(Clone)]
pub struct Rules {
    /// A record claimed with a fetched body matches the sender's bytes,
    /// and the other way round.
    fixed_fetched_body: bool,
    /// A pass delivers what it read as missing through the claim.
    fixed_claim: bool,
    /// A pass holds the route's lease.
    fixed_lease: bool,
}

impl Rules {
    fn as_built() -> Self {
        Self {
            fixed_fetched_body: true,
            fixed_claim: true,
            fixed_lease: true,
        }
    }
}

/// Whose bytes a record was claimed with.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Body {
    /// The webhook the sender sent.
    Sender,
    /// The event as the sender's API lists it.
    Fetched,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Life {
    Absent,
    Held(Body),
    Completed(Body),
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Step {
    Idle,
    /// Holds the route's lease (a pass), or is about to claim (a sender).
    Leased,
    /// Read the record as missing.
    Missing,
    Holding,
    Called,
    Done,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct State {
    rec: Life,
    /// The sender: its step, and whether it was answered 2xx.
    sender: Step,
    answered: bool,
    sends: u8,
    /// Two gateways' passes.
    passes: [Step; 2],
    lease: Option<usize>,
    side_effects: u8,
    mismatched: bool,
    two_passes: bool,
    by_pass: bool,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Action {
    Send,
    SenderCall,
    SenderSettle,
    TakeLease(usize),
    Read(usize),
    Claim(usize),
    Call(usize),
    Settle(usize),
}

/// How many deliveries the sender makes before it gives up.
const SENDS: u8 = 3;

impl Rules {
    /// A claim with `body`: whether it took the record; a replay of a
    /// completed one may be refused for its body.
    fn claim(&self, state: &mut State, body: Body) -> Option<bool> {
        match state.rec {
            Life::Absent => {
                state.rec = Life::Held(body);
                Some(true)
            }
            Life::Held(_) => Some(false),
            Life::Completed(kept) => {
                let fetched = kept == Body::Fetched || body == Body::Fetched;
                let differs = kept != body && !(self.fixed_fetched_body && fetched);
                (!differs).then_some(false)
            }
        }
    }
}

impl Model for Rules {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            rec: Life::Absent,
            sender: Step::Idle,
            answered: false,
            sends: 0,
            passes: [Step::Idle; 2],
            lease: None,
            side_effects: 0,
            mismatched: false,
            two_passes: false,
            by_pass: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        match state.sender {
            Step::Idle if !state.answered && state.sends < SENDS => actions.push(Action::Send),
            Step::Holding => actions.push(Action::SenderCall),
            Step::Called => actions.push(Action::SenderSettle),
            _ => {}
        }
        for i in 0..2 {
            actions.push(match state.passes[i] {
                Step::Idle => Action::TakeLease(i),
                Step::Leased => Action::Read(i),
                Step::Missing => Action::Claim(i),
                Step::Holding => Action::Call(i),
                Step::Called => Action::Settle(i),
                Step::Done => continue,
            });
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Send => {
                state.sends += 1;
                match self.claim(&mut state, Body::Sender) {
                    Some(true) => state.sender = Step::Holding,
                    // A replay, 2xx.
                    Some(false) if matches!(state.rec, Life::Completed(_)) => state.answered = true,
                    // In flight: 409, the sender retries later.
                    Some(false) => {}
                    None => state.mismatched = true,
                }
            }
            Action::SenderCall => {
                state.side_effects += 1;
                state.sender = Step::Called;
            }
            Action::SenderSettle => {
                state.rec = Life::Completed(Body::Sender);
                (state.sender, state.answered) = (Step::Idle, true);
            }
            Action::TakeLease(i) => {
                if self.fixed_lease && state.lease.is_some() {
                    // Not due, or running elsewhere: this gateway is done.
                    state.passes[i] = Step::Done;
                } else {
                    state.two_passes |=
                        state.passes[1 - i] != Step::Idle && state.passes[1 - i] != Step::Done;
                    state.lease = Some(i);
                    state.passes[i] = Step::Leased;
                }
            }
            Action::Read(i) => {
                // `needs`: absent (a lapsed claim is not modelled here).
                state.passes[i] = match state.rec {
                    Life::Absent => Step::Missing,
                    _ => Step::Done,
                };
            }
            Action::Claim(i) => {
                let took = match self.fixed_claim {
                    true => self.claim(&mut state, Body::Fetched) == Some(true),
                    false => true,
                };
                state.passes[i] = if took { Step::Holding } else { Step::Done };
            }
            Action::Call(i) => {
                state.side_effects += 1;
                state.by_pass = true;
                state.passes[i] = Step::Called;
            }
            Action::Settle(i) => {
                if self.fixed_claim {
                    state.rec = Life::Completed(Body::Fetched);
                }
                state.passes[i] = Step::Done;
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("the upstream does the event once", |_, state: &State| {
                state.side_effects <= 1
            }),
            Property::always(
                "the sender's retry is never refused for the API's rendering",
                |_, state: &State| !state.mismatched,
            ),
            Property::always("no two passes run at once", |_, state: &State| {
                !state.two_passes
            }),
            Property::sometimes("a pass delivers the event", |_, state: &State| {
                state.by_pass && state.answered
            }),
            Property::sometimes("the sender delivers it first", |_, state: &State| {
                state.rec == Life::Completed(Body::Sender) && state.passes == [Step::Done; 2]
            }),
        ]
    }
}

fn check(rules: Rules) -> impl Checker<Rules> {
    super::exhaust(rules)
}

#[test]
fn a_reconciled_event_reaches_the_upstream_once_and_the_senders_retry_is_a_duplicate() {
    super::assert_exhausted("reconcile", &check(Rules::as_built()));
}

#[test]
fn the_checker_finds_what_each_reconciliation_rule_prevents() {
    let cases = [
        (
            "the sender's retry refused for the API's rendering",
            "the sender's retry is never refused for the API's rendering",
            Rules {
                fixed_fetched_body: false,
                ..Rules::as_built()
            },
        ),
        (
            "a pass forwarding what it read as missing without the claim",
            "the upstream does the event once",
            Rules {
                fixed_claim: false,
                ..Rules::as_built()
            },
        ),
        (
            "two gateways' passes without the lease",
            "no two passes run at once",
            Rules {
                fixed_lease: false,
                ..Rules::as_built()
            },
        ),
    ];
    for (defect, property, rules) in cases {
        let checker = check(rules);
        let path = checker
            .discovery(property)
            .unwrap_or_else(|| panic!("{defect}: the checker found nothing"));
        eprintln!("{defect}: {:?}", path.into_actions());
    }
}
