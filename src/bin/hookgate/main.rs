//! The `hookgate` binary: parse the command line, set up logging, load the
//! config, and hand over to the library.

// Deeply nested request futures (the gateway's stages around each store
// operation): computing their layouts needs more than the default 128.
#![recursion_limit = "256"]

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use hookgate::clock::Clock;
use hookgate::config::Config;
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};
use tracing_subscriber::EnvFilter;

mod client;
mod commands;
mod copy;
mod demo;
mod reencrypt;

#[derive(Parser)]
#[command(name = "hookgate", version, about = "Exactly-once webhook gateway")]
struct Cli {
    /// Log format; default text on a terminal, json otherwise.
    #[arg(long, global = true, value_enum)]
    log_format: Option<LogFormat>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway until SIGTERM or SIGINT.
    Run(ConfigArg),
    /// Validate the config, print a summary of the routes, and exit.
    Check(CheckArgs),
    /// Find, inspect and send again stored events, through a running
    /// gateway's admin API ($HOOKGATE_ADMIN_TOKEN).
    Events(crate::client::EventsArgs),
    /// List routes with their traffic controls; pause and resume them for
    /// the whole fleet, through a running gateway's admin API
    /// ($HOOKGATE_ADMIN_TOKEN).
    Routes(crate::client::RoutesArgs),
    /// Show exactly-once in one command: a gateway on the embedded store, a
    /// recording consumer and a sender, in this process; then keep serving
    /// so the printed curl lines can be tried.
    Demo(crate::demo::DemoArgs),
    /// Reconciliation with the senders' APIs: `status [ROUTE]`, or `ROUTE
    /// [--since 2d] [--dry-run]` for one pass now, through a running
    /// gateway's admin API ($HOOKGATE_ADMIN_TOKEN).
    Reconcile(crate::client::ReconcileArgs),
    /// Reload the running gateway's config through its admin API; exits 1
    /// (printing every problem) when the gateway rejected it.
    Reload(crate::client::ReloadArgs),
    /// Apply the store's pending schema migrations (PostgreSQL, embedded),
    /// with no store.timeout, and exit; safe beside running gateways.
    Migrate(MigrateArgs),
    /// Copy the embedded store while the gateway runs (SQLite's online
    /// backup), verified by opening the copy; exit 0.
    Backup(BackupArgs),
    /// Operations on a store as a whole.
    #[command(subcommand)]
    Store(StoreCommand),
}

#[derive(Subcommand)]
enum StoreCommand {
    /// Copy every live record (with its remaining retention) and the route
    /// pauses from the store of one config to the store of another, under
    /// the destination's key_prefix; idempotent and resumable, never over a
    /// newer record. The source may keep serving: copy again after the
    /// switch (docs/operations/stores.md, "Moving between stores").
    Copy(CopyArgs),
    /// Seal every record still sealed under an older [store.encryption]
    /// key, or kept in clear, under the first key, so the older keys can
    /// be dropped; paced, resumable (run it again: only what is left is
    /// rewritten), safe while the fleet serves (docs/operations/deploying.md,
    /// "Rotating [store.encryption] keys").
    Reencrypt(ReencryptArgs),
}

#[derive(clap::Args)]
struct ReencryptArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Records rewritten a second at most, e.g. `500/s` or `20000/m`
    /// [default: 500/s]
    #[arg(long, value_parser = parse_rate)]
    rate: Option<f64>,
}

fn parse_rate(text: &str) -> Result<f64, String> {
    hookgate::config::parse_rate(text)
        .ok_or_else(|| format!("{text:?} is not a rate: write it as N/s, N/m or N/h"))
}

#[derive(clap::Args)]
struct CopyArgs {
    /// The config whose store is read.
    #[arg(long)]
    from: PathBuf,
    /// The config whose store is written.
    #[arg(long)]
    to: PathBuf,
}

#[derive(clap::Args)]
struct BackupArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// The embedded store's file itself: the config is not read (its
    /// secrets may be gone, e.g. the service is stopped).
    #[arg(long)]
    store: Option<PathBuf>,
    /// Where the copy goes (a new file).
    #[arg(long)]
    to: PathBuf,
}

#[derive(clap::Args)]
struct MigrateArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Print the SQL of the pending migrations instead (all of them when
    /// the database has none recorded), for `psql -v ON_ERROR_STOP=1 -f`;
    /// it records each version it applies.
    #[arg(long)]
    print: bool,
    /// Print the GRANTs the gateways' role ROLE needs on the schema (rows
    /// and the ordering sequence, no DDL), for `psql`, and exit.
    #[arg(long, value_name = "ROLE")]
    grants: Option<String>,
}

#[derive(clap::Args)]
struct CheckArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Print only the SQL of every postgres schema migration, for `psql -v
    /// ON_ERROR_STOP=1 -f` on a new database (`hookgate migrate --print`
    /// prints just the pending ones of an existing one).
    #[arg(long)]
    print_migrations: bool,
    /// Print the catalogue of senders this binary verifies (scheme,
    /// default key, retry horizon, retention, evidence) and exit; no config
    /// is read.
    #[arg(long)]
    senders: bool,
}

