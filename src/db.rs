//! Database pool, embedded migrations, and the [`Scoped`] transaction every request runs in.
//!
//! # Tenancy
//! Every table has `ENABLE` + `FORCE ROW LEVEL SECURITY` with a policy comparing its `tenant_id`
//! and `user_id` to the settings `mnemo.tenant` and `mnemo.user` (see `migrations/0001`). A
//! [`Scoped`] transaction switches to the `mnemo_app` role (which has no `BYPASSRLS`) and sets both
//! values transaction-locally, so row-level security applies even when the pool logs in as a
//! superuser, and a query that forgets its `WHERE user_id` still sees only the caller's rows.
//!
//! # Types
//! A request's statements run on a [`Scoped`], which only [`Db`] makes and which does not hand
//! out its connection; the pool inside [`Db`] is private, and `clippy.toml` forbids opening pools,
//! connections or transactions anywhere but here. So store functions, which take `&mut Scoped`,
//! cannot run outside a tenant scope. This compiles:
//!
//! ```no_run
//! # async fn f(db: &mnemo::db::Db, caller: &mnemo::auth::Principal, id: uuid::Uuid) {
//! let mut tx = db.scoped(caller).await.unwrap();
//! let task = mnemo::tasks::store::get_task(&mut tx, id).await.unwrap();
//! # }
//! ```
//!
//! and the same call on a pool's connection does not (`expected &mut Scoped`):
//!
//! ```compile_fail,E0308
//! # async fn f(pool: &sqlx::PgPool, id: uuid::Uuid) {
//! let mut conn = pool.acquire().await.unwrap();
//! let task = mnemo::tasks::store::get_task(&mut conn, id).await.unwrap();
//! # }
//! ```
//!
//! nor does reaching for the pool of a [`Db`] (a private field), or for the connection inside
//! a [`Scoped`] (no `Deref`):
//!
//! ```compile_fail,E0616
//! # async fn f(db: &mnemo::db::Db) {
//! let mut conn = db.pool.acquire().await.unwrap();
//! # }
//! ```
//!
//! ```compile_fail,E0614
//! # async fn f(db: &mnemo::db::Db, caller: &mnemo::auth::Principal) {
//! let mut tx = db.scoped(caller).await.unwrap();
//! let conn: &mut sqlx::PgConnection = &mut *tx;
//! # }
//! ```
//!
//! # Cost
//! `BEGIN`, then one prepared statement with the three `set_config` calls (the ids are bind
//! parameters), then the request's statements, then `COMMIT`. Sending `BEGIN` and the settings as
//! one simple-query batch would save a round trip, but PostgreSQL then parses and plans the batch
//! on every request; on a CPU-bound server the prepared form measured 42% more throughput (README,
//! Benchmarks). Read-only requests end without waiting for the rollback. The pool does not ping on
//! acquire (it pings on release, off the request's path).
//!
//! The hottest reads (a page of a memory, a page of a session's messages, an agent's notes) skip
//! even that: each is
//! one call of a read function that acts as the caller inside its own statement
//! (`migrations/0023_one_call_reads.sql`), sent outside any transaction block by
//! [`Db::read_call`], which refuses any other statement. One round trip instead of three, and the
//! connection is kept for the next such read instead of being checked on its way back to the
//! pool (see [`Parked`]).

// The one module that may open pools, connections and transactions (see `clippy.toml`).
#![allow(clippy::disallowed_methods)]

use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{
    PgArguments, PgConnectOptions, PgPoolOptions, PgQueryResult, PgRow, PgStatement, PgTypeInfo,
};
use sqlx::{Describe, Either, Execute, Executor, PgPool, Postgres, Transaction};

use crate::auth::Principal;
use crate::search::sizes::{self, HistoryStats, SampleEdge, TermCounts};

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Migrations whose comments were reworded after a release had applied them, each with the
/// SHA-384 of the text that release applied. The migrator refuses a database whose recorded
/// checksum differs from the text it carries; a recorded checksum found here is the earlier text
/// of the same statements, so [`Db::migrate`] records the current one instead. Any other
/// difference is still refused.
pub const REWORDED: &[(i64, &str)] = &[
    (
        2,
        "1f51e2ed8b2f5e10af1c30d03e727c229607d5a75a0616ad31aac68a153835444145bffbb2550208fc1a61d1dc5f14ed",
    ),
    (
        3,
        "d9155b0674cf662411e3dd95b0966a7780361e29cffd65d7801edf236bf7d88dcf2bd6a4b94c026e47859a0447017877",
    ),
    (
        4,
        "ae61c193e58d35a91346544278a61377b60fc5b517bdfef7622a4740f037bd7470cb3f78d4d01b7d20c02aa97aee5913",
    ),
    (
        5,
        "01722dc8116dd4337d21a1c4508a0e6af612c10e6fea02393becc96d960c46872e68c892dbcd9e75f300cf496e56f15b",
    ),
    (
        6,
        "902920bf4758b66feff30d856a0408342d18fa6ba2a960f3afa108eb8a9d6c3761d272774e778e9a5c6ca0b8ba18307e",
    ),
];

