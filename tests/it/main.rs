//! One integration binary: a module per domain, all speaking HTTP to the real router on a real
//! PostgreSQL (a fresh database per test through `#[sqlx::test]`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly on setup errors"
)]
#![allow(
    clippy::disallowed_methods,
    reason = "tests play another replica or inspect rows through the test database's own pool"
)]

mod archive_groups;
mod chat_updates;
mod cli;
mod common;
mod conversations;
mod data_rights;
mod deploy;
mod idempotency;
mod memories;
mod notes;
mod openapi;
mod platform;
mod recall;
mod tasks;
mod tools;
mod trust;
mod workspace;
