//! What a handler opens the database with. [`Reader`] and [`Writer`] are extractors: they verify
//! the bearer token (as [`Principal`] does) and check that it carries `memory:read` or
//! `memory:write` (403 otherwise) before the handler runs. A route whose scope depends on its
//! body (a notes `read`, a task update that only asks) makes its [`Caller`] with
//! [`Caller::new`] once it knows. [`Caller::begin`] then opens the caller's [`Scoped`]
//! transaction when the handler is ready for it, after its validation and any embedding, so no
//! pooled connection waits on work that needs none.
//!
//! With the private pool of [`Db`], this is the only way a request reaches PostgreSQL: every
//! statement of a handler runs confined to the caller's tenant and user, in the caller's
//! transaction or, for the hottest reads and writes, in one call of a function that acts as the
//! caller ([`Caller::read_call`], [`Caller::write_call`]).

use std::ops::Deref;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use sqlx::postgres::{PgArguments, PgRow};

use crate::auth::{Principal, Scope};
use crate::db::{Db, Scoped};
use crate::error::ApiError;
use crate::state::AppState;

/// A verified caller whose token carries the scope the work needs, with the database.
#[derive(Debug, Clone)]
pub struct Caller {
    db: Db,
    principal: Principal,
}

impl Caller {
    /// Checks that `principal` has `scope` (403 otherwise).
    pub fn new(db: Db, principal: Principal, scope: Scope) -> Result<Self, ApiError> {
        principal.require(scope)?;
        Ok(Caller { db, principal })
    }

    /// Opens the caller's transaction.
    pub async fn begin(&self) -> Result<Scoped, sqlx::Error> {
        self.db.scoped(&self.principal).await
    }

    /// The share of the caller's newest texts of `kind` holding the name `word`, as a search of
    /// the last minute found it (see [`crate::search::names`]).
    pub fn name_share(&self, kind: &str, word: &str) -> Option<f64> {
        self.db.name_share(&self.principal, kind, word)
    }

    /// Opens the caller's read-only transaction on one snapshot (see [`Db::snapshot`]).
    pub async fn snapshot(&self) -> Result<Scoped, sqlx::Error> {
        self.db.snapshot(&self.principal).await
    }

    /// Runs one of the caller's one-call reads (see [`Db::read_call`]).
    pub async fn read_call<'q, O, F, M>(&'q self, call: F) -> Result<Vec<O>, sqlx::Error>
    where
        F: Fn(&'q str, &'q str) -> sqlx::query::Map<'q, sqlx::Postgres, M, PgArguments>,
        M: FnMut(PgRow) -> Result<O, sqlx::Error> + Send,
        O: Send + Unpin,
    {
        self.db.read_call(&self.principal, call).await
    }

    /// Runs one of the caller's one-call writes (see [`Db::write_call`]).
    pub async fn write_call<'q, O, F, M>(&'q self, call: F) -> Result<Vec<O>, sqlx::Error>
    where
        F: Fn(&'q str, &'q str) -> sqlx::query::Map<'q, sqlx::Postgres, M, PgArguments>,
        M: FnMut(PgRow) -> Result<O, sqlx::Error> + Send,
        O: Send + Unpin,
    {
        self.db.write_call(&self.principal, call).await
    }

    /// Whether the caller's writes queue their text for the embedder (see
    /// [`Scoped::queues_embeddings`]).
    pub fn queues_embeddings(&self) -> bool {
        self.db.queues_embeddings()
    }

    /// The verified caller.
    pub fn principal(&self) -> &Principal {
        &self.principal
    }
}

/// Where a write runs: in the caller's open transaction (with whatever else the request writes
/// there), or in one call of a `mnemo_write_*` function, which is its own transaction (see
/// [`Caller::write_call`]).
pub enum Target<'a> {
    Tx(&'a mut Scoped),
    Call(&'a Caller),
}

impl Deref for Caller {
    type Target = Principal;
    fn deref(&self) -> &Principal {
        &self.principal
    }
}

macro_rules! extractor {
    ($(#[$doc:meta])* $name:ident, $scope:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $name(Caller);

        impl $name {
            /// Checks that `principal` may do this (403 otherwise).
            pub fn new(db: Db, principal: Principal) -> Result<Self, ApiError> {
                Caller::new(db, principal, $scope).map($name)
            }
        }

        impl Deref for $name {
            type Target = Caller;
            fn deref(&self) -> &Caller {
                &self.0
            }
        }

        impl FromRequestParts<AppState> for $name {
            type Rejection = ApiError;

            async fn from_request_parts(
                parts: &mut Parts,
                state: &AppState,
            ) -> Result<Self, Self::Rejection> {
                let principal = Principal::from_request_parts(parts, state).await?;
                $name::new(state.db.clone(), principal)
            }
        }
    };
}

extractor!(
    /// A caller whose token carries `memory:read`.
    Reader,
    Scope::Read
);

extractor!(
    /// A caller whose token carries `memory:write`.
    Writer,
    Scope::Write
);