/// Records the current checksum of each [`REWORDED`] migration that a database holds with its
/// earlier one. Nothing happens on a database not migrated yet.
async fn accept_reworded(pool: &PgPool) -> Result<(), sqlx::migrate::MigrateError> {
    // Runtime-checked: the migrator's own bookkeeping table is not part of the schema.
    let exists: bool = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
        .fetch_one(pool)
        .await?;
    if !exists {
        return Ok(());
    }
    let mut versions = Vec::new();
    let mut current = Vec::new();
    let mut earlier = Vec::new();
    for &(version, checksum) in REWORDED {
        if let Some(migration) = MIGRATOR.iter().find(|m| m.version == version) {
            versions.push(version);
            current.push(migration.checksum.to_vec());
            earlier.push(checksum);
        }
    }
    sqlx::query(
        "UPDATE _sqlx_migrations m SET checksum = r.current
         FROM unnest($1::bigint[], $2::bytea[], $3::text[]) AS r (version, current, earlier)
         WHERE m.version = r.version AND m.checksum = decode(r.earlier, 'hex')",
    )
    .bind(versions)
    .bind(current)
    .bind(earlier)
    .execute(pool)
    .await?;
    Ok(())
}

/// Connects a pool with the settings the tenancy model relies on. With `statement_timeout`,
/// PostgreSQL cancels any statement of the pool's connections that runs longer, so a runaway
/// query cannot hold a connection (and its share of the pool) for good; schema changes and
/// backfills run on a pool without it.
pub async fn connect(
    url: &str,
    max_connections: u32,
    statement_timeout: Option<Duration>,
) -> Result<Db, sqlx::Error> {
    let mut options = connect_options(url)?;
    if let Some(timeout) = statement_timeout.filter(|t| !t.is_zero()) {
        options = options.options([("statement_timeout", format!("{}ms", timeout.as_millis()))]);
    }
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(5))
        // sqlx already pings each connection when it returns to the pool (which also flushes a
        // queued rollback); pinging again on acquire would add a round trip to every request.
        .test_before_acquire(false)
        .connect_with(options)
        .await
        .map(Db::new)
}

/// Parses `url`; connections name themselves `mnemo` in `pg_stat_activity`.
pub fn connect_options(url: &str) -> Result<PgConnectOptions, sqlx::Error> {
    Ok(PgConnectOptions::from_str(url)?.application_name("mnemo"))
}

/// The database the service runs on. The pool is private: a request reaches PostgreSQL only
/// through [`Db::scoped`] (one user's rows), and a background job only through [`Db::system`]
/// (its own role and lock), so no code outside this module can run a statement that row-level
/// security does not confine. Cloning is cheap (the pool is shared).
#[derive(Clone, Debug)]
pub struct Db {
    pool: PgPool,
    /// Whether writes queue their text for the embedder (see [`Scoped::queues_embeddings`]).
    embeds: bool,
    /// What searches of long histories counted (see [`Scoped::history_size`]).
    stats: Arc<HistoryStats>,
    /// Connections a one-call read or write ended cleanly on, kept for the next one (see
    /// [`Parked`]).
    parked: Arc<Parked>,
}

