//! Group commit: the claims of new keys and the completions that
//! concurrent deliveries ask for meanwhile become one statement over arrays
//! each — one transaction, one WAL flush and one round trip for up to
//! [`MAX_GROUP`] of them, instead of one each.
//!
//! A group forms only while earlier ones are in flight: an item waits for
//! one of a few slots ([`Group::spawn`]), and whatever arrived meanwhile
//! goes with it. An idle gateway's claim is a group of one, sent at once.
//! Each item is answered when its group's statement has committed; a
//! caller that stopped waiting (its `store.timeout`) leaves its item to be
//! written all the same, exactly as a statement of its own that the server
//! had already begun.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use deadpool_postgres::{Object, Pool};
use futures_util::future::{try_join, try_join_all};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio_postgres::types::ToSql;

use super::super::{ClaimRequest, StoreError};
use super::{db, millis, pool_error, sql};
use crate::replay::RecordedResponse;

/// The most items one statement carries.
pub(super) const MAX_GROUP: usize = 64;

type Reply<A> = oneshot::Sender<Result<A, StoreError>>;
type Running<A> = Pin<Box<dyn Future<Output = Result<Vec<A>, StoreError>> + Send>>;

/// Runs one group on a connection: one answer per item, in order.
pub(super) type Run<I, A> = fn(Object, Vec<I>) -> Running<A>;

/// A queue of items of one kind and the task that runs them in groups,
/// started by the first item.
pub(super) struct Group<I, A> {
    pool: Pool,
    slots: usize,
    run: Run<I, A>,
    jobs: OnceLock<mpsc::UnboundedSender<(I, Reply<A>)>>,
}

impl<I: Send + 'static, A: Send + 'static> Group<I, A> {
    /// Groups run by `run` on `pool`'s connections, at most `slots` at
    /// once. The task ends with the group (its queue's sender).
    pub(super) fn new(pool: Pool, slots: usize, run: Run<I, A>) -> Self {
        Self {
            pool,
            slots: slots.max(1),
            run,
            jobs: OnceLock::new(),
        }
    }

    /// `item`'s answer, once the group it went with has committed.
    pub(super) async fn submit(&self, item: I) -> Result<A, StoreError> {
        let (reply, answer) = oneshot::channel();
        let jobs = self.jobs.get_or_init(|| self.start());
        if jobs.send((item, reply)).is_err() {
            return Err(StoreError::Backend("the store is shutting down".into()));
        }
        answer
            .await
            .unwrap_or_else(|_| Err(StoreError::Backend("a grouped write was dropped".into())))
    }

    fn start(&self) -> mpsc::UnboundedSender<(I, Reply<A>)> {
        let (jobs, mut queue) = mpsc::unbounded_channel::<(I, Reply<A>)>();
        let (pool, run) = (self.pool.clone(), self.run);
        let slots = Arc::new(Semaphore::new(self.slots));
        tokio::spawn(async move {
            while let Some(first) = queue.recv().await {
                let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
                    return;
                };
                // Whatever arrived while the slot was awaited goes along.
                let mut group = vec![first];
                while group.len() < MAX_GROUP {
                    match queue.try_recv() {
                        Ok(job) => group.push(job),
                        Err(_) => break,
                    }
                }
                let pool = pool.clone();
                tokio::spawn(async move {
                    let _slot = slot;
                    let (items, replies): (Vec<I>, Vec<Reply<A>>) = group.into_iter().unzip();
                    let answers = match pool.get().await {
                        Ok(client) => run(client, items).await,
                        Err(error) => Err(pool_error(error)),
                    };
                    match answers {
                        Ok(answers) => {
                            for (reply, answer) in replies.into_iter().zip(answers) {
                                let _ = reply.send(Ok(answer));
                            }
                        }
                        Err(error) => {
                            for reply in replies {
                                let _ = reply.send(Err(error.clone()));
                            }
                        }
                    }
                });
            }
        });
        jobs
    }
}

/// A claim of a key that may be new: `CLAIM_NEW`'s parameters, owned.
pub(super) struct NewClaim {
    pub source: String,
    pub id: String,
    pub token: String,
    pub body_sha256: String,
    pub lease_ms: i64,
    pub retention_ms: i64,
    pub route: Option<String>,
    pub replay_of: Option<String>,
    pub method: Option<String>,
    pub query: Option<String>,
    pub headers: Option<Vec<u8>>,
    pub body: Option<Bytes>,
    pub mode: i32,
    /// An ordered acceptance's entity, value and hold (ms).
    pub entity: Option<String>,
    pub value: Option<f64>,
    pub hold_ms: Option<i64>,
}

