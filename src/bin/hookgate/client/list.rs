//! `hookgate events list`: one page, or with `--all` every page — and then
//! again over what changed while it walked, so that a record retried
//! during the walk (it moves to the front of a newest-first listing,
//! behind the cursor) is neither skipped nor shown twice.

use std::collections::HashSet;

use http::Method;
use serde_json::Value;

use super::query::{selection_query, FilterArgs};
use super::render::{pretty, print_table};
use super::{encode, AdminClient, TIMEOUT};
use hookgate::clock::rfc3339;

/// Walks over what changed meanwhile after the first, at most: each covers
/// only the time the one before took.
const MORE_PASSES: usize = 4;
/// How far before a walk's start the next one looks back (ms): a change
/// carries the time its write began, which may be before the walk began
/// though the change became visible after the walk passed its place (a
/// record missed by both walks, seen under load). What is seen twice is
/// dropped.
const OVERLAP_MS: u64 = 60_000;

/// What `events list` asks for.
#[derive(clap::Args)]
pub(super) struct Listing {
    /// Only this route's events.
    #[arg(long)]
    route: Option<String>,
    /// processing, queued, failed, dead, completed or stale.
    #[arg(long, value_parser = super::query::state)]
    state: Option<String>,
    /// Events per page.
    #[arg(long, default_value_t = 50)]
    limit: usize,
    /// Go on from a page's `next` cursor.
    #[arg(long)]
    cursor: Option<String>,
    /// Follow every page to the end (and then what changed meanwhile).
    #[arg(long)]
    all: bool,
    #[command(flatten)]
    filter: FilterArgs,
}

impl AdminClient {
    pub(super) async fn list(&self, listing: Listing, json: bool) -> Result<(), String> {
        if !json {
            self.print_paused(listing.route.as_deref()).await;
        }
        let mut base = vec![format!("limit={}", listing.limit)];
        base.extend(selection_query(
            listing.route.as_ref(),
            listing.state.as_ref(),
        ));
        let now_ms = hookgate::clock::unix_ms();
        let filter = listing.filter.query_at(now_ms);
        // A walk after the first never looks back past what was asked.
        let floor = listing.filter.since_ms(now_ms).unwrap_or(0);
        if !listing.all {
            let mut query = [base, filter].concat();
            query.extend(listing.cursor.map(|c| format!("cursor={}", encode(&c))));
            let page = self.page(&query).await?;
            if json {
                say!("{}", pretty(&page));
            } else {
                print_table(&page, true);
                if let Some(next) = page["next_cursor"].as_str() {
                    say!("more: --cursor {next}");
                }
            }
            return Ok(());
        }
        // Every page; then, from a minute before the walk began (the
        // gateway's clock, `as_of`), what changed since, until a pass finds
        // nothing new. `--all --json` prints every event once as one array (what
        // `json.load` and `jq` read whole).
        let mut seen = HashSet::new();
        let mut every = Vec::new();
        let mut first = true;
        let mut since: Option<String> = None;
        let mut cursor = listing.cursor;
        for _ in 0..=MORE_PASSES {
            let mut began = None;
            let mut found = 0;
            loop {
                let mut query = [base.clone(), filter.clone()].concat();
                if let Some(since) = &since {
                    query.retain(|part| !part.starts_with("since="));
                    query.push(format!("since={}", encode(since)));
                }
                query.extend(cursor.take().map(|c| format!("cursor={}", encode(&c))));
                let mut page = self.page(&query).await?;
                began = began.or(page["as_of"].as_u64());
                let events = page["events"].as_array().cloned().unwrap_or_default();
                let new: Vec<Value> = (events.into_iter())
                    .filter(|event| {
                        seen.insert((event["route"].to_string(), event["key"].to_string()))
                    })
                    .collect();
                found += new.len();
                if json {
                    every.extend(new);
                } else {
                    page["events"] = Value::Array(new);
                    print_table(&page, first);
                    first = false;
                }
                match page["next_cursor"].as_str() {
                    Some(next) => cursor = Some(next.to_owned()),
                    None => break,
                }
            }
            let Some(began) = began else { break };
            if found == 0 && since.is_some() {
                break;
            }
            since = Some(rfc3339(began.saturating_sub(OVERLAP_MS).max(floor)));
        }
        if json {
            say!("{}", pretty(&Value::Array(every)));
        }
        Ok(())
    }

    async fn page(&self, query: &[String]) -> Result<Value, String> {
        let path = format!("/admin/events?{}", query.join("&"));
        self.call(Method::GET, &path, TIMEOUT).await
    }
}