impl Db {
    /// Wraps a connected pool (see [`connect`]).
    pub fn new(pool: PgPool) -> Self {
        let parked = Arc::new(Parked::new(&pool));
        // When the pool closes, the parked connections go back to it, which a close waits for;
        // until then, the ones left unused go back every so often.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let closed = pool.close_event();
            let weak = Arc::downgrade(&parked);
            runtime.spawn(async move {
                let mut closed = std::pin::pin!(closed);
                let mut every = tokio::time::interval(PARKED_QUIET);
                every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tokio::select! {
                        _ = &mut closed => {
                            if let Some(parked) = weak.upgrade() {
                                parked.release_all();
                            }
                            return;
                        }
                        _ = every.tick() => match weak.upgrade() {
                            Some(parked) => parked.release_quiet(Instant::now(), PARKED_QUIET),
                            None => return,
                        },
                    }
                }
            });
        }
        Db {
            pool,
            embeds: false,
            stats: Arc::default(),
            parked,
        }
    }

    /// Begins a transaction on a pooled connection. When the pool has none idle, a parked one
    /// goes back to it first, so parked connections never keep a transaction waiting.
    async fn begin(
        &self,
        statement: Option<&'static str>,
    ) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        if self.pool.num_idle() == 0 {
            self.parked.release_one();
        }
        match statement {
            None => self.pool.begin().await,
            Some(statement) => self.pool.begin_with(statement).await,
        }
    }

    /// The same database, with writes queueing their text in `embedding_outbox` for the
    /// background indexer (`on` when the server has an embedder).
    pub fn queueing_embeddings(self, on: bool) -> Self {
        Db { embeds: on, ..self }
    }

    /// Whether writes queue their text for the embedder (see [`Db::queueing_embeddings`]).
    pub fn queues_embeddings(&self) -> bool {
        self.embeds
    }

    /// The share of `principal`'s newest texts of `kind` holding the name `word`, as a search
    /// of the last minute kept it (see [`Scoped::keep_name_share`]); read without a
    /// transaction.
    pub fn name_share(&self, principal: &Principal, kind: &str, word: &str) -> Option<f64> {
        let id = sizes::caller(&principal.tenant_id, &principal.user_id);
        self.stats.name_share(&id, kind, word)
    }

    /// Opens a transaction acting as `principal`: `BEGIN`, then one prepared statement that
    /// switches the role and sets the tenant and user, passed as bind parameters.
    ///
    /// When the connection turns out to be dead (the server restarted since it was pooled),
    /// nothing has run yet, so this tries once more on another connection before giving up.
    pub async fn scoped(&self, principal: &Principal) -> Result<Scoped, sqlx::Error> {
        check_id(&principal.tenant_id)?;
        check_id(&principal.user_id)?;
        match self.open(principal).await {
            Err(err) if crate::error::is_unavailable(&err) && !self.pool.is_closed() => {
                tracing::debug!(error = %err, "opening a scoped transaction failed; retrying once");
                self.open(principal).await
            }
            other => other,
        }
    }

    /// Runs a read that is one call of a read function that acts as its caller (the
    /// `mnemo_read_*` functions, which begin with `mnemo_act_as`): `call` builds the statement
    /// `SELECT ... FROM mnemo_read_x(..., $tenant, $user)` from `principal`'s tenant and user,
    /// and it runs on a pooled connection outside any transaction block. One round trip where
    /// [`Db::scoped`] takes three (`BEGIN`, the scope statement, the read; the rollback rides on
    /// the pool's release check). The settings the function makes are local to the call's own
    /// transaction, so nothing outlives it, and behind a transaction-pooling proxy the scope
    /// and the read cannot part.
    ///
    /// Any other statement is refused before it is sent: on a bare pooled connection it would
    /// run as the pool's login, outside row-level security. Like [`Db::scoped`], a dead
    /// connection is retried once on another.
    pub async fn read_call<'q, O, F, M>(
        &self,
        principal: &'q Principal,
        call: F,
    ) -> Result<Vec<O>, sqlx::Error>
    where
        F: Fn(&'q str, &'q str) -> sqlx::query::Map<'q, Postgres, M, PgArguments>,
        M: FnMut(PgRow) -> Result<O, sqlx::Error> + Send,
        O: Send + Unpin,
    {
        self.one_call(OneCall::Read, principal, call).await
    }

    /// Runs a write that is one call of a write function that acts as its caller (the
    /// `mnemo_write_*` functions, which begin with `mnemo_act_as`), as [`Db::read_call`] runs
    /// a read: one statement outside any transaction block, which commits when it ends. One
    /// round trip where a [`Scoped`] write takes four (`BEGIN`, the scope statement, the write,
    /// `COMMIT`) and the pool's release check a fifth.
    ///
    /// A write is retried on another connection only when it failed on a connection kept from
    /// an earlier call, as if the server were gone (it restarted since): that server never ran
    /// it. A write that failed on a fresh connection may have committed before the connection
    /// broke, so the error is the caller's answer.
    pub async fn write_call<'q, O, F, M>(
        &self,
        principal: &'q Principal,
        call: F,
    ) -> Result<Vec<O>, sqlx::Error>
    where
        F: Fn(&'q str, &'q str) -> sqlx::query::Map<'q, Postgres, M, PgArguments>,
        M: FnMut(PgRow) -> Result<O, sqlx::Error> + Send,
        O: Send + Unpin,
    {
        self.one_call(OneCall::Write, principal, call).await
    }

    async fn one_call<'q, O, F, M>(
        &self,
        kind: OneCall,
        principal: &'q Principal,
        call: F,
    ) -> Result<Vec<O>, sqlx::Error>
    where
        F: Fn(&'q str, &'q str) -> sqlx::query::Map<'q, Postgres, M, PgArguments>,
        M: FnMut(PgRow) -> Result<O, sqlx::Error> + Send,
        O: Send + Unpin,
    {
        check_id(&principal.tenant_id)?;
        check_id(&principal.user_id)?;
        // Whether the attempt ran on a connection kept from an earlier call.
        let attempt = || async {
            let query = call(&principal.tenant_id, &principal.user_id);
            if !is_one_call(query.sql(), kind.prefix()) {
                return (
                    false,
                    Err(sqlx::Error::Protocol(format!(
                        "not a call of a {} function: {}",
                        kind.prefix(),
                        query.sql()
                    ))),
                );
            }
            let (mut conn, since, kept) = match self.parked.take() {
                Some((conn, since)) => (conn, since, true),
                None => match self.pool.acquire().await {
                    Ok(conn) => (conn, Instant::now(), false),
                    Err(err) => return (false, Err(err)),
                },
            };
            let rows = query.fetch_all(&mut *conn).await;
            if rows.is_ok() && !self.pool.is_closed() {
                // The call ended: its transaction is over and the connection waits for the next
                // statement, with nothing to flush.
                self.parked.put(conn, since);
            }
            (kept, rows)
        };
        match attempt().await {
            (kept, Err(err))
                if crate::error::is_unavailable(&err)
                    && !self.pool.is_closed()
                    && (kept || kind == OneCall::Read) =>
            {
                tracing::debug!(error = %err, "a one-call statement failed; retrying once");
                // The server may have restarted: every parked connection would fail alike.
                self.parked.release_all();
                attempt().await.1
            }
            (_, other) => other,
        }
    }

    /// Opens a read-only transaction acting as `principal` on one snapshot (`REPEATABLE READ`):
    /// every statement sees the database as of the first one, so a long read (an account export)
    /// is consistent.
    pub async fn snapshot(&self, principal: &Principal) -> Result<Scoped, sqlx::Error> {
        check_id(&principal.tenant_id)?;
        check_id(&principal.user_id)?;
        let tx = self
            .begin(Some("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"))
            .await?;
        self.act_as(tx, principal).await
    }

    async fn open(&self, principal: &Principal) -> Result<Scoped, sqlx::Error> {
        self.act_as(self.begin(None).await?, principal).await
    }

    /// Switches a begun transaction to `mnemo_app` acting as `principal`.
    async fn act_as(
        &self,
        mut tx: Transaction<'static, Postgres>,
        principal: &Principal,
    ) -> Result<Scoped, sqlx::Error> {
        // The role and the row-level-security settings, transaction-locally, in one statement.
        sqlx::query!(
            "SELECT set_config('role', 'mnemo_app', true) AS role,
                    set_config('mnemo.tenant', $1, true) AS tenant,
                    set_config('mnemo.user', $2, true) AS user",
            principal.tenant_id,
            principal.user_id
        )
        .fetch_one(&mut *tx)
        .await?;
        Ok(Scoped {
            tx,
            embeds: self.embeds,
            searching: None,
            caller: Some(Caller {
                id: sizes::caller(&principal.tenant_id, &principal.user_id),
                stats: Arc::clone(&self.stats),
            }),
        })
    }

    /// Opens a transaction confined to one whole tenant, as `mnemo_eraser`, whose policies let
    /// it delete (and only delete) every row of the tenant named by `mnemo.tenant`.
    pub async fn tenant_eraser(&self, tenant: &str) -> Result<Scoped, sqlx::Error> {
        check_id(tenant)?;
        let mut tx = self.begin(None).await?;
        sqlx::query!(
            "SELECT set_config('role', 'mnemo_eraser', true) AS role,
                    set_config('mnemo.tenant', $1, true) AS tenant",
            tenant
        )
        .fetch_one(&mut *tx)
        .await?;
        Ok(Scoped {
            tx,
            embeds: false,
            searching: None,
            caller: None,
        })
    }

    /// Opens `job`'s transaction: its role (and settings), then, for a job that one replica
    /// runs at a time, its transaction-level advisory lock. `None` when another replica holds
    /// that lock: skip this round (a backfill waits for the lock instead).
    pub async fn system(&self, job: Job) -> Result<Option<System>, sqlx::Error> {
        let mut tx = self.begin(None).await?;
        if let Some(role) = job.role() {
            // One of the closed set of the jobs' roles.
            sqlx::query!("SELECT set_config('role', $1, true) AS role", role)
                .fetch_one(&mut *tx)
                .await?;
        }
        match job.lock() {
            None => {}
            Some((key, LockWait::Wait)) => {
                sqlx::query!("SELECT pg_advisory_xact_lock($1)", key)
                    .fetch_one(&mut *tx)
                    .await?;
            }
            Some((key, LockWait::Skip)) => {
                let locked =
                    sqlx::query_scalar!("SELECT pg_try_advisory_xact_lock($1) AS \"locked!\"", key)
                        .fetch_one(&mut *tx)
                        .await?;
                if !locked {
                    tx.rollback().await?;
                    return Ok(None);
                }
            }
        }
        Ok(Some(System {
            job,
            scoped: Scoped {
                tx,
                embeds: self.embeds,
                searching: None,
                caller: None,
            },
        }))
    }

    /// Applies the migrations this binary carries. A database that an earlier release migrated
    /// first has the checksums of migrations whose comments were reworded since brought up to
    /// date (see [`REWORDED`]), so the migrator accepts them.
    pub async fn migrate(&self) -> Result<(), sqlx::migrate::MigrateError> {
        accept_reworded(&self.pool).await?;
        MIGRATOR.run(&self.pool).await
    }

    /// True when every migration this binary carries has been applied.
    pub async fn migrations_applied(&self) -> Result<bool, sqlx::Error> {
        let latest = MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
        // Runtime-checked: sqlx's own bookkeeping table, which `migrate` creates, is not part of
        // the schema the migrations describe.
        let applied: Option<i64> =
            sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations WHERE success")
                .fetch_one(&self.pool)
                .await?;
        Ok(applied.unwrap_or(0) >= latest)
    }

    /// Checks that the pool's login may switch to `mnemo_app`, as every request does: a login
    /// lacking that membership would fail every request while the database itself answers.
    pub async fn can_switch_role(&self) -> Result<(), sqlx::Error> {
        let mut tx = self.begin(None).await?;
        sqlx::query!("SELECT set_config('role', 'mnemo_app', true)")
            .fetch_one(&mut *tx)
            .await?;
        tx.rollback().await
    }

    /// Connections open, idle, and the most the pool opens (for `/metrics`).
    pub fn usage(&self) -> PoolUsage {
        PoolUsage {
            size: self.pool.size(),
            idle: self.pool.num_idle() + self.parked.len(),
            max: self.pool.options().get_max_connections(),
        }
    }

    /// Closes the pool: new transactions fail, open ones finish.
    pub async fn close(&self) {
        self.parked.release_all();
        self.pool.close().await;
    }
}