impl NewClaim {
    pub(super) fn of(request: &ClaimRequest<'_>, token: &str) -> Self {
        let stored = request.stored;
        Self {
            source: request.key.source().to_owned(),
            id: request.key.id().to_owned(),
            token: token.to_owned(),
            body_sha256: request.body_sha256.to_owned(),
            lease_ms: millis(request.processing_ttl),
            retention_ms: millis(request.retention),
            route: stored.map(|s| s.route.to_owned()),
            replay_of: stored.and_then(|s| s.replay_of.map(str::to_owned)),
            method: stored.map(|s| s.request.method.as_str().to_owned()),
            query: stored.and_then(|s| s.request.query.clone()),
            headers: stored.map(|s| s.request.encode_headers()),
            body: stored.map(|s| s.request.body.clone()),
            mode: i32::from(request.mode.code()),
            entity: request.order.map(|spot| spot.entity.to_owned()),
            value: request.order.and_then(|spot| spot.value),
            hold_ms: request.order.map(|spot| millis(spot.hold)),
        }
    }
}

/// Insert each key of `claims` that is new: its attempts, or `None` where
/// the key was there already (or was claimed by an earlier item of the
/// same group), for the caller to read and decide as a claim of its own.
pub(super) fn insert_new(client: Object, claims: Vec<NewClaim>) -> Running<Option<i32>> {
    Box::pin(async move {
        // A key twice in one group: the first item inserts it, the others
        // find it as any later claim would.
        let mut seen = HashSet::with_capacity(claims.len());
        let first: Vec<bool> = claims
            .iter()
            .map(|c| seen.insert((c.source.as_str(), c.id.as_str())))
            .collect();
        let mut offered: Vec<&NewClaim> = claims
            .iter()
            .zip(&first)
            .filter_map(|(c, first)| first.then_some(c))
            .collect();
        // Inserted in one order whatever order they came in: two groups in
        // flight that share keys (duplicates split between them) then wait
        // for each other's inserts one way only, never in a cycle
        // (a deadlock PostgreSQL would break after `deadlock_timeout` by
        // failing a group).
        offered.sort_unstable_by(|a, b| (&a.source, &a.id).cmp(&(&b.source, &b.id)));
        let text =
            |f: fn(&NewClaim) -> &str| -> Vec<&str> { offered.iter().map(|c| f(c)).collect() };
        let optional = |f: fn(&NewClaim) -> Option<&str>| -> Vec<Option<&str>> {
            offered.iter().map(|c| f(c)).collect()
        };
        let sources = text(|c| &c.source);
        let ids = text(|c| &c.id);
        let tokens = text(|c| &c.token);
        let hashes = text(|c| &c.body_sha256);
        let routes = optional(|c| c.route.as_deref());
        let replays = optional(|c| c.replay_of.as_deref());
        let methods = optional(|c| c.method.as_deref());
        let queries = optional(|c| c.query.as_deref());
        let leases: Vec<i64> = offered.iter().map(|c| c.lease_ms).collect();
        let retentions: Vec<i64> = offered.iter().map(|c| c.retention_ms).collect();
        let headers: Vec<Option<&[u8]>> = offered.iter().map(|c| c.headers.as_deref()).collect();
        let bodies: Vec<Option<&[u8]>> = offered.iter().map(|c| c.body.as_deref()).collect();
        let modes: Vec<i32> = offered.iter().map(|c| c.mode).collect();
        let entities = optional(|c| c.entity.as_deref());
        let values: Vec<Option<f64>> = offered.iter().map(|c| c.value).collect();
        let holds: Vec<Option<i64>> = offered.iter().map(|c| c.hold_ms).collect();
        let params: [&(dyn ToSql + Sync); 16] = [
            &sources,
            &ids,
            &tokens,
            &hashes,
            &leases,
            &retentions,
            &routes,
            &replays,
            &methods,
            &queries,
            &headers,
            &bodies,
            &modes,
            &entities,
            &values,
            &holds,
        ];
        let statement = client
            .prepare_cached(sql::CLAIM_NEW_GROUP)
            .await
            .map_err(db)?;
        let rows = client.query(&statement, &params).await.map_err(db)?;
        let inserted: HashMap<(&str, &str), i32> = rows
            .iter()
            .map(|row| ((row.get(0), row.get(1)), row.get(2)))
            .collect();
        Ok(claims
            .iter()
            .zip(first)
            .map(|(c, first)| {
                first
                    .then(|| inserted.get(&(c.source.as_str(), c.id.as_str())).copied())
                    .flatten()
            })
            .collect())
    })
}

/// A fenced completion: `COMPLETE`'s parameters, owned.
pub(super) struct Completion {
    pub source: String,
    pub id: String,
    pub token: String,
    pub status: i16,
    pub headers: Vec<u8>,
    pub body: Bytes,
    pub body_kept: &'static str,
    pub retention_ms: i64,
}