#[derive(clap::Args)]
struct ConfigArg {
    /// Config file [default: $HOOKGATE_CONFIG, then ./gateway.toml]
    #[arg(long, env = "HOOKGATE_CONFIG", default_value = "gateway.toml")]
    config: PathBuf,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// mimalloc instead of glibc malloc: the request path allocates and frees
/// small buffers at a high rate; measured in BENCHMARKS.md. Built with
/// `no_thp` (Cargo.toml): no transparent huge pages for its arenas, which
/// cost 85 MiB at 10,000 idle connections and nothing in throughput.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Exit code for a bad config or bad usage (docs/guide/configuration.md, "Configuration").
const EXIT_CONFIG: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The demo speaks for itself on stdout; only problems are logged.
    let quiet = matches!(cli.command, Command::Demo(_));
    init_logging(cli.log_format, if quiet { "warn" } else { "info" });
    // The process's one clock, handed to everything that keeps time.
    #[allow(clippy::disallowed_methods)]
    let clock = Clock::system();
    match cli.command {
        Command::Demo(args) => match demo(args, clock) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("hookgate demo: {error}");
                ExitCode::FAILURE
            }
        },
        Command::Events(args) => crate::client::events(args),
        Command::Routes(args) => crate::client::routes(args),
        Command::Reload(args) => crate::client::reload(args),
        Command::Reconcile(args) => crate::client::reconcile(args),
        Command::Check(args) if args.senders => {
            print!("{}", hookgate::verify::catalogue());
            ExitCode::SUCCESS
        }
        Command::Check(args) => commands::check(args),
        Command::Backup(args) => commands::backup(args),
        Command::Store(StoreCommand::Copy(args)) => commands::copy(args, &clock),
        Command::Store(StoreCommand::Reencrypt(args)) => commands::reencrypt(args, &clock),
        Command::Migrate(args) if args.grants.is_some() => commands::grants(args),
        Command::Migrate(args) => commands::migrate(args),
        Command::Run(args) => {
            let config = match load(&args.config) {
                Ok(config) => config,
                Err(code) => return code,
            };
            match run(config, args.config, clock) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    tracing::error!("{error:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// The config at `path`, or the exit code for a bad one, its problems
/// printed.
fn load(path: &std::path::Path) -> Result<Config, ExitCode> {
    Config::load(path).map_err(|error| {
        eprintln!("{error}");
        ExitCode::from(EXIT_CONFIG)
    })
}

fn init_logging(format: Option<LogFormat>, default_level: &str) {
    let filter =
        EnvFilter::try_from_env("HOOKGATE_LOG").unwrap_or_else(|_| EnvFilter::new(default_level));
    let json = match format {
        Some(LogFormat::Json) => true,
        Some(LogFormat::Text) => false,
        None => !std::io::stderr().is_terminal(),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder.json().flatten_event(true).init();
    } else {
        builder.init();
    }
}

#[tokio::main]
async fn run(config: Config, path: PathBuf, clock: Clock) -> anyhow::Result<()> {
    // First: SIGHUP's default action ends the process, and a reload sent
    // while the gateway starts (systemd's ExecReload, a config watcher)
    // must not.
    let mut hangups = signal(SignalKind::hangup()).context("installing a SIGHUP handler")?;
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
    let fixed = &config.fixed;
    let listener = TcpListener::bind(fixed.server.listen)
        .await
        .with_context(|| format!("cannot bind {}", fixed.server.listen))?;
    let admin_listener = match &fixed.admin {
        Some(admin) => Some(
            TcpListener::bind(admin.listen)
                .await
                .with_context(|| format!("cannot bind the admin listener {}", admin.listen))?,
        ),
        None => None,
    };
    let app = hookgate::App::new(&config, clock).await?;
    tracing::info!(
        listen = %listener.local_addr()?,
        admin = fixed.admin.as_ref().map(|admin| tracing::field::display(admin.listen)),
        store = fixed.store.backend.name(),
        routes = config.live.routes.len(),
        version = env!("CARGO_PKG_VERSION"),
        "hookgate is serving"
    );
    let reloader = app.reloader();
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            tracing::info!(config = %path.display(), "SIGHUP received: reloading");
            let reloader = Arc::clone(&reloader);
            let _ = tokio::task::spawn_blocking(move || reloader.reload()).await;
        }
    });
    app.serve(listener, admin_listener, shutdown_signal()).await;
    tracing::info!("stopped");
    Ok(())
}

#[tokio::main]
async fn demo(args: crate::demo::DemoArgs, clock: Clock) -> Result<(), crate::demo::DemoError> {
    crate::demo::run(args, clock, shutdown_signal()).await
}

/// Resolves on the first SIGTERM or SIGINT.
async fn shutdown_signal() {
    let mut term = signal(SignalKind::terminate()).expect("installing a SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("installing a SIGINT handler");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = int.recv() => tracing::info!("SIGINT received"),
    }
}