/// Pooled connections kept after a one-call read or write for the next one. Handing a connection
/// back to the pool costs a round trip (sqlx checks each connection it gets back, which also
/// flushes a queued rollback), and a function's call needs none of it: it ended at `ReadyForQuery`,
/// outside any transaction, with no setting left over. Skipping that check measured a third
/// less CPU per key read (README, Benchmarks).
///
/// Parked connections stay the pool's (counted in its size, reported idle), at most a quarter
/// of it. They go back to it when a transaction finds none idle, when a call fails as if the
/// server were gone, and when the pool closes; each at least every [`PARKED_TURN`], so that
/// under steady reads too every connection passes the pool's checks (its lifetime among them);
/// and each that no call has used for [`PARKED_QUIET`], so that when traffic falls the pool's
/// idle timeout reaches them as it reaches any idle connection.
struct Parked {
    conns: std::sync::Mutex<Vec<Kept>>,
    most: usize,
}

/// A parked connection, the time it was first parked in a row, and the time it was last parked.
struct Kept {
    conn: PoolConnection<Postgres>,
    since: Instant,
    parked_at: Instant,
}

/// How long a connection stays parked, read after read, before it goes back to the pool once.
const PARKED_TURN: Duration = Duration::from_secs(60);

/// How long a parked connection may wait unused before it goes back to the pool.
const PARKED_QUIET: Duration = Duration::from_secs(10);

