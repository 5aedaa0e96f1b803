//! `hookgate store reencrypt --config FILE`: the config's store opened and
//! every record of its routes' scopes sealed under the first of its
//! `[store.encryption] keys` (the work itself is `store/reencrypt.rs`; the
//! rotation procedure is docs/operations/deploying.md, "Rotating [store.encryption]
//! keys"). An embedded file is opened beside its running gateway, so no
//! backend needs a stop.

use std::collections::BTreeSet;

use hookgate::config::Config;
use hookgate::metrics::StoreMetrics;
use hookgate::store::{self, BackendSettings, Clock, EmbeddedStore, Resealed, Store, StoreError};

/// Rewrites a second when `--rate` is not given.
pub const DEFAULT_RATE: f64 = 500.0;

/// Seal every record of `config`'s store under its first key, at most
/// `rate` rewrites a second; `progress` hears each pass's counts as they
/// grow. Returns each pass's counts (see [`store::reencrypt`]).
pub async fn reencrypt_store(
    config: &Config,
    rate: f64,
    clock: &Clock,
    progress: impl FnMut(usize, &Resealed),
) -> Result<Vec<Resealed>, StoreError> {
    let Some(keys) = config.live.encryption.clone() else {
        return Err(StoreError::Backend(format!(
            "{} has no [store.encryption] keys: there is nothing to seal under",
            config.source.display()
        )));
    };
    let settings = &config.fixed.store;
    let prefix = &config.fixed.key_prefix;
    let metrics = StoreMetrics::unregistered();
    let mut store = match &settings.backend {
        BackendSettings::Memory => {
            return Err(StoreError::Backend(format!(
                "the store of {} is memory, which lives inside its gateway's process: \
                 its records are gone with it, and a new one seals everything it writes",
                config.source.display()
            )))
        }
        BackendSettings::Embedded { path, synchronous } => {
            let backend = EmbeddedStore::beside(path, *synchronous, clock.clone())?;
            Store::new(backend, prefix, settings.timeout, metrics)
        }
        _ => Store::open(settings, prefix, metrics, clock)?,
    }
    .with_timeout(store::COPY_TIMEOUT);
    store.set_keys(Some(keys));
    let scopes: Vec<String> = (config.live.deliveries())
        .map(|route| route.keying.scope.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    store
        .learn_layout(&scopes, settings.backend.shards())
        .await?;
    let passes = store::reencrypt(&store, &scopes, rate, progress).await?;
    drop(store);
    if let BackendSettings::Embedded { path, .. } = &settings.backend {
        if !store::checkpoint(path)? {
            tracing::warn!(path = %path.display(), "the write-ahead log is in use by a read:                 what the rewrites replaced stays in it until the gateway reuses it");
        }
    }
    Ok(passes)
}
