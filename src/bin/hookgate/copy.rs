//! `hookgate store copy --from A.toml --to B.toml`: the stores of two
//! configs opened side by side and every live record of the source's
//! scopes copied into the destination (the copy itself is
//! `store/copy.rs`; the cut-over procedures are docs/operations/stores.md,
//! "Moving between stores").
//!
//! The scopes are those of the source config's routes; a scope's replay
//! guards are copied when a route of either config checks them. An
//! embedded source is read from a snapshot taken with `hookgate backup`'s
//! online copy, so its gateway keeps serving (and holding its file) while
//! the copy runs; an embedded destination is written directly, so its
//! gateway must be stopped (its lock says so).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use hookgate::clock::Clock;
use hookgate::config::Config;
use hookgate::metrics::StoreMetrics;
use hookgate::store::{self, BackendSettings, CopiedRecords, CopyScope, Store, StoreError};

/// Copy every live record of `from`'s scopes into `to`'s store.
pub async fn copy_between(
    from: &Config,
    to: &Config,
    clock: &Clock,
) -> Result<CopiedRecords, StoreError> {
    for (config, side) in [(from, "source"), (to, "destination")] {
        if config.fixed.store.backend == BackendSettings::Memory {
            return Err(StoreError::Backend(format!(
                "the {side} store of {} is memory, which lives inside its gateway's process: \
                 there is nothing another process can copy to or from",
                config.source.display()
            )));
        }
    }
    let mut scopes: BTreeMap<&str, bool> = BTreeMap::new();
    for route in from.live.deliveries() {
        *scopes.entry(&route.keying.scope).or_default() |= route.claim.replay_guard;
    }
    for route in to.live.deliveries() {
        if let Some(guard) = scopes.get_mut(route.keying.scope.as_str()) {
            *guard |= route.claim.replay_guard;
        }
    }
    let scopes: Vec<CopyScope> = (scopes.into_iter())
        .map(|(scope, guard)| CopyScope {
            scope: scope.to_owned(),
            guard,
        })
        .collect();
    let mut source = from.fixed.store.clone();
    let snapshot = match &source.backend {
        BackendSettings::Embedded { path, synchronous } => {
            let snapshot = Snapshot::take(path)?;
            source.backend = BackendSettings::Embedded {
                path: snapshot.path.clone(),
                synchronous: *synchronous,
            };
            Some(snapshot)
        }
        _ => None,
    };
    let open = |settings, prefix: &str| {
        Store::open(settings, prefix, StoreMetrics::unregistered(), clock)
            .map(|store| store.with_timeout(store::COPY_TIMEOUT))
    };
    let mut source = open(&source, &from.fixed.key_prefix)?;
    let mut destination = open(&to.fixed.store, &to.fixed.key_prefix)?;
    let names: Vec<String> = scopes.iter().map(|scope| scope.scope.clone()).collect();
    source
        .learn_layout(&names, from.fixed.store.backend.shards())
        .await?;
    destination
        .learn_layout(&names, to.fixed.store.backend.shards())
        .await?;
    let copied = store::copy(&source, &destination, &scopes).await;
    drop(source);
    drop(snapshot);
    copied
}

/// A consistent copy of a running embedded file, removed when dropped.
struct Snapshot {
    path: PathBuf,
}

impl Snapshot {
    fn take(of: &Path) -> Result<Snapshot, StoreError> {
        let mut name = of.as_os_str().to_owned();
        name.push(format!(".copy-{}", std::process::id()));
        let snapshot = Snapshot { path: name.into() };
        snapshot.remove();
        store::backup(of, &snapshot.path)?;
        Ok(snapshot)
    }

    fn remove(&self) {
        for suffix in ["", "-wal", "-shm", ".lock"] {
            let mut name = self.path.as_os_str().to_owned();
            name.push(suffix);
            let _ = std::fs::remove_file(PathBuf::from(name));
        }
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        self.remove();
    }
}
