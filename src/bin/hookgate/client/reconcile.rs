//! `hookgate reconcile status [ROUTE]` and `hookgate reconcile ROUTE
//! [--since 2d] [--dry-run]` (docs/guide/reconciliation.md, "Reconciliation"): a route's
//! reconciliation with its sender's API as the fleet last recorded it, or
//! one pass now — a dry run lists what is missing and changes nothing. A
//! pass that could not recover every missing event exits 3.

use std::process::ExitCode;

use http::Method;
use serde_json::Value;

use super::render::pretty;
use super::{encode, run, AdminArgs, Failure, EXIT_USAGE};

/// A pass may take as long as its window's pages.
const PASS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

#[derive(clap::Args)]
pub struct ReconcileArgs {
    #[command(flatten)]
    admin: AdminArgs,
    /// `status` (then optionally a ROUTE), or the ROUTE to reconcile now.
    what: String,
    route: Option<String>,
    /// Look this far back (like `2d`) instead of from the last good pass.
    #[arg(long)]
    since: Option<String>,
    /// List what is missing; deliver and ask nothing.
    #[arg(long)]
    dry_run: bool,
}

/// Run one `hookgate reconcile` command.
pub fn reconcile(args: ReconcileArgs) -> ExitCode {
    let status = args.what == "status";
    let usage = match (status, &args.route) {
        (true, _) if args.since.is_some() || args.dry_run => {
            Some("`reconcile status` takes no --since or --dry-run".to_owned())
        }
        (false, Some(extra)) => Some(format!("unexpected argument {extra:?}: give one ROUTE")),
        _ => args.since.as_deref().and_then(|since| {
            hookgate::clock::parse_duration(since)
                .err()
                .map(|error| format!("--since {since:?}: {error}"))
        }),
    };
    if let Some(usage) = usage {
        say_err!("error: {usage}");
        return ExitCode::from(EXIT_USAGE);
    }
    let json = args.admin.json;
    run(&args.admin, |client| async move {
        if status {
            let routes = match &args.route {
                Some(route) => {
                    let path = format!("/admin/routes/{}/reconcile", encode(route));
                    vec![client.call(Method::GET, &path, super::TIMEOUT).await?]
                }
                None => {
                    let all = client
                        .call(Method::GET, "/admin/routes", super::TIMEOUT)
                        .await?;
                    (all["routes"].as_array().into_iter().flatten())
                        .filter(|route| route["reconcile"].is_object())
                        .map(|route| route["reconcile"].clone())
                        .collect()
                }
            };
            match json {
                true => say!("{}", pretty(&Value::Array(routes))),
                false if routes.is_empty() => say!("no route reconciles with its sender"),
                false => routes.iter().for_each(print_status),
            }
            return Ok(());
        }
        let mut path = format!("/admin/routes/{}/reconcile?", encode(&args.what));
        if let Some(since) = &args.since {
            path.push_str(&format!("since={}&", encode(since)));
        }
        if args.dry_run {
            path.push_str("dry_run=true");
        }
        let done = client.call(Method::POST, &path, PASS_TIMEOUT).await?;
        if let (false, Some(error)) = (json, done["error"].as_str()) {
            return Err(Failure::Refused(format!(
                "the sender's API could not be read: {error}"
            )));
        }
        match (json, args.dry_run) {
            (true, _) => say!("{}", pretty(&done)),
            (false, true) => print_missing(&done),
            (false, false) => print_status(&done),
        }
        match done["errors"].as_u64().unwrap_or(0) {
            0 => Ok(()),
            n => Err(Failure::Undelivered(format!(
                "{n} missing event(s) were not recovered; the next pass tries again"
            ))),
        }
    })
}

fn text(value: &Value) -> &str {
    value.as_str().unwrap_or("-")
}

fn print_status(status: &Value) {
    say!(
        "{} ({}, every {}, lookback {})",
        text(&status["route"]),
        text(&status["sender"]),
        text(&status["every"]),
        text(&status["lookback"])
    );
    say!("  last run      {}", text(&status["last_run_at"]));
    say!("  last success  {}", text(&status["last_success_at"]));
    say!(
        "  window        {} .. {}",
        text(&status["since"]),
        text(&status["until"])
    );
    let count = |name: &str| status[name].as_u64().unwrap_or(0);
    say!(
        "  last pass     seen {}, missing {}, delivered {}, asked {}, errors {}",
        count("seen"),
        count("missing"),
        count("delivered"),
        count("asked"),
        count("errors")
    );
    if let Some(error) = status["last_error"].as_str() {
        say!("  last error    {error}");
    }
}

fn print_missing(done: &Value) {
    let missing = done["missing"].as_array().map_or(&[][..], Vec::as_slice);
    say!(
        "{} missing of {} seen on {} ({} .. {}); nothing was delivered or asked",
        missing.len(),
        done["seen"].as_u64().unwrap_or(0),
        text(&done["route"]),
        text(&done["since"]),
        text(&done["until"])
    );
    for key in missing {
        say!("{}", text(key));
    }
}
