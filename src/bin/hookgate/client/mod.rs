//! The admin API's command-line clients: `hookgate events …` (stored
//! events, docs/guide/dead-letters.md, "Failed events and dead letters"), `hookgate routes …` (pause and resume, docs/guide/traffic-control.md, "Traffic control") and
//! `hookgate reload` (which, unlike SIGHUP, tells whether it took).
//!
//! They talk to a running gateway's admin listener (`--admin URL`, default
//! `$HOOKGATE_ADMIN_URL` or `http://127.0.0.1:9090`) with the bearer token
//! from `$HOOKGATE_ADMIN_TOKEN` (or the file `$HOOKGATE_ADMIN_TOKEN_FILE`),
//! print tables a person can read, or the
//! API's JSON with `--json` for scripts. Exit codes: 0 done, 1 not found or
//! refused (the API's error is printed), 2 usage.

/// Print a line for a person: control characters that came from a sender
/// or the network (escape sequences that retitle a terminal, clear it or
/// hide text) are shown escaped; newlines and tabs are kept. `--json`
/// output is escaped by JSON itself.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::client::render::say(&format!($($arg)*))
    };
}

/// [`say!`] on standard error.
macro_rules! say_err {
    ($($arg:tt)*) => {
        eprintln!("{}", $crate::client::render::escaped(&format!($($arg)*)))
    };
}

mod bulk;
mod list;
mod query;
mod reconcile;
mod render;

use std::process::ExitCode;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use self::bulk::{BulkArgs, BulkCommand};
use self::list::Listing;
use self::query::{with_query, DestinationArg};
pub use self::reconcile::{reconcile, ReconcileArgs};
use self::render::{paused_text, pretty, print_blocked, print_record, print_routes, print_sent};

/// How long one admin call may take.
const TIMEOUT: Duration = Duration::from_secs(30);

#[derive(clap::Args)]
pub struct EventsArgs {
    #[command(flatten)]
    admin: AdminArgs,
    #[command(subcommand)]
    command: EventsCommand,
}

#[derive(clap::Args)]
pub struct RoutesArgs {
    #[command(flatten)]
    admin: AdminArgs,
    #[command(subcommand)]
    command: RoutesCommand,
}

#[derive(clap::Args)]
pub struct ReloadArgs {
    #[command(flatten)]
    admin: AdminArgs,
}

/// Where the admin API is, and how to print its answers.
#[derive(clap::Args)]
struct AdminArgs {
    /// The gateway's admin listener.
    #[arg(
        long,
        global = true,
        env = "HOOKGATE_ADMIN_URL",
        default_value = "http://127.0.0.1:9090"
    )]
    admin: String,
    /// Print the admin API's JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(clap::Subcommand)]