impl Completion {
    pub(super) fn of(
        key: &super::super::StoreKey,
        token: &str,
        response: &RecordedResponse,
        retention: std::time::Duration,
    ) -> Self {
        Self {
            source: key.source().to_owned(),
            id: key.id().to_owned(),
            token: token.to_owned(),
            status: response.status.as_u16() as i16,
            headers: response.encode_headers(),
            body: response.body.clone(),
            body_kept: response.body_kept.as_str(),
            retention_ms: millis(retention),
        }
    }

    /// `COMPLETE`'s parameters, the body given as a slice of `self.body`.
    fn params<'a>(&'a self, body: &'a &'a [u8]) -> [&'a (dyn ToSql + Sync); 8] {
        [
            &self.source,
            &self.id,
            &self.token,
            &self.status,
            &self.headers,
            body,
            &self.body_kept,
            &self.retention_ms,
        ]
    }
}

/// Complete each record of `completions` its token still holds: whether it
/// did, per item, in one transaction that the group's items share, and so
/// one commit. The unordered rows complete in one statement over arrays,
/// its rows found by the primary key ([`sql::LOOKUPS_BY_KEY`]); a row it
/// did not complete (an ordered one, or one fenced off) is tried alone
/// with the statement that also wakes its entity. A group of one is a
/// single plain update, in no transaction of its own.
pub(super) fn complete(mut client: Object, completions: Vec<Completion>) -> Running<bool> {
    Box::pin(async move {
        let waking = client.prepare_cached(sql::COMPLETE).await.map_err(db)?;
        if let [c] = completions.as_slice() {
            // A group of one (most groups below about a thousand events a
            // second, when a slot is free as an event arrives) needs no
            // transaction: each statement commits as it runs, one round
            // trip where `BEGIN` and `COMMIT` made three, and the statement
            // that wakes an ordered row's entity runs only if the
            // unordered one changed nothing (the row is ordered, or no
            // longer this token's, which the second finds again).
            let unordered = (client.prepare_cached(sql::COMPLETE_UNORDERED).await).map_err(db)?;
            let body = c.body.as_ref();
            let params = c.params(&body);
            let completed = client.execute(&unordered, &params).await.map_err(db)? == 1;
            let completed = completed || client.execute(&waking, &params).await.map_err(db)? == 1;
            return Ok(vec![completed]);
        }
        let unordered = (client.prepare_cached(sql::COMPLETE_UNORDERED_GROUP).await).map_err(db)?;
        let transaction = client.transaction().await.map_err(db)?;
        let rows = complete_unordered(&transaction, &unordered, &completions).await?;
        let completed: HashSet<(&str, &str, &str)> = rows
            .iter()
            .map(|row| (row.get(0), row.get(1), row.get(2)))
            .collect();
        let done = completions
            .iter()
            .map(|c| completed.contains(&(c.source.as_str(), c.id.as_str(), c.token.as_str())));
        let (transaction_ref, waking) = (&transaction, &waking);
        let changed = try_join_all(completions.iter().zip(done).map(|(c, done)| async move {
            if done {
                return Ok(true);
            }
            let body = c.body.as_ref();
            let changed = transaction_ref.execute(waking, &c.params(&body)).await?;
            Ok::<_, tokio_postgres::Error>(changed == 1)
        }))
        .await
        .map_err(db)?;
        transaction.commit().await.map_err(db)?;
        Ok(changed)
    })
}

/// `COMPLETE_UNORDERED_GROUP` of `completions`, sent with its settings.
async fn complete_unordered(
    transaction: &tokio_postgres::Transaction<'_>,
    statement: &tokio_postgres::Statement,
    completions: &[Completion],
) -> Result<Vec<tokio_postgres::Row>, StoreError> {
    let column = |f: fn(&Completion) -> &str| -> Vec<&str> { completions.iter().map(f).collect() };
    let (sources, ids, tokens) = (
        column(|c| &c.source),
        column(|c| &c.id),
        column(|c| &c.token),
    );
    let kept = column(|c| c.body_kept);
    let statuses: Vec<i16> = completions.iter().map(|c| c.status).collect();
    let headers: Vec<&[u8]> = completions.iter().map(|c| c.headers.as_slice()).collect();
    let bodies: Vec<&[u8]> = completions.iter().map(|c| c.body.as_ref()).collect();
    let retentions: Vec<i64> = completions.iter().map(|c| c.retention_ms).collect();
    let params: [&(dyn ToSql + Sync); 8] = [
        &sources,
        &ids,
        &tokens,
        &statuses,
        &headers,
        &bodies,
        &kept,
        &retentions,
    ];
    // Sent together: the settings, then the statement they plan.
    let (_, rows) = try_join(
        transaction.batch_execute(sql::LOOKUPS_BY_KEY),
        transaction.query(statement, &params),
    )
    .await
    .map_err(db)?;
    Ok(rows)
}
