//! `hookgate migrate`: bring a store's schema to this version, with no
//! operation deadline, or print the SQL for a DBA to run.
//!
//! PostgreSQL applies its pending versions (`postgres/schema.rs`: under the
//! gateways' advisory lock, so it is safe beside running gateways and other
//! `migrate`s); the embedded file gets its missing columns, and a file from
//! before incremental vacuum is rewritten once with it on (which needs the
//! file's lock: stop the gateway first); memory and Redis have no schema.

use std::time::Duration;

use super::{
    migration_script, pending_migrations, upgrade_embedded, BackendSettings, PostgresStore,
    StoreError, StoreSettings,
};

/// Migrate (or, with `print`, print the SQL for) the store of `settings`;
/// answers what to tell the operator.
pub async fn migrate(settings: &StoreSettings, print: bool) -> Result<String, StoreError> {
    match &settings.backend {
        BackendSettings::Postgres { url, .. } => {
            // No store.timeout: a migration of a big table takes what it
            // takes. Connecting is still bounded.
            let settings = StoreSettings {
                timeout: settings.timeout.max(Duration::from_secs(30)),
                ..settings.clone()
            };
            let store = PostgresStore::connect(url, 1, &settings)?;
            if print {
                let recorded = store.recorded_migrations().await?;
                return Ok(migration_script(&pending_migrations(recorded.as_deref())));
            }
            let applied = store.migrate().await?;
            let latest = super::MIGRATIONS.last().map_or(0, |(version, _)| *version);
            Ok(match applied {
                0 => format!("postgres: nothing to migrate, the schema is at version {latest}\n"),
                n => format!(
                    "postgres: applied {n} migration(s), the schema is at version {latest}\n"
                ),
            })
        }
        BackendSettings::Embedded { path, synchronous } if !print => {
            let done = upgrade_embedded(path, *synchronous)?;
            Ok(format!(
                "embedded: {} is current ({} bytes{})\n",
                path.display(),
                done.bytes_after,
                if done.vacuumed {
                    format!(
                        "; incremental vacuum turned on, {} bytes before",
                        done.bytes_before
                    )
                } else {
                    String::new()
                }
            ))
        }
        backend => Ok(format!(
            "{}: {}\n",
            backend.name(),
            if print {
                "no SQL schema to print"
            } else {
                "no schema to migrate"
            }
        )),
    }
}