enum RoutesCommand {
    /// Every route with its delivery mode, pause, circuit breaker, rate
    /// limit and queue.
    List,
    /// Pause a route for the whole fleet: a sync route answers 503
    /// route_paused (senders retry later), an async one keeps accepting and
    /// holds its deliveries.
    Pause {
        route: String,
        #[command(flatten)]
        destination: DestinationArg,
        /// Why, for the log and for whoever looks next.
        #[arg(long)]
        reason: Option<String>,
        /// Who pauses it [default: $USER].
        #[arg(long)]
        by: Option<String>,
    },
    /// The entities of an ordered route whose later events wait behind a
    /// dead event (`on_blocked = "wait"`): redeliver or forget the dead
    /// event to let them go on, in order.
    Blocked {
        route: String,
        #[command(flatten)]
        destination: DestinationArg,
        /// At most this many (1-1000).
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Resume a paused route: its backlog is delivered at the route's pace.
    Resume {
        route: String,
        #[command(flatten)]
        destination: DestinationArg,
        /// Who resumes it [default: $USER].
        #[arg(long)]
        by: Option<String>,
    },
}

#[derive(clap::Subcommand)]
enum EventsCommand {
    /// List stored events, newest first.
    List(Listing),
    /// Show one event: state, attempts, last error, the stored request.
    Show {
        route: String,
        key: String,
        #[command(flatten)]
        destination: DestinationArg,
        /// Include the stored request body (base64 in --json).
        #[arg(long)]
        body: bool,
    },
    /// Send the stored request again with the same key (a retry): one
    /// event (ROUTE KEY), or every event the filters match, as a bulk
    /// action in the gateway.
    Redeliver {
        route: Option<String>,
        key: Option<String>,
        /// Also when the event already completed (one event only).
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        bulk: BulkArgs,
    },
    /// Send the stored request as a new event with a new key: one event
    /// (ROUTE KEY), or every event the filters match.
    Replay {
        route: Option<String>,
        key: Option<String>,
        #[command(flatten)]
        bulk: BulkArgs,
    },
    /// Redeliver every dead letter of a route (a bulk action; the command
    /// waits for its tally).
    Redrive {
        route: String,
        #[command(flatten)]
        destination: DestinationArg,
        /// Redeliveries per second (or like `300/m`).
        #[arg(long, default_value = "20")]
        rate: String,
    },
    /// Forget an event, so its next delivery is processed again: one event
    /// (ROUTE KEY), or every event the filters match.
    Forget {
        route: Option<String>,
        key: Option<String>,
        /// Also while a delivery of it is running (one event only).
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        bulk: BulkArgs,
    },
    /// The gateway's bulk actions: list, status ID, cancel ID.
    Bulk {
        #[command(subcommand)]
        command: BulkCommand,
    },
}

impl EventsCommand {
    /// What clap cannot say: one event is ROUTE and KEY, a bulk action
    /// needs a filter.
    fn check(&self) -> Result<(), String> {
        let (route, key, bulk, action) = match self {
            EventsCommand::Redeliver {
                route, key, bulk, ..
            } => (route, key, bulk, "redeliver"),
            EventsCommand::Replay { route, key, bulk } => (route, key, bulk, "replay"),
            EventsCommand::Forget {
                route, key, bulk, ..
            } => (route, key, bulk, "forget"),
            _ => return Ok(()),
        };
        match (route, key) {
            (Some(_), Some(_)) => Ok(()),
            (None, None) if bulk.narrows() => Ok(()),
            (None, None) => Err(format!(
                "give ROUTE KEY for one event, or filters (--route, --state, --since, --status, …) \
                 to {action} every event they match"
            )),
            _ => Err(
                "give both ROUTE and KEY for one event, or neither and filters \
                 (--route, --state, --since, --status, …) for every event they match"
                    .into(),
            ),
        }
    }
}

/// Exit code for a bad command line (docs/guide/configuration.md, "Configuration").
pub(crate) const EXIT_USAGE: u8 = 2;
/// Exit code for an action that ran, but left an event it touched
/// undelivered (failed, or dead again).
const EXIT_UNDELIVERED: u8 = 3;

/// Why a command did not end well, and so its exit code.
pub(crate) enum Failure {
    /// Not found, refused, or the gateway did not answer: 1.
    Refused(String),
    /// It ran, and at least one event it touched was not delivered: 3.
    Undelivered(String),
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure::Refused(message)
    }
}

/// `Undelivered` when `failed` events of an action were not delivered.
fn undelivered(failed: u64, what: &str) -> Result<(), Failure> {
    match failed {
        0 => Ok(()),
        n => Err(Failure::Undelivered(format!(
            "{n} event(s) of the {what} were not delivered (failed, or dead again)"
        ))),
    }
}

/// 1 when a single redelivery or replay left its event failed or dead.
fn not_delivered(sent: &Value) -> u64 {
    u64::from(matches!(sent["state"].as_str(), Some("failed" | "dead")))
}

/// Run one `hookgate events` command.
pub fn events(args: EventsArgs) -> ExitCode {
    if let Err(usage) = args.command.check() {
        say_err!("error: {usage}");
        return ExitCode::from(EXIT_USAGE);
    }
    let json = args.admin.json;
    run(&args.admin, |client| async move {
        client.events(args.command, json).await
    })
}

/// `hookgate reload`: `POST /admin/reload`; fails (exit 1, the problems
/// printed) when the gateway rejected the new config.
pub fn reload(args: ReloadArgs) -> ExitCode {
    let json = args.admin.json;
    run(&args.admin, |client| async move {
        let done = client.call(Method::POST, "/admin/reload", TIMEOUT).await?;
        if json {
            say!("{}", pretty(&done));
        } else {
            say!("reloaded");
            for setting in done["needs_restart"].as_array().into_iter().flatten() {
                say!(
                    "needs a restart (the running value stays): {}",
                    setting.as_str().unwrap_or_default()
                );
            }
        }
        Ok::<(), String>(())
    })
}

/// Run one `hookgate routes` command.
pub fn routes(args: RoutesArgs) -> ExitCode {
    let json = args.admin.json;
    run(&args.admin, |client| async move {
        client.routes(args.command, json).await
    })
}

