//! PostgreSQL backend: the seed guide's own `webhook_events` table, for
//! teams that already run Postgres — and a fleet of gateways on one
//! database.
//!
//! Records are rows keyed by `(source, idempotency_key)` — the source is
//! `{key_prefix}{scope}` — with the seed's columns (`status`,
//! `response_status`, `response_body`, `first_seen_at`, `completed_at`,
//! `attempts`) plus hookgate's (fencing `token`, `lease_expires_at`,
//! `body_sha256`, `response_headers`, `response_body_kept`, `expires_at`).
//! A new key is claimed by one `INSERT … ON CONFLICT DO NOTHING`; an existing
//! one answers from a plain read (no row lock, so the duplicates of one
//! event do not queue behind each other) or is taken over by one fenced
//! `UPDATE … WHERE <claimable>`; renew, complete, release and delete are one
//! statement each, fenced on the token. The inserts of concurrent claims,
//! and concurrent completions, are committed in groups (`group.rs`): one
//! transaction and one WAL flush for many. A claim under a replay guard runs in a transaction
//! that first takes an advisory lock on the body, so the guard check and the
//! claim are one step. Every time is the database's `now()`.
//!
//! Connections come from a deadpool-postgres pool (with its per-connection
//! statement cache: measured 2.8× the claims/s of bb8-postgres, which
//! prepares each statement again). The pool connects on first use, and the
//! schema is migrated then, in a task of its own under an advisory lock
//! (`schema.rs`, its SQL `migrations.rs`) — so a gateway starts (answering 503) while the database
//! is down, several start at once safely, no operation's deadline cuts a
//! long migration off, and a new primary at the same address is picked up
//! by new connections without a restart. Expired rows are pruned in bounded
//! batches by a background task (`prune.rs`). `rows.rs` is a claim's
//! statements, `sql.rs` every operation's SQL, `listen.rs` the replay cache's feed,
//! `transfer.rs` `hookgate store copy`.

mod group;
mod listen;
mod listing;
mod migrations;
mod order;
mod prune;
mod rows;
mod schema;
mod sql;
mod transfer;

use self::group::{Completion, Group, NewClaim};
use self::listen::{pg_channel, Listen};
use self::prune::spawn_pruning;
use self::rows::{claim, inserted, live_record, Start};
use self::schema::Schema;
pub use self::schema::{grants, pending as pending_migrations, script as migration_script};

use std::str::FromStr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio::sync::watch;
use tokio_postgres::types::ToSql;

pub use self::migrations::MIGRATIONS;
use super::{
    follow, settled, Backend, ClaimMode, ClaimOutcome, ClaimRequest, Deleted, Due, Failure, Fleet,
    Health, Invalidations, Lease, Leased, Queue, Record, RecordState, Records, StoreError,
    StoreKey, StoreSettings,
};
use crate::order::Rules;
use crate::replay::RecordedResponse;

/// Connections for listings, counts and gauges: never the claim path's.
const LISTING_POOL: usize = 2;

/// The connections a gateway opens beside its `pool_size`: the listing
/// pool and the replay cache's `LISTEN` connection.
pub const CONNECTIONS_BESIDE_POOL: usize = LISTING_POOL + 1;

pub struct PostgresStore {
    /// Deliveries' connections: claims, recordings, the queue.
    pool: Pool,
    /// Claims of keys that may be new, committed in groups (`group.rs`).
    claims: Group<NewClaim, Option<i32>>,
    /// Completions, committed in groups.
    completions: Group<Completion, bool>,
    /// The admin API's and the gauges' ([`LISTING_POOL`]): a slow listing
    /// of a big route waits for one of these, never for a sender's.
    listing: Pool,
    /// The schema's migration, started by the first use ([`schema`]).
    schema: OnceLock<watch::Receiver<Schema>>,
    /// Held while the store lives: its background tasks stop without it.
    alive: Arc<()>,
    /// How to open the connection of its own that `LISTEN`s for the replay
    /// cache's invalidations (a pooled one would be recycled under it).
    listen: Listen,
}

