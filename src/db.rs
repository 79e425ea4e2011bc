//! Database pool, embedded migrations, and the [`Scoped`] transaction every request runs in.
//!
//! # Tenancy
//! Every table has `ENABLE` + `FORCE ROW LEVEL SECURITY` with a policy comparing its `tenant_id`
//! and `user_id` to the settings `mnemo.tenant` and `mnemo.user` (see `migrations/0001`). A
//! [`Scoped`] transaction switches to the `mnemo_app` role (which has no `BYPASSRLS`) and sets both
//! values transaction-locally, so row-level security applies even when the pool logs in as a
//! superuser, and a query that forgets its `WHERE user_id` still sees only the caller's rows.
//!
//! # Cost
//! `BEGIN`, then one prepared statement with the three `set_config` calls (the ids are bind
//! parameters), then the request's statements, then `COMMIT`. Sending `BEGIN` and the settings as
//! one simple-query batch would save a round trip, but PostgreSQL then parses and plans the batch
//! on every request; on a CPU-bound server the prepared form measured 42% more throughput (README,
//! Benchmarks). Read-only requests end without waiting for the rollback. The pool does not ping on
//! acquire (it pings on release, off the request's path).

use std::ops::{Deref, DerefMut};
use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgConnection, PgPool, Postgres, Transaction};

use crate::auth::Principal;

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Connects a pool with the settings the tenancy model relies on. With `statement_timeout`,
/// PostgreSQL cancels any statement of the pool's connections that runs longer, so a runaway
/// query cannot hold a connection (and its share of the pool) for good; schema changes and
/// backfills run on a pool without it.
pub async fn connect(
    url: &str,
    max_connections: u32,
    statement_timeout: Option<Duration>,
) -> Result<PgPool, sqlx::Error> {
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
}

/// Parses `url`; connections name themselves `mnemo` in `pg_stat_activity`.
pub fn connect_options(url: &str) -> Result<PgConnectOptions, sqlx::Error> {
    Ok(PgConnectOptions::from_str(url)?.application_name("mnemo"))
}

pub async fn migrate(pool: &PgPool) -> Result<(), sqlx::migrate::MigrateError> {
    MIGRATOR.run(pool).await
}

/// True when every migration this binary carries has been applied.
pub async fn migrations_applied(pool: &PgPool) -> Result<bool, sqlx::Error> {
    let latest = MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
    let applied: Option<i64> =
        sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations WHERE success")
            .fetch_one(pool)
            .await?;
    Ok(applied.unwrap_or(0) >= latest)
}

/// Checks that the pool's login may switch to `mnemo_app`, as every request does: a login
/// lacking that membership would fail every request while the database itself answers.
pub async fn can_switch_role(pool: &PgPool) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT set_config('role', 'mnemo_app', true)")
        .execute(&mut *tx)
        .await?;
    tx.rollback().await
}

/// A transaction acting as one principal: row-level security limits it to that tenant and user.
///
/// Dereferences to the connection, so `query.fetch_one(&mut *scoped)` works. Dropping it without
/// [`Scoped::commit`] rolls back.
pub struct Scoped {
    tx: Transaction<'static, Postgres>,
}

impl Scoped {
    /// Opens the transaction: `BEGIN`, then one prepared statement that switches the role and
    /// sets the tenant and user, passed as bind parameters.
    ///
    /// When the connection turns out to be dead (the server restarted since it was pooled),
    /// nothing has run yet, so this tries once more on another connection before giving up.
    pub async fn begin(pool: &PgPool, principal: &Principal) -> Result<Self, sqlx::Error> {
        check_id(&principal.tenant_id)?;
        check_id(&principal.user_id)?;
        match Self::open(pool, principal).await {
            Err(err) if crate::error::is_unavailable(&err) && !pool.is_closed() => {
                tracing::debug!(error = %err, "opening a scoped transaction failed; retrying once");
                Self::open(pool, principal).await
            }
            other => other,
        }
    }

    /// Opens a read-only transaction on one snapshot (`REPEATABLE READ`): every statement sees
    /// the database as of the first one, so a long read (an account export) is consistent.
    pub async fn begin_snapshot(pool: &PgPool, principal: &Principal) -> Result<Self, sqlx::Error> {
        check_id(&principal.tenant_id)?;
        check_id(&principal.user_id)?;
        let mut tx = pool
            .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .await?;
        sqlx::query(SET_SCOPE)
            .bind(&principal.tenant_id)
            .bind(&principal.user_id)
            .execute(&mut *tx)
            .await?;
        Ok(Scoped { tx })
    }

    async fn open(pool: &PgPool, principal: &Principal) -> Result<Self, sqlx::Error> {
        let mut tx = pool.begin().await?;
        sqlx::query(SET_SCOPE)
            .bind(&principal.tenant_id)
            .bind(&principal.user_id)
            .execute(&mut *tx)
            .await?;
        Ok(Scoped { tx })
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

impl Deref for Scoped {
    type Target = PgConnection;
    fn deref(&self) -> &PgConnection {
        &self.tx
    }
}

impl DerefMut for Scoped {
    fn deref_mut(&mut self) -> &mut PgConnection {
        &mut self.tx
    }
}

/// Switches to `mnemo_app` and sets the row-level-security settings, transaction-locally.
const SET_SCOPE: &str = "SELECT set_config('role', 'mnemo_app', true), \
     set_config('mnemo.tenant', $1, true), set_config('mnemo.user', $2, true)";

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
    fn ids_must_be_non_empty_without_control_characters() {
        assert!(check_id("o'brien\\x").is_ok());
        assert!(check_id("").is_err());
        assert!(check_id("a\0b").is_err());
        assert!(check_id("a\nb").is_err());
    }
}