fn run<F, E>(args: &AdminArgs, command: impl FnOnce(AdminClient) -> F) -> ExitCode
where
    F: std::future::Future<Output = Result<(), E>>,
    Failure: From<E>,
{
    let Some(token) = admin_token() else {
        say_err!(
            "error: set HOOKGATE_ADMIN_TOKEN to the gateway's admin.token \
             (or HOOKGATE_ADMIN_TOKEN_FILE to a file holding it)"
        );
        return ExitCode::from(EXIT_USAGE);
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let client = AdminClient {
        base: args.admin.trim_end_matches('/').to_owned(),
        token,
        http: Client::builder(TokioExecutor::new()).build_http(),
    };
    match runtime.block_on(command(client)).map_err(Failure::from) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Refused(message)) => {
            say_err!("error: {message}");
            ExitCode::FAILURE
        }
        Err(Failure::Undelivered(message)) => {
            say_err!("error: {message}");
            ExitCode::from(EXIT_UNDELIVERED)
        }
    }
}

/// `$HOOKGATE_ADMIN_TOKEN`, or the content of `$HOOKGATE_ADMIN_TOKEN_FILE`
/// (a systemd credential, a mounted Secret), one trailing newline dropped.
fn admin_token() -> Option<String> {
    if let Ok(token) = std::env::var("HOOKGATE_ADMIN_TOKEN") {
        return Some(token);
    }
    let path = std::env::var_os("HOOKGATE_ADMIN_TOKEN_FILE")?;
    let token = std::fs::read_to_string(path).ok()?;
    Some(token.trim_end_matches(['\n', '\r']).to_owned())
}

struct AdminClient {
    base: String,
    token: String,
    http: Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
}

impl AdminClient {
    async fn routes(&self, command: RoutesCommand, json: bool) -> Result<(), String> {
        let (route, destination, pause, by, reason) = match command {
            RoutesCommand::List => {
                let routes = self.call(Method::GET, "/admin/routes", TIMEOUT).await?;
                if json {
                    say!("{}", pretty(&routes));
                } else {
                    print_routes(&routes);
                }
                return Ok(());
            }
            RoutesCommand::Blocked {
                route,
                destination,
                limit,
            } => {
                let mut path = format!("/admin/routes/{}/blocked?limit={limit}", encode(&route));
                if let Some(destination) = destination.query() {
                    path.push_str(&format!("&{destination}"));
                }
                let blocked = self.call(Method::GET, &path, TIMEOUT).await?;
                if json {
                    say!("{}", pretty(&blocked));
                } else {
                    print_blocked(&blocked);
                }
                return Ok(());
            }
            RoutesCommand::Pause {
                route,
                destination,
                reason,
                by,
            } => (route, destination, true, by, reason),
            RoutesCommand::Resume {
                route,
                destination,
                by,
            } => (route, destination, false, by, None),
        };
        let by = by
            .or_else(|| std::env::var("USER").ok())
            .unwrap_or_else(|| "hookgate routes".into());
        let mut path = format!(
            "/admin/routes/{}/{}?by={}",
            encode(&route),
            if pause { "pause" } else { "resume" },
            encode(&by)
        );
        if let Some(reason) = reason {
            path.push_str(&format!("&reason={}", encode(&reason)));
        }
        if let Some(destination) = destination.query() {
            path.push_str(&format!("&{destination}"));
        }
        let done = self.call(Method::POST, &path, TIMEOUT).await?;
        if json {
            say!("{}", pretty(&done));
        } else {
            let verb = if pause { "paused" } else { "resumed" };
            let changed = if done["changed"] == true {
                ""
            } else {
                " (it already was)"
            };
            say!("{route} {verb}{changed}");
        }
        Ok(())
    }

