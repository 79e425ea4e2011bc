//! The task workspace: structured steps with parts, artifacts, history search, waits,
//! the lifecycle sweeper, and export/import in the `task_memory_bank/<task_id>/` layout.
//!
//! Files: `parts.rs` (the TaskStep part model and its checks), `range.rs` (HTTP byte ranges),
//! `steps.rs` (appending a step), `artifacts.rs` (storing, reading and deleting an artifact),
//! `waits.rs` (wait transitions, the resolution and timeout messages, task metadata), `sweeper.rs`
//! (the pause/archive decision and its clock), `sweep_job.rs` (the background sweeper),
//! `timeouts.rs` (the background job ending overdue waits), `bundle.rs`
//! (the file layout), `export.rs` (files and a deterministic `.tar.gz`), `import.rs` (reading an
//! archive safely), `transfer/` (a bundle from the database in `load.rs`, into it in `store.rs`),
//! `search.rs` (history search by words and meaning), `store/` (SQL, one file per feature),
//! `model.rs` (request and response types). The routes by feature: `step_routes.rs` (steps and
//! the configuration snapshot), `artifact_routes.rs`, `search_routes.rs`, `wait_routes.rs` and
//! `transfer_routes.rs` (export and import); each handler parses, runs one
//! [`Scoped`](crate::db::Scoped) transaction, and maps the result.

mod artifact_routes;
pub mod artifacts;
pub mod bundle;
pub mod export;
pub mod import;
pub mod model;
pub mod parts;
pub mod range;
pub mod search;
mod search_routes;
mod step_routes;
pub mod steps;
pub mod store;
pub mod sweep_job;
pub mod sweeper;
pub mod timeouts;
pub mod transfer;
mod transfer_routes;
mod wait_routes;
pub mod waits;

pub use artifact_routes::*;
pub use search_routes::*;
pub use step_routes::*;
pub use transfer_routes::*;
pub use wait_routes::*;

use axum::extract::DefaultBodyLimit;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::state::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    // Uploads and imports read their bodies themselves against the configured caps.
    let streamed = OpenApiRouter::new()
        .routes(routes!(upload_artifact, list_artifacts))
        .routes(routes!(import_task))
        .layer(DefaultBodyLimit::disable());
    OpenApiRouter::new()
        .routes(routes!(append_step, list_steps))
        .routes(routes!(put_config, get_config))
        .routes(routes!(read_artifact, delete_artifact))
        .routes(routes!(search_task))
        .routes(routes!(search_all))
        .routes(routes!(create_wait, list_waits))
        .routes(routes!(get_wait, resolve_wait))
        .routes(routes!(export_task))
        .merge(streamed)
}

/// Checks the workspace settings of [`crate::tasks::TasksConfig`]; one line naming the wrong one.
pub fn check_config(c: &crate::tasks::TasksConfig) -> Result<(), String> {
    const GIB: usize = 1024 * 1024 * 1024;
    const CENTURY: u64 = 100 * 365 * 24 * 3600;
    // bytea holds at most 1 GiB.
    if c.artifact_max_bytes == 0 || c.artifact_max_bytes >= GIB {
        return Err("MNEMO_TASKS_ARTIFACT_MAX_BYTES must be between 1 and 1 GiB - 1".into());
    }
    if c.import_max_bytes < c.artifact_max_bytes || c.import_max_bytes > 4 * GIB {
        return Err(
            "MNEMO_TASKS_IMPORT_MAX_BYTES must be at least MNEMO_TASKS_ARTIFACT_MAX_BYTES and at most 4 GiB"
                .into(),
        );
    }
    if c.import_max_members == 0 || c.import_max_members > 1_000_000 {
        return Err("MNEMO_TASKS_IMPORT_MAX_MEMBERS must be between 1 and 1000000".into());
    }
    if c.step_max_parts == 0 || c.step_max_parts > 10_000 {
        return Err("MNEMO_TASKS_STEP_MAX_PARTS must be between 1 and 10000".into());
    }
    if c.pause_after_secs == 0 || c.pause_after_secs > CENTURY {
        return Err("MNEMO_TASKS_PAUSE_AFTER_SECS must be between 1 and 100 years".into());
    }
    if c.archive_after_secs == 0 || c.archive_after_secs > CENTURY {
        return Err("MNEMO_TASKS_ARCHIVE_AFTER_SECS must be between 1 and 100 years".into());
    }
    if c.sweep_interval_secs > CENTURY {
        return Err("MNEMO_TASKS_SWEEP_INTERVAL_SECS must be at most 100 years".into());
    }
    if c.wait_sweep_interval_secs > 24 * 3600 {
        return Err("MNEMO_TASKS_WAIT_SWEEP_INTERVAL_SECS must be at most 86400 (a day)".into());
    }
    if c.stuck_cooldown_secs > 7 * 24 * 3600 {
        return Err("MNEMO_TASKS_STUCK_COOLDOWN_SECS must be at most 604800 (a week)".into());
    }
    Ok(())
}