impl Parked {
    fn new(pool: &PgPool) -> Self {
        let most = (pool.options().get_max_connections() as usize / 4).max(1);
        Parked {
            conns: std::sync::Mutex::new(Vec::with_capacity(most)),
            most,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Kept>> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn len(&self) -> usize {
        self.lock().len()
    }

    /// The connection parked last (the one most likely still warm), with the time it was
    /// first parked.
    fn take(&self) -> Option<(PoolConnection<Postgres>, Instant)> {
        self.lock().pop().map(|kept| (kept.conn, kept.since))
    }

    /// Parks `conn` (first parked at `since`), or hands it back to the pool when enough are
    /// parked or its turn is over.
    fn put(&self, conn: PoolConnection<Postgres>, since: Instant) {
        if since.elapsed() < PARKED_TURN {
            let mut conns = self.lock();
            if conns.len() < self.most {
                conns.push(Kept {
                    conn,
                    since,
                    parked_at: Instant::now(),
                });
                return;
            }
        }
        drop(conn);
    }

    /// Hands one parked connection back to the pool.
    fn release_one(&self) {
        let kept = self.lock().pop();
        drop(kept);
    }

    /// Hands back to the pool the connections parked before `now - quiet` and unused since.
    /// The newest are taken first, so the ones left waiting are the oldest parked.
    fn release_quiet(&self, now: Instant, quiet: Duration) {
        let quiet: Vec<Kept> = {
            let mut conns = self.lock();
            let keep = conns
                .iter()
                .position(|kept| now.saturating_duration_since(kept.parked_at) < quiet)
                .unwrap_or(conns.len());
            conns.drain(..keep).collect()
        };
        drop(quiet);
    }

    /// Hands every parked connection back to the pool.
    fn release_all(&self) {
        let conns = std::mem::take(&mut *self.lock());
        drop(conns);
    }
}

impl std::fmt::Debug for Parked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parked")
            .field("parked", &self.len())
            .field("most", &self.most)
            .finish()
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        // Handing a connection back spawns a task; without a runtime (the process is ending)
        // the connections are closed with it.
        let conns = std::mem::take(&mut *self.lock());
        if tokio::runtime::Handle::try_current().is_err() {
            for kept in conns {
                std::mem::forget(kept.conn);
            }
        }
    }
}

/// What [`Db::usage`] reports.
#[derive(Debug, Clone, Copy)]
pub struct PoolUsage {
    pub size: u32,
    pub idle: usize,
    pub max: u32,
}

/// The background work that acts across tenants, each with the role it runs as and, for work
/// one replica does at a time, the key of its advisory lock. Every cross-tenant path is listed
/// here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Job {
    /// Pausing idle tasks and archiving old completed ones: the `mnemo_sweeper` role, which may
    /// read `tasks` only; each change is made as `mnemo_app` acting as the task's own user
    /// ([`System::act_as`]).
    TaskLifecycle,
    /// Ending waits whose timeout ran out: as [`Job::TaskLifecycle`], for `task_waits`.
    WaitTimeouts,
    /// Deleting expired idempotency records: the `mnemo_sweeper` role, whose policies let it
    /// read and delete expired records only.
    IdempotencyExpiry,
    /// Deleting conversation history past its retention: the `mnemo_retention` role.
    HistoryRetention,
    /// Embedding what the outbox queues: the `mnemo_indexer` role. Replicas share this work
    /// (rows are claimed with `SKIP LOCKED`), so it takes no lock.
    Indexer,
    /// Queueing every memory and message for embedding again: the `mnemo_indexer` role, one
    /// replica at a time (the others wait, then find the rows already queued).
    Backfill,
    /// Readying the vector tables and indexes at start-up: the login role itself, since it may
    /// create the pgvector extension.
    Schema,
}