    async fn events(&self, command: EventsCommand, json: bool) -> Result<(), Failure> {
        match command {
            EventsCommand::List(listing) => Ok(self.list(listing, json).await?),
            EventsCommand::Show {
                route,
                key,
                destination,
                body,
            } => {
                let query = destination.query().into_iter();
                let path = with_query(
                    key_path(&route, &key),
                    query.chain(body.then(|| "body=true".to_owned())),
                );
                let record = self.call(Method::GET, &path, TIMEOUT).await?;
                if json {
                    say!("{}", pretty(&record));
                } else {
                    print_record(&record);
                }
                Ok(())
            }
            EventsCommand::Redeliver {
                route,
                key,
                force,
                bulk,
            } => {
                let Some((route, key)) = one(route, key) else {
                    return self.bulk("redeliver", bulk, json).await;
                };
                let query = bulk.destination().query().into_iter();
                let path = with_query(
                    format!("{}/redeliver", key_path(&route, &key)),
                    query.chain(force.then(|| "force=true".to_owned())),
                );
                let sent = self.call(Method::POST, &path, TIMEOUT).await?;
                print_sent(&sent, json, "redelivered");
                undelivered(not_delivered(&sent), "redelivery")
            }
            EventsCommand::Replay { route, key, bulk } => {
                let Some((route, key)) = one(route, key) else {
                    return self.bulk("replay", bulk, json).await;
                };
                let path = with_query(
                    format!("{}/replay", key_path(&route, &key)),
                    bulk.destination().query(),
                );
                let sent = self.call(Method::POST, &path, TIMEOUT).await?;
                print_sent(&sent, json, "replayed");
                undelivered(not_delivered(&sent), "replay")
            }
            EventsCommand::Redrive {
                route,
                destination,
                rate,
            } => self.redrive(&route, destination, &rate, json).await,
            EventsCommand::Forget {
                route,
                key,
                force,
                bulk,
            } => {
                let Some((route, key)) = one(route, key) else {
                    return self.bulk("forget", bulk, json).await;
                };
                let query = bulk.destination().query().into_iter();
                let path = with_query(
                    key_path(&route, &key),
                    query.chain(force.then(|| "force=true".to_owned())),
                );
                let forgotten = self.call(Method::DELETE, &path, TIMEOUT).await?;
                if json {
                    say!("{}", pretty(&forgotten));
                } else {
                    say!("forgot {route}/{key}: its next delivery is processed again");
                }
                Ok(())
            }
            EventsCommand::Bulk { command } => Ok(self.bulk_command(command, json).await?),
        }
    }

    /// Say which routes (of `only`, or all) are paused, above a listing: their
    /// events are held.
    async fn print_paused(&self, only: Option<&str>) {
        let Ok(routes) = self.call(Method::GET, "/admin/routes", TIMEOUT).await else {
            return;
        };
        for route in routes["routes"].as_array().into_iter().flatten() {
            let name = route["name"].as_str().unwrap_or("");
            if only.is_none_or(|only| only == name) && !route["paused"].is_null() {
                say!("route {name} is {}", paused_text(&route["paused"]));
            }
        }
    }

    /// One admin API call; an error answer becomes its message.
    async fn call(&self, method: Method, path: &str, timeout: Duration) -> Result<Value, String> {
        let url = format!("{}{path}", self.base);
        let request = Request::builder()
            .method(method)
            .uri(&url)
            .header("authorization", format!("Bearer {}", self.token))
            .body(Full::new(Bytes::new()))
            .map_err(|e| format!("bad admin URL {url}: {e}"))?;
        let exchange = async {
            let response =
                self.http.request(request).await.map_err(|e| {
                    format!("cannot reach the admin listener at {}: {e}", self.base)
                })?;
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| format!("the admin answer broke off: {e}"))?
                .to_bytes();
            Ok::<_, String>((status, body))
        };
        let (status, body) = tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| format!("no answer from {} in {}s", self.base, timeout.as_secs()))??;
        let value: Value = serde_json::from_slice(&body)
            .map_err(|_| format!("{status}: {}", String::from_utf8_lossy(&body)))?;
        if status.is_success() {
            Ok(value)
        } else {
            let error = &value["error"];
            Err(format!(
                "{} ({}, HTTP {})",
                error["message"].as_str().unwrap_or("refused"),
                error["code"].as_str().unwrap_or("unknown"),
                status.as_u16()
            ))
        }
    }
}

/// ROUTE and KEY of one event, or neither (a bulk action over filters;
/// [`EventsCommand::check`] refused the rest).
fn one(route: Option<String>, key: Option<String>) -> Option<(String, String)> {
    route.zip(key)
}

fn key_path(route: &str, key: &str) -> String {
    format!("/admin/routes/{}/keys/{}", encode(route), encode(key))
}

pub(crate) use hookgate::headers::percent_encode as encode;

#[cfg(test)]
mod tests {
    use super::render::{age, now_ms};
    use super::*;

    #[test]
    fn encodes_keys_for_a_path() {
        assert_eq!(encode("evt_1.replay-2~"), "evt_1.replay-2~");
        assert_eq!(encode("a/b?c#d%e f"), "a%2Fb%3Fc%23d%25e%20f");
    }

    #[test]
    fn ages_read_briefly() {
        let now = now_ms();
        assert_eq!(age(Some(now - 5_000)), "5s");
        assert_eq!(age(Some(now - 3 * 3_600_000)), "3h");
        assert_eq!(age(None), "-");
    }
}
