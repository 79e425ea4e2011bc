//! The task workspace (issue 7): structured steps with parts, artifacts, history search, waits,
//! the lifecycle sweeper, and export/import in 000's `task_memory_bank/<task_id>/` layout.
//!
//! Files: `parts.rs` (the TaskStep part model and its checks), `range.rs` (HTTP byte ranges),
//! `waits.rs` (wait transitions, the resolution message, task metadata), `sweeper.rs` (the
//! pause/archive decision and its clock), `bundle.rs` (the file layout), `export.rs` (files and a
//! deterministic `.tar.gz`), `import.rs` (reading an archive safely).

pub mod bundle;
pub mod export;
pub mod import;
pub mod parts;
pub mod range;
pub mod sweeper;
pub mod waits;