impl PostgresStore {
    /// A lazily connecting store for the database at `url` (`postgres://`;
    /// `sslmode=require` or `verify-full` for TLS, always verified, against
    /// the Mozilla roots plus `tls_ca`).
    pub fn connect(
        url: &str,
        pool_size: usize,
        settings: &StoreSettings,
    ) -> Result<Self, StoreError> {
        let (config, tls) = parse_url(url)?;
        let mut listen = Listen {
            config: config.clone(),
            tls: None,
        };
        // The server ends a statement when the gateway stops waiting for
        // it, so an abandoned one (a listing past store.timeout) does not
        // hold its connection busy for the next caller. Migrations lift
        // it (`schema.rs`). Set on each new connection, not as a startup
        // `options` parameter, which PgBouncer refuses.
        let statement_timeout = Arc::new(format!(
            "SET statement_timeout = {}",
            settings.timeout.as_millis().max(1)
        ));
        if tls {
            let extra = match &settings.tls_ca {
                Some(path) => crate::tls::load_certs(path).map_err(StoreError::Backend)?,
                None => Vec::new(),
            };
            let client = crate::tls::client_config(&extra).map_err(StoreError::Backend)?;
            listen.tls = Some(tokio_postgres_rustls::MakeRustlsConnect::new(
                (*client).clone(),
            ));
        }
        let pool = |size: usize| {
            let manager_config = ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            };
            let manager = match &listen.tls {
                Some(connector) => {
                    Manager::from_config(config.clone(), connector.clone(), manager_config)
                }
                None => Manager::from_config(config.clone(), tokio_postgres::NoTls, manager_config),
            };
            let statement_timeout = Arc::clone(&statement_timeout);
            Pool::builder(manager)
                .post_create(deadpool_postgres::Hook::async_fn(move |client, _| {
                    let set = Arc::clone(&statement_timeout);
                    Box::pin(async move {
                        (client.batch_execute(&set).await)
                            .map_err(deadpool_postgres::HookError::Backend)
                    })
                }))
                .max_size(size)
                .runtime(Runtime::Tokio1)
                .wait_timeout(Some(settings.timeout))
                .create_timeout(Some(settings.timeout))
                .recycle_timeout(Some(settings.timeout))
                .build()
                .map_err(|e| StoreError::Backend(e.to_string()))
        };
        let pool_of_deliveries = pool(pool_size)?;
        let slots = group_slots(pool_size);
        Ok(Self {
            claims: Group::new(pool_of_deliveries.clone(), slots, group::insert_new),
            completions: Group::new(pool_of_deliveries.clone(), slots, group::complete),
            pool: pool_of_deliveries,
            listing: pool(LISTING_POOL)?,
            schema: OnceLock::new(),
            alive: Arc::default(),
            listen,
        })
    }

    /// A pooled connection, the schema migrated: waits while this
    /// process's migration runs (a caller that gives up does not stop it),
    /// fails with why while it fails.
    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.schema_ready().await?;
        self.pool.get().await.map_err(pool_error)
    }

    /// A connection of the listing pool, the schema migrated.
    async fn listing_client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.schema_ready().await?;
        self.listing.get().await.map_err(pool_error)
    }

    async fn schema_ready(&self) -> Result<(), StoreError> {
        let mut schema = self
            .schema
            .get_or_init(|| {
                let (pool, alive) = (self.pool.clone(), Arc::downgrade(&self.alive));
                // Pruning takes a listing connection: never a sender's.
                let pruned = (self.listing.clone(), alive.clone());
                schema::spawn(pool, alive, move || spawn_pruning(pruned.1, pruned.0))
            })
            .clone();
        loop {
            match &*schema.borrow_and_update() {
                Schema::Ready => return Ok(()),
                Schema::Failed(why) => {
                    return Err(StoreError::Backend(format!("schema migration: {why}")))
                }
                Schema::Migrating => {}
            }
            if schema.changed().await.is_err() {
                return Err(StoreError::Backend("schema migration stopped".into()));
            }
        }
    }

    /// Apply the pending migrations now, with no deadline (`hookgate
    /// migrate`); answers how many were applied.
    pub async fn migrate(&self) -> Result<usize, StoreError> {
        let client = self.pool.get().await.map_err(pool_error)?;
        schema::migrate(client).await
    }

    /// The versions the database records (`None`: none, or unreadable).
    pub async fn recorded_migrations(&self) -> Result<Option<Vec<i32>>, StoreError> {
        let client = self.pool.get().await.map_err(pool_error)?;
        Ok(schema::recorded(&client).await)
    }
}

