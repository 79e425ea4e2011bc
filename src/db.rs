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
//! `BEGIN` and the three `set_config` calls travel as one simple-query batch: one round trip, the
//! same count as a bare `BEGIN`. A request pays that, its own statements, and `COMMIT`; the pool
//! does not ping on acquire (it pings on release, off the request's path). The ids are sent as SQL string literals; that is safe because the
//! connection forces `standard_conforming_strings=on` (backslashes are plain characters), quotes
//! are doubled, and ids with NUL or other control characters are refused at auth and again here.

use std::ops::{Deref, DerefMut};
use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgConnection, PgPool, Postgres, Transaction};

use crate::auth::Principal;

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Connects a pool with the settings the tenancy model relies on.
pub async fn connect(url: &str, max_connections: u32) -> Result<PgPool, sqlx::Error> {
    let options = connect_options(url)?;
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(5))
        // sqlx already pings each connection when it returns to the pool (which also flushes a
        // queued rollback); pinging again on acquire would add a round trip to every request.
        .test_before_acquire(false)
        .connect_with(options)
        .await
}

/// Parses `url` and pins `standard_conforming_strings=on`, which [`Scoped::begin`] relies on.
pub fn connect_options(url: &str) -> Result<PgConnectOptions, sqlx::Error> {
    Ok(PgConnectOptions::from_str(url)?
        .options([("standard_conforming_strings", "on")])
        .application_name("mnemo"))
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

/// A transaction acting as one principal: row-level security limits it to that tenant and user.
///
/// Dereferences to the connection, so `query.fetch_one(&mut *scoped)` works. Dropping it without
/// [`Scoped::commit`] rolls back.
pub struct Scoped {
    tx: Transaction<'static, Postgres>,
}

impl Scoped {
    /// Opens the transaction in one round trip.
    pub async fn begin(pool: &PgPool, principal: &Principal) -> Result<Self, sqlx::Error> {
        let tx = pool.begin_with(begin_statement(principal)?).await?;
        Ok(Scoped { tx })
    }

    pub async fn commit(self) -> Result<(), sqlx::Error> {
        self.tx.commit().await
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

fn begin_statement(principal: &Principal) -> Result<String, sqlx::Error> {
    Ok(format!(
        "BEGIN; SELECT set_config('role', 'mnemo_app', true), \
         set_config('mnemo.tenant', {}, true), set_config('mnemo.user', {}, true)",
        literal(&principal.tenant_id)?,
        literal(&principal.user_id)?
    ))
}

/// A standard-conforming SQL string literal; refuses empty values and control characters.
fn literal(value: &str) -> Result<String, sqlx::Error> {
    if value.is_empty() || value.chars().any(char::is_control) {
        return Err(sqlx::Error::Protocol(
            "tenant and user ids must be non-empty and free of control characters".into(),
        ));
    }
    Ok(format!("'{}'", value.replace('\'', "''")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_double_quotes_and_keep_backslashes() {
        assert_eq!(literal("o'brien").unwrap(), "'o''brien'");
        assert_eq!(
            literal(r"a\'; DROP TABLE x; --").unwrap(),
            r"'a\''; DROP TABLE x; --'"
        );
        assert!(literal("").is_err());
        assert!(literal("a\0b").is_err());
        assert!(literal("a\nb").is_err());
    }
}
