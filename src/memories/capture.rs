//! The capture flow in one call: measure a tool output, hand it back inline under the token
//! threshold, or store it and hand back the line with its placeholder. No model is called.

use serde_json::Value;

use super::model::{CaptureInput, CaptureResult};
use super::placeholder;
use super::store::{Limits, NewMemory, Prepared, create, prepare, short_text, upsert};
use crate::access::Target;
use crate::db::Scoped;
use crate::error::{ApiError, ApiResult};

/// A capture measured and decided: inline (under the threshold) or to be stored.
#[derive(Debug)]
pub struct PreparedCapture {
    prepared: Prepared,
    threshold: u64,
    command: Option<String>,
    exit_code: Option<i64>,
}

impl PreparedCapture {
    /// Whether the output is over the threshold and must be stored.
    pub fn needs_store(&self) -> bool {
        self.prepared.token_count() as u64 > self.threshold
    }
}

/// First half of a capture: validates and measures the output (no database).
pub async fn prepare_capture(input: CaptureInput, limits: &Limits) -> ApiResult<PreparedCapture> {
    let threshold = input
        .threshold_tokens
        .unwrap_or(limits.capture_threshold_tokens);
    if threshold == 0 || threshold > 10_000_000 {
        return Err(ApiError::invalid(
            "threshold_tokens",
            "`threshold_tokens` must be 1 to 10000000",
        ));
    }
    if input.duration_ms.is_some_and(|ms| ms < 0) {
        return Err(ApiError::invalid(
            "duration_ms",
            "`duration_ms` must not be negative",
        ));
    }
    let command = short_text("command", input.command, 4000)?;
    let mut metadata = input.metadata.unwrap_or_default();
    if let Some(command) = &command {
        metadata.insert("command".into(), Value::String(command.clone()));
    }
    if let Some(code) = input.exit_code {
        metadata.insert("exit_code".into(), Value::from(code));
    }
    if let Some(ms) = input.duration_ms {
        metadata.insert("duration_ms".into(), Value::from(ms));
    }
    let new = NewMemory {
        content: input.content,
        key: input.key,
        description: None,
        memory_type: Some(input.memory_type.unwrap_or_else(|| "command_output".into())),
        agent_id: input.agent_id,
        thread_id: input.thread_id,
        metadata,
        command: command.clone(),
    };
    Ok(PreparedCapture {
        prepared: prepare(new, limits).await?,
        threshold,
        command,
        exit_code: input.exit_code,
    })
}

/// Second half of a capture: under the threshold the content comes back inline and nothing is
/// written (`conn` may then be `None`); over it the output is stored and the context line holds
/// its placeholder.
pub async fn finish_capture(
    conn: Option<&mut Scoped>,
    capture: PreparedCapture,
) -> ApiResult<CaptureResult> {
    let token_count = capture.prepared.token_count();
    if !capture.needs_store() {
        return Ok(CaptureResult {
            stored: false,
            token_count,
            threshold_tokens: capture.threshold,
            context: capture.prepared.into_content(),
            memory: None,
        });
    }
    let conn = conn.ok_or_else(|| {
        ApiError::Internal(anyhow::anyhow!(
            "capture over the threshold needs a connection"
        ))
    })?;
    let memory = match capture.prepared.key().map(str::to_owned) {
        Some(key) => upsert(conn, &key, &capture.prepared).await?,
        None => create(Target::Tx(conn), &capture.prepared).await?,
    };
    let context = placeholder::context_line(
        capture.command.as_deref(),
        capture.exit_code,
        &memory.placeholder,
    );
    Ok(CaptureResult {
        stored: true,
        token_count,
        threshold_tokens: capture.threshold,
        context,
        memory: Some(memory),
    })
}

/// Agent tool for the capture flow in one call, in the caller's transaction.
pub async fn capture_output(
    conn: &mut Scoped,
    input: CaptureInput,
    limits: &Limits,
) -> ApiResult<CaptureResult> {
    let capture = prepare_capture(input, limits).await?;
    finish_capture(Some(conn), capture).await
}