impl Backend for PostgresStore {
    const NAME: &'static str = "postgres";
    const SHARDABLE: bool = false;
}

impl PostgresStore {
    /// A claim on a connection of its own: of a key that is not new, or
    /// under a body guard (`replay_guard`), in one transaction.
    async fn claim_alone(
        &self,
        request: ClaimRequest<'_>,
        token: &str,
    ) -> Result<ClaimOutcome, StoreError> {
        let Some(guard) = request.guard_key else {
            let client = self.client().await?;
            return claim(&client, &request, token, Start::Read).await;
        };
        let mut client = self.client().await?;
        let (source, id, body) = (request.key.source(), request.key.id(), guard.id());
        let transaction = client.transaction().await.map_err(db)?;
        transaction
            .execute(sql::GUARD_LOCK, &[&source, &body])
            .await
            .map_err(db)?;
        // The key's own record answers first; only a claimable key looks at
        // the body's first key.
        if let Some((record, now)) = live_record(&transaction, source, id).await? {
            if let Some(answer) = settled(record, now, request.mode) {
                return Ok(answer);
            }
        }
        let first = transaction
            .query_opt(sql::GUARD_FIRST_KEY, &[&source, &body])
            .await
            .map_err(db)?
            .map(|row| row.get::<_, String>(0));
        if let Some(first) = first.filter(|first| first != id) {
            if let Some((record, now)) = live_record(&transaction, source, &first).await? {
                if let Some(answer) = settled(record, now, ClaimMode::Deliver) {
                    return Ok(answer);
                }
            }
        }
        let outcome = claim(&transaction, &request, token, Start::Insert).await?;
        if let ClaimOutcome::New(_) = outcome {
            let retention = millis(request.retention);
            transaction
                .execute(sql::SET_GUARD, &[&source, &body, &id, &retention])
                .await
                .map_err(db)?;
        }
        transaction.commit().await.map_err(db)?;
        Ok(outcome)
    }
}

impl Records for PostgresStore {
    async fn claim(
        &self,
        request: ClaimRequest<'_>,
        token: &str,
    ) -> Result<ClaimOutcome, StoreError> {
        if request.guard_key.is_none() {
            // One statement with the other claims of its group: the row
            // lock settles concurrent claims; a key that is not new is
            // read and decided on its own.
            self.schema_ready().await?;
            if let Some(attempt) = self.claims.submit(NewClaim::of(&request, token)).await? {
                return Ok(inserted(&request, token, attempt));
            }
        }
        // Boxed: the rest holds a pooled connection's and a transaction's
        // futures, and every backend's claim would carry their size.
        Box::pin(self.claim_alone(request, token)).await
    }

    async fn renew(
        &self,
        key: &StoreKey,
        token: &str,
        processing_ttl: Duration,
    ) -> Result<bool, StoreError> {
        let params: [&(dyn ToSql + Sync); 4] =
            [&key.source(), &key.id(), &token, &millis(processing_ttl)];
        self.applied(sql::RENEW, &params).await
    }

    async fn complete(
        &self,
        key: &StoreKey,
        token: &str,
        response: &RecordedResponse,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        self.schema_ready().await?;
        let completion = Completion::of(key, token, response, retention);
        self.completions.submit(completion).await
    }