impl Job {
    /// The role the job's transaction runs as; `None`: the login role itself.
    fn role(self) -> Option<&'static str> {
        match self {
            Job::TaskLifecycle | Job::WaitTimeouts | Job::IdempotencyExpiry => {
                Some("mnemo_sweeper")
            }
            Job::HistoryRetention => Some("mnemo_retention"),
            Job::Indexer | Job::Backfill => Some("mnemo_indexer"),
            Job::Schema => None,
        }
    }

    /// The key of the job's advisory lock: arbitrary constants, spelling the job's name in ASCII.
    pub fn lock_key(self) -> Option<i64> {
        self.lock().map(|(key, _)| key)
    }

    fn lock(self) -> Option<(i64, LockWait)> {
        match self {
            Job::TaskLifecycle => Some((0x6d6e_656d_6f73_7770, LockWait::Skip)), // "mnemoswp"
            Job::WaitTimeouts => Some((0x6d6e_656d_6f77_6169, LockWait::Skip)),  // "mnemowai"
            Job::IdempotencyExpiry => Some((0x6d6e_656d_6f69_646b, LockWait::Skip)), // "mnemoidk"
            Job::HistoryRetention => Some((0x6d6e_656d_6f72_6574, LockWait::Skip)), // "mnemoret"
            Job::Backfill => Some((0x6d6e_656d_6f62_6b66, LockWait::Wait)),      // "mnemobkf"
            Job::Indexer | Job::Schema => None,
        }
    }
}

/// What a job does when another replica holds its lock.
#[derive(Debug, Clone, Copy)]
enum LockWait {
    /// Skip this round ([`Db::system`] answers `None`).
    Skip,
    /// Wait for it.
    Wait,
}

/// A transaction acting as one principal (or, for the tenant eraser, one tenant): row-level
/// security limits it to that tenant and user.
///
/// Statements run on it as on a connection (`query.fetch_one(&mut *tx)`), but it does not hand
/// out the connection: store functions take `&mut Scoped`, and only [`Db`] makes one. Dropping
/// it without [`Scoped::commit`] rolls back.
pub struct Scoped {
    tx: Transaction<'static, Postgres>,
    embeds: bool,
    /// The search settings this transaction holds (see [`crate::search::begin_search`]):
    /// whether for a search by words alone, once set. Settings are transaction-local, and no
    /// savepoint can undo them, so a transaction sets them once per kind of search.
    searching: Option<bool>,
    /// The user a request's transaction acts as, for the history sizes and term counts its
    /// searches keep;
    /// `None` in a job's transaction, whose searches count every time.
    caller: Option<Caller>,
}

/// A request's user, and where what searches of long histories counted is kept.
struct Caller {
    id: String,
    stats: Arc<HistoryStats>,
}

impl Scoped {
    /// The search settings this transaction holds: `Some(words_only)` once a search set them.
    pub fn search_settings(&self) -> Option<bool> {
        self.searching
    }

    /// Records that a search set this transaction's search settings for `words_only`.
    pub fn searched(&mut self, words_only: bool) {
        self.searching = Some(words_only);
    }

    /// Records that a statement changed the search settings since, so that the next search of
    /// the transaction sets them again.
    pub fn forget_search_settings(&mut self) {
        self.searching = None;
    }

    /// The number of this user's texts of `kind` a search counted in the last minute, when it
    /// was at least the keyword sample (see [`crate::search::sizes`]).
    pub fn history_size(&self, kind: &str) -> Option<i64> {
        let caller = self.caller.as_ref()?;
        caller.stats.size(&caller.id, kind)
    }

    /// Keeps `size`, just counted, as this user's number of texts of `kind`.
    pub fn keep_history_size(&self, kind: &str, size: i64) {
        if let Some(caller) = &self.caller {
            caller.stats.keep_size(&caller.id, kind, size);
        }
    }

    /// The counts of `term` in this user's texts of `kind` a search made in the last minute
    /// (see [`crate::search::sizes`]).
    pub fn term_counts(&self, kind: &str, term: &str) -> Option<TermCounts> {
        let caller = self.caller.as_ref()?;
        caller.stats.term(&caller.id, kind, term)
    }

    /// Whether a search of the last minute kept counts of any term in this user's texts of
    /// `kind`.
    pub fn any_term_counts(&self, kind: &str) -> bool {
        self.caller
            .as_ref()
            .is_some_and(|caller| caller.stats.any_term(&caller.id, kind))
    }

    /// Keeps `counts`, just made, as those of `term` in this user's texts of `kind`.
    pub fn keep_term_counts(&self, kind: &str, term: &str, counts: TermCounts) {
        if let Some(caller) = &self.caller {
            caller.stats.keep_term(&caller.id, kind, term, counts);
        }
    }

    /// The oldest text of this user's keyword sample of `kind` a search read in the last minute
    /// (see [`crate::search::sizes`]).
    pub fn sample_edge(&self, kind: &str) -> Option<SampleEdge> {
        let caller = self.caller.as_ref()?;
        caller.stats.edge(&caller.id, kind)
    }

    /// Keeps `edge`, just read, as the oldest text of this user's keyword sample of `kind`.
    pub fn keep_sample_edge(&self, kind: &str, edge: SampleEdge) {
        if let Some(caller) = &self.caller {
            caller.stats.keep_edge(&caller.id, kind, edge);
        }
    }

    /// Keeps `share`, just counted, as that of this user's newest texts of `kind` holding the
    /// name `word`.
    pub fn keep_name_share(&self, kind: &str, word: &str, share: f64) {
        if let Some(caller) = &self.caller {
            caller.stats.keep_name_share(&caller.id, kind, word, share);
        }
    }

