//! `hookgate events redeliver|replay|forget` over filters instead of one
//! key — a bulk action the gateway runs (docs/guide/dead-letters.md, "Bulk actions") — and
//! `hookgate events bulk list|status|cancel`. On a terminal the command
//! follows the action with a progress line until it ends; Ctrl-C leaves it
//! running in the gateway (`events bulk cancel ID` stops it).

use std::io::{IsTerminal, Write};
use std::time::Duration;

use http::Method;
use serde_json::Value;

use super::query::{selection_query, with_query, DestinationArg, FilterArgs};
use super::render::pretty;
use super::{encode, undelivered, AdminClient, Failure, TIMEOUT};

/// How often a followed bulk action is asked for its progress.
const POLL: Duration = Duration::from_millis(500);
/// A dry run or a start counts every match first: it may take a while on a
/// big store.
const COUNT_TIMEOUT: Duration = Duration::from_secs(600);

/// Which events a bulk action takes, and how.
#[derive(clap::Args)]
pub(super) struct BulkArgs {
    /// Only this route's events.
    #[arg(long = "route", id = "bulk_route")]
    route: Option<String>,
    /// processing, queued, failed, dead, completed or stale.
    #[arg(long, value_parser = super::query::state)]
    state: Option<String>,
    #[command(flatten)]
    filter: FilterArgs,
    /// Only count the matches; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Events a second, like `50/s`, `300/m` [default: 20/s].
    #[arg(long)]
    rate: Option<String>,
    /// Print the bulk action's id and return, instead of following it.
    #[arg(long)]
    no_wait: bool,
}

impl BulkArgs {
    /// `--destination`, for one event's action too.
    pub(super) fn destination(&self) -> &super::DestinationArg {
        &self.filter.destination
    }

    /// Whether anything narrows the selection.
    pub(super) fn narrows(&self) -> bool {
        self.route.is_some() || self.state.is_some() || !self.filter.is_empty()
    }
}

#[derive(clap::Subcommand)]
pub(super) enum BulkCommand {
    /// The bulk actions of the instance, newest first.
    List,
    /// One bulk action's progress.
    Status { id: String },
    /// Stop a bulk action: events in flight finish, no new one starts.
    Cancel { id: String },
}

impl AdminClient {
    /// Start `action` over what `args` select (or count it, `--dry-run`),
    /// and follow it to its end unless `--no-wait`.
    pub(super) async fn bulk(
        &self,
        action: &str,
        args: BulkArgs,
        json: bool,
    ) -> Result<(), Failure> {
        let mut query = selection_query(args.route.as_ref(), args.state.as_ref());
        query.extend(args.filter.query());
        query.extend(args.rate.as_ref().map(|r| format!("rate={}", encode(r))));
        if args.dry_run {
            query.push("dry_run=true".into());
        }
        let path = format!("/admin/events/{action}?{}", query.join("&"));
        let started = self.call(Method::POST, &path, COUNT_TIMEOUT).await?;
        if args.dry_run {
            if json {
                say!("{}", pretty(&started));
            } else {
                say!(
                    "{} events match: {action} would take each once",
                    started["matched"]
                );
            }
            return Ok(());
        }
        let id = started["id"].as_str().unwrap_or_default().to_owned();
        if args.no_wait {
            match json {
                true => say!("{}", pretty(&started)),
                false => say!(
                    "bulk action {id} started: {action} of {} events",
                    started["matched"]
                ),
            }
            return Ok(());
        }
        if !json {
            say!(
                "bulk action {id}: {action} of {} events (Ctrl-C leaves it running; `hookgate events bulk cancel {id}` stops it)",
                started["matched"]
            );
        }
        let done = self
            .follow(&id, !json && std::io::stderr().is_terminal())
            .await?;
        match json {
            true => say!("{}", pretty(&done)),
            false => say!("{}", summary(&done)),
        }
        ended(&done, &format!("bulk action {id}"))
    }

    /// `events redrive`: every dead letter of `route` (or of one of its
    /// destinations) redelivered as one bulk action, started, then
    /// followed (with a progress line on a terminal) to its tally.
    pub(super) async fn redrive(
        &self,
        route: &str,
        destination: DestinationArg,
        rate: &str,
        json: bool,
    ) -> Result<(), Failure> {
        let query = [format!("rate={}", encode(rate)), "wait=false".into()];
        let path = with_query(
            format!("/admin/routes/{}/dead-letters/redeliver", encode(route)),
            query.into_iter().chain(destination.query()),
        );
        let started = self.call(Method::POST, &path, COUNT_TIMEOUT).await?;
        let id = started["bulk"].as_str().unwrap_or_default().to_owned();
        let bulk = self
            .follow(&id, !json && std::io::stderr().is_terminal())
            .await?;
        let count = |name: &str| bulk[name].as_u64().unwrap_or(0);
        let done = serde_json::json!({
            "route": started["route"],
            "destination": started["destination"],
            "bulk": id,
            "dead_letters": started["dead_letters"],
            "completed": count("delivered"),
            "failed": count("failed") - count("dead"),
            "dead": count("dead"),
            "skipped": count("skipped") + count("queued"),
        });
        if json {
            say!("{}", pretty(&done));
        } else {
            say!(
                "redrove {} dead letters of {route}: {} completed, {} failed, {} dead again, {} skipped",
                done["dead_letters"], done["completed"], done["failed"], done["dead"], done["skipped"]
            );
        }
        ended(&bulk, &format!("the redrive ({id})"))
    }

