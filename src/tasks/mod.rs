//! Task memory: tasks, plans and replans, step status, execution log, snapshots and "where was I?".
//!
//! Files: the routes by feature, `task_routes.rs` (a task itself: register, read, change, the
//! "where was I?" query), `plan_routes.rs` (plans, items, actions and their logs) and
//! `log_routes.rs` (events, messages, snapshots); `config.rs` (settings), `model.rs` (request and
//! response types), `lifecycle.rs` (the phase/status state machine), `plan.rs` (plan forms and
//! re-basing), `digest.rs` (the exact "where was I?"), `store.rs` (SQL), `summary.rs` (the
//! background running summary), `stuck.rs` (the stuck-alert cooldown); `workspace/` steps,
//! artifacts, waits, search and transfer. A handler parses, runs one [`Scoped`] transaction, and
//! maps the result; the helpers the routes share are here.

mod config;
pub mod digest;
pub mod digest_state;
pub mod lifecycle;
mod log_routes;
pub mod model;
pub mod plan;
mod plan_routes;
pub mod prompt;
pub mod service;
pub mod store;
pub mod stuck;
pub mod summary;
mod task_routes;
pub mod workspace;

pub use config::TasksConfig;
pub use log_routes::*;
pub use plan_routes::*;
pub use task_routes::*;

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::state::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(register_task, list_tasks))
        .routes(routes!(get_task, patch_task, delete_task))
        .routes(routes!(update_task))
        .routes(routes!(query_task))
        .routes(routes!(put_plan))
        .routes(routes!(list_plans))
        .routes(routes!(get_plan))
        .routes(routes!(patch_item))
        .routes(routes!(post_action, list_actions))
        .routes(routes!(patch_action))
        .routes(routes!(post_action_log, list_action_logs))
        .routes(routes!(post_events, list_events))
        .routes(routes!(post_message, list_messages))
        .routes(routes!(post_snapshot, list_snapshots))
        .merge(workspace::router())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        assert!(TasksConfig::default().validate().is_ok());
    }

    #[test]
    fn wait_sweep_and_stuck_cooldown_are_bounded_and_named() {
        let config = |adjust: fn(&mut TasksConfig)| {
            let mut c = TasksConfig::default();
            adjust(&mut c);
            c.validate()
        };
        assert!(config(|c| c.wait_sweep_interval_secs = 0).is_ok());
        assert!(config(|c| c.stuck_cooldown_secs = 0).is_ok());
        let err = config(|c| c.wait_sweep_interval_secs = 86_401).unwrap_err();
        assert!(
            err.starts_with("MNEMO_TASKS_WAIT_SWEEP_INTERVAL_SECS") && !err.contains('\n'),
            "{err}"
        );
        let err = config(|c| c.stuck_cooldown_secs = 604_801).unwrap_err();
        assert!(
            err.starts_with("MNEMO_TASKS_STUCK_COOLDOWN_SECS") && !err.contains('\n'),
            "{err}"
        );
    }
}