    /// Whether a write in this transaction queues its text in `embedding_outbox`, for the
    /// background indexer to embed (the server has an embedder). No model runs here.
    pub fn queues_embeddings(&self) -> bool {
        self.embeds
    }

    pub async fn commit(self) -> Result<(), sqlx::Error> {
        self.tx.commit().await
    }

    /// Rolls back and waits for it, so transaction-level locks are released before this returns.
    pub async fn rollback(self) -> Result<(), sqlx::Error> {
        self.tx.rollback().await
    }

    /// Ends a transaction that only read, without waiting for the database: the rollback is
    /// queued on the connection and travels with the pool's check when the connection is
    /// returned, which the pool does anyway. Saves a round trip on the request's path. Never use
    /// it after a write: the write is rolled back.
    pub fn end_read_only(self) {
        drop(self.tx);
    }
}

impl std::fmt::Debug for Scoped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scoped")
    }
}

/// A background job's transaction (see [`Job`]): statements on it see what the job's role and
/// policies allow across tenants; [`System::act_as`] confines what follows to one user.
#[derive(Debug)]
pub struct System {
    job: Job,
    scoped: Scoped,
}

impl System {
    /// Switches to `mnemo_app` with the tenant and user set for the statements that follow and
    /// hands out the transaction as that user's [`Scoped`], so the store functions of requests
    /// run on it as they run for the user's own requests.
    pub async fn act_as(&mut self, tenant: &str, user: &str) -> Result<&mut Scoped, sqlx::Error> {
        check_id(tenant)?;
        check_id(user)?;
        self.set_scope("mnemo_app", tenant, user).await?;
        Ok(&mut self.scoped)
    }

    /// Clears the tenant and user again and switches back to the job's role, with what its own
    /// policies allow.
    pub async fn act_as_nobody(&mut self) -> Result<(), sqlx::Error> {
        self.set_scope(self.job.role().unwrap_or("none"), "", "")
            .await
    }

    async fn set_scope(&mut self, role: &str, tenant: &str, user: &str) -> Result<(), sqlx::Error> {
        sqlx::query!(
            "SELECT set_config('role', $1, true) AS role,
                    set_config('mnemo.tenant', $2, true) AS tenant,
                    set_config('mnemo.user', $3, true) AS user",
            role,
            tenant,
            user
        )
        .fetch_one(&mut *self.scoped.tx)
        .await?;
        Ok(())
    }

    pub async fn commit(self) -> Result<(), sqlx::Error> {
        self.scoped.commit().await
    }

    pub async fn rollback(self) -> Result<(), sqlx::Error> {
        self.scoped.rollback().await
    }
}

/// Statements run on a [`Scoped`] (or a [`System`]) as on the connection inside it.
macro_rules! delegate_executor {
    ($ty:ty, $($conn:tt)+) => {
        impl<'c> Executor<'c> for &'c mut $ty {
            type Database = Postgres;

            fn fetch_many<'e, 'q: 'e, E>(
                self,
                query: E,
            ) -> BoxStream<'e, Result<Either<PgQueryResult, PgRow>, sqlx::Error>>
            where
                'c: 'e,
                E: 'q + Execute<'q, Postgres>,
            {
                (&mut *self.$($conn)+).fetch_many(query)
            }

            fn fetch_optional<'e, 'q: 'e, E>(
                self,
                query: E,
            ) -> BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
            where
                'c: 'e,
                E: 'q + Execute<'q, Postgres>,
            {
                (&mut *self.$($conn)+).fetch_optional(query)
            }

            fn prepare_with<'e, 'q: 'e>(
                self,
                sql: &'q str,
                parameters: &'e [PgTypeInfo],
            ) -> BoxFuture<'e, Result<PgStatement<'q>, sqlx::Error>>
            where
                'c: 'e,
            {
                (&mut *self.$($conn)+).prepare_with(sql, parameters)
            }

            fn describe<'e, 'q: 'e>(
                self,
                sql: &'q str,
            ) -> BoxFuture<'e, Result<Describe<Postgres>, sqlx::Error>>
            where
                'c: 'e,
            {
                (&mut *self.$($conn)+).describe(sql)
            }
        }
    };
}

delegate_executor!(Scoped, tx);
delegate_executor!(System, scoped.tx);

/// What a one-call statement may call: a read function or a write function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OneCall {
    Read,
    Write,
}

impl OneCall {
    fn prefix(self) -> &'static str {
        match self {
            OneCall::Read => "mnemo_read_",
            OneCall::Write => "mnemo_write_",
        }
    }
}

