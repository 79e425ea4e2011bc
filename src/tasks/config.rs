//! Settings of task memory.

use clap::Args;

use super::workspace;

/// Settings of this domain (flattened into [`crate::config::Config`]). `Default` matches the
/// command-line defaults.
#[derive(Debug, Clone, Args)]
pub struct TasksConfig {
    /// Most events one `POST /api/tasks/{id}/events` may carry.
    #[arg(
        long = "tasks-max-batch-events",
        env = "MNEMO_TASKS_MAX_BATCH_EVENTS",
        default_value_t = 1000
    )]
    pub max_batch_events: usize,
    /// Most steps a plan version may have.
    #[arg(
        long = "tasks-max-plan-steps",
        env = "MNEMO_TASKS_MAX_PLAN_STEPS",
        default_value_t = 500
    )]
    pub max_plan_steps: usize,
    /// Refresh a task's running summary in the background every this many messages (0: never).
    #[arg(
        long = "tasks-summary-every",
        env = "MNEMO_TASKS_SUMMARY_EVERY",
        default_value_t = 5
    )]
    pub summary_every: u32,
    /// How many of the last updates the "where was I?" digest quotes.
    #[arg(
        long = "tasks-digest-recent",
        env = "MNEMO_TASKS_DIGEST_RECENT",
        default_value_t = 5
    )]
    pub digest_recent: usize,
    /// Largest artifact, in bytes.
    #[arg(
        long = "tasks-artifact-max-bytes",
        env = "MNEMO_TASKS_ARTIFACT_MAX_BYTES",
        default_value_t = 64 * 1024 * 1024
    )]
    pub artifact_max_bytes: usize,
    /// Largest import archive, in bytes, compressed and unpacked.
    #[arg(
        long = "tasks-import-max-bytes",
        env = "MNEMO_TASKS_IMPORT_MAX_BYTES",
        default_value_t = 256 * 1024 * 1024
    )]
    pub import_max_bytes: usize,
    /// Most members an import archive may have.
    #[arg(
        long = "tasks-import-max-members",
        env = "MNEMO_TASKS_IMPORT_MAX_MEMBERS",
        default_value_t = 10_000
    )]
    pub import_max_members: usize,
    /// Most parts one step may have.
    #[arg(
        long = "tasks-step-max-parts",
        env = "MNEMO_TASKS_STEP_MAX_PARTS",
        default_value_t = 200
    )]
    pub step_max_parts: usize,
    /// An active task with no update for this many seconds is paused.
    #[arg(
        long = "tasks-pause-after-secs",
        env = "MNEMO_TASKS_PAUSE_AFTER_SECS",
        default_value_t = 24 * 3600
    )]
    pub pause_after_secs: u64,
    /// A completed task this many seconds after completion is archived.
    #[arg(
        long = "tasks-archive-after-secs",
        env = "MNEMO_TASKS_ARCHIVE_AFTER_SECS",
        default_value_t = 7 * 24 * 3600
    )]
    pub archive_after_secs: u64,
    /// Seconds between lifecycle sweeps (0: no sweeper in this process).
    #[arg(
        long = "tasks-sweep-interval-secs",
        env = "MNEMO_TASKS_SWEEP_INTERVAL_SECS",
        default_value_t = 300
    )]
    pub sweep_interval_secs: u64,
    /// Seconds between rounds of the wait-timeout job, which ends watching waits whose
    /// `timeout_seconds` ran out (0: no such job in this process).
    #[arg(
        long = "tasks-wait-sweep-interval-secs",
        env = "MNEMO_TASKS_WAIT_SWEEP_INTERVAL_SECS",
        default_value_t = 10
    )]
    pub wait_sweep_interval_secs: u64,
    /// After a `stuck` message, further `stuck` messages of the task within this many seconds
    /// are suppressed (0: every one is stored).
    #[arg(
        long = "tasks-stuck-cooldown-secs",
        env = "MNEMO_TASKS_STUCK_COOLDOWN_SECS",
        default_value_t = 300
    )]
    pub stuck_cooldown_secs: u64,
}

impl Default for TasksConfig {
    /// The command-line defaults (the environment ignored).
    fn default() -> Self {
        crate::config::command_line_defaults()
    }
}

impl TasksConfig {
    /// One line naming the setting that is wrong, if any.
    pub fn validate(&self) -> Result<(), String> {
        // 11 bind parameters per event; PostgreSQL allows 65535 per statement.
        if self.max_batch_events == 0 || self.max_batch_events > 5000 {
            return Err("MNEMO_TASKS_MAX_BATCH_EVENTS must be between 1 and 5000".into());
        }
        if self.max_plan_steps == 0 || self.max_plan_steps > 5000 {
            return Err("MNEMO_TASKS_MAX_PLAN_STEPS must be between 1 and 5000".into());
        }
        workspace::check_config(self)
    }
}
