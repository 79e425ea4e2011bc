//! Settings of conversation memory: archive limits, the window, summaries, recall in chat,
//! history retention.

use clap::Args;

/// Settings of this domain (flattened into [`crate::config::Config`]). `Default` matches the
/// command-line defaults.
#[derive(Debug, Clone, Args)]
pub struct ConversationsConfig {
    /// Days archived conversation history is kept; unset: forever. Expired messages vanish from
    /// reads at once; a background sweeper deletes them.
    #[arg(long = "history-retention-days", env = "MNEMO_HISTORY_RETENTION_DAYS")]
    pub history_retention_days: Option<u32>,
    /// Seconds between two retention sweeps.
    #[arg(
        long = "history-sweep-interval-secs",
        env = "MNEMO_HISTORY_SWEEP_INTERVAL_SECS",
        default_value_t = 3600
    )]
    pub history_sweep_interval_secs: u64,
    /// Rows a sweep deletes per table and transaction.
    #[arg(
        long = "history-sweep-batch",
        env = "MNEMO_HISTORY_SWEEP_BATCH",
        default_value_t = 5000
    )]
    pub history_sweep_batch: u64,
    /// Messages in the short-term window of a session.
    #[arg(
        long = "chat-window-messages",
        env = "MNEMO_CHAT_WINDOW_MESSAGES",
        default_value_t = 10
    )]
    pub window_messages: usize,
    /// Sessions whose window a replica keeps in memory (0 disables the cache).
    #[arg(
        long = "chat-window-cache-sessions",
        env = "MNEMO_CHAT_WINDOW_CACHE_SESSIONS",
        default_value_t = 10_000
    )]
    pub window_cache_sessions: usize,
    /// Most messages in one archive batch (or one turn's `new_messages`); more is 413.
    #[arg(
        long = "archive-max-messages",
        env = "MNEMO_ARCHIVE_MAX_MESSAGES",
        default_value_t = 500
    )]
    pub archive_max_messages: usize,
    /// Largest archive, context or chat request body in bytes; more is 413.
    #[arg(long = "archive-max-bytes", env = "MNEMO_ARCHIVE_MAX_BYTES", default_value_t = 1024 * 1024)]
    pub archive_max_bytes: usize,
    /// Rounds of tool calls `/api/chat` runs before asking the model for a final answer.
    #[arg(
        long = "chat-max-tool-rounds",
        env = "MNEMO_CHAT_MAX_TOOL_ROUNDS",
        default_value_t = 4
    )]
    pub chat_max_tool_rounds: usize,
    /// Memories recalled into a turn's context: the best hits for the turn's last user message
    /// among the caller's memories and other messages (0 turns recall off).
    #[arg(
        long = "chat-recall-k",
        env = "MNEMO_CHAT_RECALL_K",
        default_value_t = 5
    )]
    pub chat_recall_k: u32,
    /// Refresh a session's running summary in the background every this many archived messages
    /// (0: no summaries).
    #[arg(
        long = "chat-summary-every",
        env = "MNEMO_CHAT_SUMMARY_EVERY",
        default_value_t = 20
    )]
    pub chat_summary_every: u32,
    /// The system prompt that opens every compiled context.
    #[arg(long = "chat-system-prompt", env = "MNEMO_CHAT_SYSTEM_PROMPT", default_value = DEFAULT_SYSTEM_PROMPT)]
    pub system_prompt: String,
}

/// The system prompt used when `MNEMO_CHAT_SYSTEM_PROMPT` is unset.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are a helpful assistant with memory. Long-term notes \
about the user follow in their own section; keep them current with manage_long_term_memory. Store \
large material with store_memory and find it again with search_memory and retrieve_memory.";

impl Default for ConversationsConfig {
    /// The command-line defaults (the environment ignored).
    fn default() -> Self {
        crate::config::command_line_defaults()
    }
}

impl ConversationsConfig {
    /// One line naming the setting that is wrong, if any.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(days) = self.history_retention_days
            && (days == 0 || i32::try_from(days).is_err())
        {
            return Err("MNEMO_HISTORY_RETENTION_DAYS must be a positive number of days".into());
        }
        if self.history_sweep_interval_secs == 0 {
            return Err("MNEMO_HISTORY_SWEEP_INTERVAL_SECS must be at least 1".into());
        }
        if self.chat_recall_k > 20 {
            return Err("MNEMO_CHAT_RECALL_K must be 0 to 20".into());
        }
        if self.history_sweep_batch == 0 {
            return Err("MNEMO_HISTORY_SWEEP_BATCH must be at least 1".into());
        }
        if self.window_messages == 0 || self.window_messages > 1000 {
            return Err("MNEMO_CHAT_WINDOW_MESSAGES must be between 1 and 1000".into());
        }
        if self.archive_max_messages == 0 {
            return Err("MNEMO_ARCHIVE_MAX_MESSAGES must be at least 1".into());
        }
        if self.archive_max_bytes < 1024 {
            return Err("MNEMO_ARCHIVE_MAX_BYTES must be at least 1024".into());
        }
        if self.chat_summary_every > 10_000 {
            return Err("MNEMO_CHAT_SUMMARY_EVERY must be between 0 and 10000".into());
        }
        Ok(())
    }

    pub(super) fn retention(&self) -> Option<i32> {
        self.history_retention_days
            .and_then(|d| i32::try_from(d).ok())
    }
}
