//! The store and config commands: `check`, `backup`, `store copy`,
//! `store reencrypt` and `migrate`, each to its exit code (docs/guide/configuration.md,
//! "Configuration": 2 for a bad config or usage).

use std::process::ExitCode;

use hookgate::clock::Clock;
use hookgate::config::Config;

use crate::{load, BackupArgs, CheckArgs, CopyArgs, MigrateArgs, ReencryptArgs, EXIT_CONFIG};

/// `hookgate check`: the config's summary, or its problems (exit 2);
/// `--print-migrations`: the PostgreSQL schema.
pub(crate) fn check(args: CheckArgs) -> ExitCode {
    match Config::load(&args.config.config) {
        Ok(_) if args.print_migrations => {
            print!(
                "{}",
                hookgate::store::migration_script(hookgate::store::MIGRATIONS)
            );
            ExitCode::SUCCESS
        }
        Ok(config) => {
            print!("{}", config.summary());
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("{error}");
            ExitCode::from(EXIT_CONFIG)
        }
    }
}

/// `hookgate backup`: an online copy of the embedded store, verified.
pub(crate) fn backup(args: BackupArgs) -> ExitCode {
    let path = match args.store {
        Some(path) => path,
        None => {
            let config = match load(&args.config.config) {
                Ok(config) => config,
                Err(code) => return code,
            };
            let backend = config.fixed.store.backend;
            let hookgate::config::Backend::Embedded { path, .. } = backend else {
                eprintln!(
                    "hookgate backup: the store is {}; back it up with its own tools (docs/operations/stores.md, \"Backups\")",
                    backend.name()
                );
                return ExitCode::FAILURE;
            };
            path
        }
    };
    let path = &path;
    match hookgate::store::backup(path, &args.to) {
        Ok(copied) => {
            println!(
                "backed up {} records ({} bytes) from {} to {}, verified",
                copied.records,
                copied.bytes,
                path.display(),
                args.to.display()
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("hookgate {error}");
            ExitCode::FAILURE
        }
    }
}

/// `hookgate store copy`: every record of one store into another.
pub(crate) fn copy(args: CopyArgs, clock: &Clock) -> ExitCode {
    let (from, to) = match (load(&args.from), load(&args.to)) {
        (Ok(from), Ok(to)) => (from, to),
        (Err(code), _) | (_, Err(code)) => return code,
    };
    let runtime = tokio::runtime::Runtime::new().expect("a Tokio runtime");
    println!(
        "copying {} ({}) to {} ({})",
        from.fixed.store.backend.name(),
        args.from.display(),
        to.fixed.store.backend.name(),
        args.to.display()
    );
    match runtime.block_on(crate::copy::copy_between(&from, &to, clock)) {
        Ok(copied) => {
            print!("{copied}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!(
                "hookgate store copy: {error} (nothing copied is lost: run it again to go on)"
            );
            ExitCode::FAILURE
        }
    }
}

/// `hookgate store reencrypt`: every record sealed under the first key.
pub(crate) fn reencrypt(args: ReencryptArgs, clock: &Clock) -> ExitCode {
    let config = match load(&args.config.config) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let rate = args.rate.unwrap_or(crate::reencrypt::DEFAULT_RATE);
    let runtime = tokio::runtime::Runtime::new().expect("a Tokio runtime");
    println!(
        "sealing the records of {} ({}) under key {}, at most {rate}/s",
        config.fixed.store.backend.name(),
        args.config.config.display(),
        (config.live.encryption.as_ref())
            .and_then(|keys| keys.ids().into_iter().next())
            .unwrap_or_default(),
    );
    // Progress on stderr as pages are read, once per change; each
    // pass's result once on stdout at the end.
    let mut shown = (0, 0);
    let progress = move |pass, counts: &hookgate::store::Resealed| {
        if shown != (pass, counts.read) {
            shown = (pass, counts.read);
            eprintln!("pass {pass}, so far: {counts}");
        }
    };
    let run = crate::reencrypt::reencrypt_store(&config, rate, clock, progress);
    match runtime.block_on(run) {
        Ok(passes) => {
            for (n, counts) in passes.iter().enumerate() {
                println!("pass {}: {counts}", n + 1);
            }
            if passes.last().is_some_and(|last| last.done()) {
                println!("done: every record is sealed under the first key");
                ExitCode::SUCCESS
            } else {
                println!("not done: run it again for the busy records; restore the key of the unreadable ones (the log names each)");
                ExitCode::FAILURE
            }
        }
        Err(error) => {
            eprintln!("hookgate store reencrypt: {error} (what was rewritten stays: run it again to go on)");
            ExitCode::FAILURE
        }
    }
}

/// `hookgate migrate --grants ROLE`: the least privileges, as SQL.
pub(crate) fn grants(args: MigrateArgs) -> ExitCode {
    let role = args.grants.unwrap_or_default();
    let plain = |c: char| c.is_ascii_alphanumeric() || c == '_';
    if role.is_empty() || !role.chars().all(plain) {
        eprintln!("hookgate migrate --grants: {role:?} is not a plain role name ([A-Za-z0-9_]+)");
        return ExitCode::from(EXIT_CONFIG);
    }
    print!("{}", hookgate::store::postgres_grants(&role));
    ExitCode::SUCCESS
}

/// `hookgate migrate`: the PostgreSQL schema brought up to date.
pub(crate) fn migrate(args: MigrateArgs) -> ExitCode {
    let config = match load(&args.config.config) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let runtime = tokio::runtime::Runtime::new().expect("a Tokio runtime");
    match runtime.block_on(hookgate::store::migrate(&config.fixed.store, args.print)) {
        Ok(said) => {
            print!("{said}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("hookgate migrate: {error}");
            ExitCode::FAILURE
        }
    }
}