/// Whether `sql` is `SELECT <columns> FROM <prefix><name>(<parameters>)` and nothing else: no
/// other table, subquery or statement ([`Db::read_call`], [`Db::write_call`]). The columns may
/// be renamed (`summary AS "summary!"`), the arguments are bind parameters, possibly cast.
fn is_one_call(sql: &str, prefix: &str) -> bool {
    // Word by word, without copying: this runs on every one-call statement.
    let mut words = sql.split_whitespace();
    if words.next() != Some("SELECT") {
        return false;
    }
    // The columns, up to `FROM`.
    for word in words.by_ref() {
        if word == "FROM" {
            break;
        }
        if word.contains(['(', ';']) {
            return false;
        }
    }
    // `<prefix><name>(` and the arguments, to the one closing parenthesis at the very end.
    let Some((name, first)) = words
        .next()
        .and_then(|word| word.strip_prefix(prefix))
        .and_then(|rest| rest.split_once('('))
    else {
        return false;
    };
    let argument = |c: char| c.is_ascii_alphanumeric() || "$,:_[]".contains(c);
    let mut rest = std::iter::once(first).chain(words).peekable();
    let mut closed = false;
    while let Some(word) = rest.next() {
        let word = if rest.peek().is_none() {
            match word.strip_suffix(')') {
                Some(word) => {
                    closed = true;
                    word
                }
                None => return false,
            }
        } else {
            word
        };
        if !word.chars().all(argument) {
            return false;
        }
    }
    closed && !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '_')
}

/// Refuses empty ids and control characters (auth refuses them too; this is the last line).
fn check_id(value: &str) -> Result<(), sqlx::Error> {
    if value.is_empty() || value.chars().any(char::is_control) {
        return Err(sqlx::Error::Protocol(
            "tenant and user ids must be non-empty and free of control characters".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_calls_of_read_functions_are_one_call_reads() {
        let is_read_call = |sql| is_one_call(sql, OneCall::Read.prefix());
        assert!(is_read_call(
            "SELECT summary AS \"summary!\", is_active\n FROM mnemo_read_memory($1, $2, $3::bigint, $4, $5, $6)"
        ));
        for sql in [
            "SELECT * FROM agent_memories",
            "SELECT * FROM mnemo_read_memory($1) ; DELETE FROM agent_memories",
            "SELECT * FROM mnemo_read_x($1), agent_memories",
            "SELECT * FROM mnemo_read_x((SELECT 1))",
            "SELECT * FROM mnemo_read_x($1) JOIN agent_memories ON true",
            "SELECT (SELECT count(*) FROM agent_memories) FROM mnemo_read_x($1)",
            "SELECT * FROM mnemo_read_($1)",
            "SELECT * FROM mnemo_act_as($1, $2)",
            "WITH x AS (SELECT 1) SELECT * FROM mnemo_read_x($1)",
            "SELECT * FROM mnemo_read_x('t', 'u')",
            "SELECT * FROM mnemo_write_memory($1, $2)",
        ] {
            assert!(!is_read_call(sql), "{sql}");
        }
    }

    #[test]
    fn only_calls_of_write_functions_are_one_call_writes() {
        let is_write_call = |sql| is_one_call(sql, OneCall::Write.prefix());
        assert!(is_write_call(
            "SELECT version, created_at FROM mnemo_write_memory($1, $2::text[], $3)"
        ));
        for sql in [
            "SELECT * FROM mnemo_read_memory($1, $2)",
            "SELECT * FROM mnemo_write_memory($1) ; DELETE FROM agent_memories",
            "SELECT * FROM mnemo_write_memory($1), agent_memories",
            "SELECT * FROM mnemo_write_($1)",
            "SELECT * FROM mnemo_act_as($1, $2)",
        ] {
            assert!(!is_write_call(sql), "{sql}");
        }
    }

    #[sqlx::test]
    async fn a_connection_parked_past_its_turn_goes_back_to_the_pool(pool: PgPool) {
        let parked = Parked::new(&pool);
        let long_ago = Instant::now()
            .checked_sub(PARKED_TURN)
            .expect("the clock started long enough ago");
        parked.put(pool.acquire().await.expect("acquire"), long_ago);
        assert_eq!(parked.len(), 0, "its turn is over: back to the pool");
        parked.put(pool.acquire().await.expect("acquire"), Instant::now());
        assert_eq!(parked.len(), 1);
        let (_, since) = parked.take().expect("parked");
        assert!(since.elapsed() < PARKED_TURN);
    }

    #[sqlx::test]
    async fn parked_connections_left_unused_go_back_to_the_pool(pool: PgPool) {
        let parked = Parked {
            conns: std::sync::Mutex::default(),
            most: 2,
        };
        parked.put(pool.acquire().await.expect("acquire"), Instant::now());
        let between = Instant::now();
        tokio::time::sleep(Duration::from_millis(2)).await;
        parked.put(pool.acquire().await.expect("acquire"), Instant::now());
        assert_eq!(parked.len(), 2);
        parked.release_quiet(Instant::now(), PARKED_QUIET);
        assert_eq!(parked.len(), 2, "used just now: kept");
        parked.release_quiet(between + PARKED_QUIET, PARKED_QUIET);
        assert_eq!(
            parked.len(),
            1,
            "the one parked first, unused since, went back"
        );
        parked.release_quiet(Instant::now() + PARKED_QUIET, PARKED_QUIET);
        assert_eq!(parked.len(), 0, "unused for PARKED_QUIET: back to the pool");
        // Back in the pool, both are idle there and the pool's own checks reach them again.
        tokio::time::timeout(Duration::from_secs(10), async {
            while pool.num_idle() < 2 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("both connections idle in the pool");
    }

    #[test]
    fn ids_must_be_non_empty_without_control_characters() {
        assert!(check_id("o'brien\\x").is_ok());
        assert!(check_id("").is_err());
        assert!(check_id("a\0b").is_err());
        assert!(check_id("a\nb").is_err());
    }
}