    pub(super) async fn bulk_command(
        &self,
        command: BulkCommand,
        json: bool,
    ) -> Result<(), String> {
        let (method, path) = match &command {
            BulkCommand::List => (Method::GET, "/admin/bulk".to_owned()),
            BulkCommand::Status { id } => (Method::GET, format!("/admin/bulk/{}", encode(id))),
            BulkCommand::Cancel { id } => (Method::DELETE, format!("/admin/bulk/{}", encode(id))),
        };
        let answer = self.call(method, &path, TIMEOUT).await?;
        if json {
            say!("{}", pretty(&answer));
            return Ok(());
        }
        match command {
            BulkCommand::List => {
                let all = answer["bulk"].as_array().cloned().unwrap_or_default();
                if all.is_empty() {
                    say!("no bulk action on this instance");
                }
                for bulk in all {
                    say!(
                        "{}  {}",
                        summary(&bulk),
                        bulk["selection"].as_str().unwrap_or("")
                    );
                }
            }
            _ => say!("{}", summary(&answer)),
        }
        Ok(())
    }

    /// Ask after bulk action `id` until it ends; with `bar`, a progress
    /// line on standard error.
    pub(super) async fn follow(&self, id: &str, bar: bool) -> Result<Value, String> {
        let path = format!("/admin/bulk/{}", encode(id));
        loop {
            let bulk = self
                .call(Method::GET, &path, TIMEOUT)
                .await
                .map_err(|error| {
                    format!(
                        "{error}\nthe gateway that ran bulk action {id} no longer answers for it: \
                     what it sent stays recorded; run the same command again to go on \
                     (completed events no longer match a failed or dead filter, and are never \
                     redelivered by a bulk action)"
                    )
                })?;
            if bar {
                let mut err = std::io::stderr();
                let _ = write!(err, "\r{}\x1b[K", progress_line(&bulk));
                let _ = err.flush();
            }
            if bulk["state"] != "running" {
                if bar {
                    eprintln!();
                }
                return Ok(bulk);
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// How an ended bulk action ends the command: its cause when it failed,
/// exit 3 when an event it touched was not delivered.
fn ended(bulk: &Value, what: &str) -> Result<(), Failure> {
    if bulk["state"] == "failed" {
        let why = bulk["last_error"].as_str().unwrap_or("no cause recorded");
        return Err(format!("{what} failed: {why}").into());
    }
    undelivered(bulk["failed"].as_u64().unwrap_or(0), what)
}

/// `[#####-----] 1200/2000`, and the counts so far.
fn progress_line(bulk: &Value) -> String {
    const WIDTH: u64 = 30;
    let (done, matched) = (count(bulk, "done"), count(bulk, "matched"));
    let filled = (done * WIDTH).checked_div(matched).unwrap_or(WIDTH);
    format!(
        "[{}{}] {done}/{matched}  delivered {}  failed {}  skipped {}",
        "#".repeat(filled as usize),
        "-".repeat((WIDTH - filled) as usize),
        count(bulk, "delivered"),
        count(bulk, "failed"),
        count(bulk, "skipped"),
    )
}

/// One line: id, action, state and counts.
fn summary(bulk: &Value) -> String {
    let mut line = format!(
        "{} {} {}: {} matched, {} delivered, {} failed ({} dead), {} queued, {} skipped",
        bulk["id"].as_str().unwrap_or(""),
        bulk["action"].as_str().unwrap_or(""),
        bulk["state"].as_str().unwrap_or(""),
        count(bulk, "matched"),
        count(bulk, "delivered"),
        count(bulk, "failed"),
        count(bulk, "dead"),
        count(bulk, "queued"),
        count(bulk, "skipped"),
    );
    if let Some(by) = bulk["cancelled_by"].as_str() {
        line += &format!(" (cancelled by {by})");
    }
    line
}

fn count(bulk: &Value, name: &str) -> u64 {
    bulk[name].as_u64().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_progress_line_fills_with_what_is_done() {
        let bulk = serde_json::json!({"done": 15, "matched": 30, "delivered": 14, "failed": 1, "skipped": 0});
        let line = progress_line(&bulk);
        assert!(
            line.starts_with(&format!("[{}{}] 15/30", "#".repeat(15), "-".repeat(15))),
            "{line}"
        );
        let empty = serde_json::json!({"done": 0, "matched": 0});
        assert!(progress_line(&empty).starts_with(&format!("[{}]", "#".repeat(30))));
    }
}