    async fn fail(
        &self,
        key: &StoreKey,
        token: &str,
        failure: &Failure<'_>,
    ) -> Result<Option<RecordState>, StoreError> {
        let state = failure.state(false);
        let status = failure.status.map(|s| s as i16);
        let request = failure.request;
        let headers = request.encode_headers();
        let retry = failure.next.queued.map(millis);
        let attempt = failure.attempt.line();
        let params: [&(dyn ToSql + Sync); 15] = [
            &key.source(),
            &key.id(),
            &token,
            &state.as_str(),
            &failure.holds(false),
            &failure.class.as_str(),
            &status,
            &failure.route,
            &request.method.as_str(),
            &request.query,
            &headers,
            &request.body.as_ref(),
            &millis(failure.retention),
            &retry,
            &attempt,
        ];
        let client = self.client().await?;
        let statement = client.prepare_cached(sql::FAIL).await.map_err(db)?;
        let Some(row) = client.query_opt(&statement, &params).await.map_err(db)? else {
            return Ok(None);
        };
        let state: String = row.get(0);
        RecordState::parse(&state)
            .map(Some)
            .ok_or_else(|| StoreError::Corrupt(format!("status {state:?}")))
    }

    async fn release(&self, key: &StoreKey, token: &str) -> Result<bool, StoreError> {
        let params: [&(dyn ToSql + Sync); 3] = [&key.source(), &key.id(), &token];
        self.applied(sql::RELEASE, &params).await
    }

    async fn get(&self, key: &StoreKey) -> Result<Option<Record>, StoreError> {
        let client = self.client().await?;
        Ok(live_record(&client, key.source(), key.id())
            .await?
            .map(|(record, _)| record))
    }

    async fn delete(&self, key: &StoreKey, force: bool) -> Result<Deleted, StoreError> {
        let client = self.client().await?;
        let statement = client.prepare_cached(sql::DELETE).await.map_err(db)?;
        let deleted = client
            .execute(&statement, &[&key.source(), &key.id(), &force])
            .await
            .map_err(db)?;
        if deleted == 1 {
            return Ok(Deleted::Deleted);
        }
        let exists = client
            .query_opt(sql::EXISTS, &[&key.source(), &key.id()])
            .await
            .map_err(db)?;
        Ok(if exists.is_some() {
            Deleted::InFlight
        } else {
            Deleted::NotFound
        })
    }
}

impl Queue for PostgresStore {
    async fn lease_due(
        &self,
        source: &str,
        tokens: &[String],
        processing_ttl: Duration,
    ) -> Result<Vec<Due>, StoreError> {
        let mut client = self.client().await?;
        let transaction = client.transaction().await.map_err(db)?;
        let limit = tokens.len() as i64;
        let due = transaction
            .query(sql::DUE, &[&source, &limit])
            .await
            .map_err(db)?;
        let lease = millis(processing_ttl);
        let mut leased = Vec::new();
        for (row, token) in due.iter().zip(tokens) {
            let id: String = row.get(0);
            let leasing: [&(dyn ToSql + Sync); 4] = [&source, &id, token, &lease];
            let attempt: i32 = transaction
                .query_one(sql::LEASE_DUE, &leasing)
                .await
                .map_err(db)?
                .get(0);
            let (record, _) = live_record(&transaction, source, &id)
                .await?
                .ok_or_else(|| StoreError::Corrupt("a leased event vanished".into()))?;
            leased.push(Due {
                id,
                lease: Lease {
                    token: token.clone(),
                    attempt: attempt as u32,
                },
                record,
            });
        }
        transaction.commit().await.map_err(db)?;
        Ok(leased)
    }

    const ORDERED: bool = true;

    async fn lease_ordered(
        &self,
        source: &str,
        tokens: &[String],
        processing_ttl: Duration,
        rules: Rules,
    ) -> Result<Leased, StoreError> {
        self.lease_in_order(source, tokens, processing_ttl, rules)
            .await
    }
}

impl Fleet for PostgresStore {
    /// `LISTEN` on a connection of its own; `NOTIFY` reaches every
    /// gateway's listener.
    fn invalidations(&self) -> Invalidations {
        let listen = self.listen.clone();
        Invalidations::Feed(Box::new(move |channel, cache| {
            let channel = pg_channel(&channel);
            follow(&cache, move || listen.clone().subscribe(channel.clone()));
        }))
    }

    async fn publish(&self, channel: &str, key: &str) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute("SELECT pg_notify($1, $2)", &[&pg_channel(channel), &key])
            .await
            .map(drop)
            .map_err(db)
    }

    async fn set_control(
        &self,
        space: &str,
        route: &str,
        value: Option<&str>,
    ) -> Result<(), StoreError> {
        let client = self.client().await?;
        match value {
            Some(value) => {
                client
                    .execute(sql::SET_CONTROL, &[&space, &route, &value])
                    .await
            }
            None => client.execute(sql::CLEAR_CONTROL, &[&space, &route]).await,
        }
        .map(drop)
        .map_err(db)
    }

    async fn controls(&self, space: &str) -> Result<Vec<(String, String)>, StoreError> {
        let client = self.client().await?;
        let statement = client.prepare_cached(sql::CONTROLS).await.map_err(db)?;
        let rows = client.query(&statement, &[&space]).await.map_err(db)?;
        Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
    }
}

impl Health for PostgresStore {
    async fn ping(&self, _space: &str) -> Result<(), StoreError> {
        if let Some(Schema::Migrating) = self.schema.get().map(|s| s.borrow().clone()) {
            return Err(StoreError::Backend(
                "migrating the schema (hookgate_migrations); deliveries wait for it".into(),
            ));
        }
        let client = self.client().await?;
        client.query_one(sql::NOW, &[]).await.map(drop).map_err(db)
    }
}

impl PostgresStore {
    /// Run a fenced update: `true` when it changed the row.
    async fn applied(
        &self,
        statement: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let statement = client.prepare_cached(statement).await.map_err(db)?;
        let changed = client.execute(&statement, params).await.map_err(db)?;
        Ok(changed == 1)
    }
}

/// `url` as a driver config, and whether it asks for TLS (only with an
/// explicit `sslmode`). libpq's
/// `sslmode=verify-full` and `verify-ca` are accepted and mean `require`:
/// the rustls connection verifies the server's certificate and name anyway.
fn parse_url(url: &str) -> Result<(tokio_postgres::Config, bool), StoreError> {
    let normalized = url
        .replace("sslmode=verify-full", "sslmode=require")
        .replace("sslmode=verify-ca", "sslmode=require");
    let mut config = tokio_postgres::Config::from_str(&normalized)
        .map_err(|e| StoreError::Backend(format!("not a valid PostgreSQL URL: {e}")))?;
    if !url.contains("sslmode=") {
        // TLS when the URL asks for it: libpq's "prefer" would try TLS
        // against a server's self-signed default certificate and fail.
        config.ssl_mode(tokio_postgres::config::SslMode::Disable);
    }
    let tls = config.get_ssl_mode() != tokio_postgres::config::SslMode::Disable;
    Ok((config, tls))
}

/// Whether `url` is a PostgreSQL URL the driver accepts (`check`).
pub fn check_url(url: &str) -> Result<(), String> {
    parse_url(url).map(drop).map_err(|error| error.to_string())
}

/// How many groups of one kind run at once: an eighth of the pool (2 of
/// the default 16). Fewer and larger groups measured best on a 2-core
/// database (BENCHMARKS.md); a bigger pool for a bigger server runs more.
/// ([`Group`] runs at least one.)
fn group_slots(pool_size: usize) -> usize {
    pool_size / 8
}

pub(super) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

pub(super) fn db(error: tokio_postgres::Error) -> StoreError {
    StoreError::Backend(describe(&error))
}

/// The server's own message when there is one ("db error" says nothing).
fn describe(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("{}: {} ({})", db.severity(), db.message(), db.code().code()),
        None => error.to_string(),
    }
}

fn pool_error(error: deadpool_postgres::PoolError) -> StoreError {
    match error {
        deadpool_postgres::PoolError::Timeout(_) => StoreError::Timeout,
        deadpool_postgres::PoolError::Backend(error) => StoreError::Backend(format!(
            "cannot connect to PostgreSQL: {}",
            describe(&error)
        )),
        other => StoreError::Backend(other.to_string()),
    }
}
