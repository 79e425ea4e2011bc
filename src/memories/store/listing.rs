//! Listing memories (newest first, without content, filtered, paged by cursor) and deleting one.

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::not_found;
use crate::db::Scoped;
use crate::error::{ApiError, ApiResult};
use crate::memories::model::{ListQuery, MemoryInfo, MemoryList};
use crate::memories::placeholder;

/// A memory row without its content, as a list shows it.
#[derive(sqlx::FromRow)]
struct InfoRow {
    id: Uuid,
    memory_key: String,
    summary: String,
    memory_type: String,
    agent_id: Option<String>,
    thread_id: Option<String>,
    content_metadata: Value,
    size_bytes: i64,
    line_count: i64,
    token_count: i64,
    content_sha256: String,
    version: i32,
    is_active: bool,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl From<InfoRow> for MemoryInfo {
    fn from(r: InfoRow) -> Self {
        MemoryInfo {
            placeholder: placeholder::placeholder(&r.memory_key, &r.summary),
            memory_key: r.memory_key,
            summary: r.summary,
            memory_type: r.memory_type,
            agent_id: r.agent_id,
            thread_id: r.thread_id,
            metadata: r.content_metadata,
            size_bytes: r.size_bytes,
            line_count: r.line_count,
            token_count: r.token_count,
            content_sha256: r.content_sha256,
            version: r.version,
            is_active: r.is_active,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

fn metadata_filter(field: &str, raw: Option<&str>) -> ApiResult<Option<Value>> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    match serde_json::from_str::<Value>(raw) {
        Ok(value @ Value::Object(_)) => Ok(Some(value)),
        _ => Err(ApiError::invalid(
            field,
            format!("`{field}` must be a JSON object, such as {{\"exit_code\":1}}"),
        )),
    }
}

/// `GET /api/memories`: newest first, without content, filtered, cursor-paginated.
pub async fn list_memories(conn: &mut Scoped, query: &ListQuery) -> ApiResult<MemoryList> {
    let limit = query.limit.unwrap_or(50);
    if limit == 0 || limit > 200 {
        return Err(ApiError::invalid("limit", "`limit` must be 1 to 200"));
    }
    let cursor = crate::pagination::position::<Uuid>(query.cursor.as_deref())?;
    let metadata = metadata_filter("metadata", query.metadata.as_deref())?;
    let rows = sqlx::query_as!(
        InfoRow,
        "SELECT id, memory_key, summary, memory_type, agent_id, thread_id, content_metadata,
                size_bytes, line_count, token_count, content_sha256, version, is_active,
                created_at, updated_at
         FROM agent_memories
         WHERE tenant_id = current_setting('mnemo.tenant')
           AND user_id = current_setting('mnemo.user')
           AND ($1 OR is_active)
           AND ($2::text IS NULL OR agent_id = $2)
           AND ($3::text IS NULL OR thread_id = $3)
           AND ($4::text IS NULL OR memory_type = $4)
           AND ($5::timestamptz IS NULL OR created_at >= $5)
           AND ($6::timestamptz IS NULL OR created_at < $6)
           AND ($7::jsonb IS NULL OR content_metadata @> $7)
           AND ($8::uuid IS NULL OR id < $8)
         ORDER BY id DESC
         LIMIT $9",
        query.include_inactive.unwrap_or(false),
        query.agent_id.as_deref(),
        query.thread_id.as_deref(),
        query.memory_type.as_deref(),
        query.created_after,
        query.created_before,
        metadata,
        cursor,
        i64::from(limit) + 1
    )
    .fetch_all(&mut *conn)
    .await?;
    let (rows, more) = crate::pagination::split(rows, i64::from(limit));
    let next_cursor = crate::pagination::next(more, rows.last().map(|r| r.id));
    Ok(MemoryList {
        items: rows.into_iter().map(MemoryInfo::from).collect(),
        next_cursor,
    })
}

/// `DELETE /api/memories/{key}`: soft (inactive, hidden from list and search) or hard (the row and
/// its chunks removed). 404 when there is no such key.
pub async fn delete_memory(conn: &mut Scoped, key: &str, hard: bool) -> ApiResult<()> {
    let done = if hard {
        sqlx::query!(
            "DELETE FROM agent_memories
             WHERE tenant_id = (SELECT current_setting('mnemo.tenant'))
               AND user_id = (SELECT current_setting('mnemo.user')) AND memory_key = $1",
            key
        )
        .execute(&mut *conn)
        .await?
    } else {
        sqlx::query!(
            "UPDATE agent_memories SET is_active = false, updated_at = now()
             WHERE tenant_id = (SELECT current_setting('mnemo.tenant'))
               AND user_id = (SELECT current_setting('mnemo.user')) AND memory_key = $1",
            key
        )
        .execute(&mut *conn)
        .await?
    };
    if done.rows_affected() == 0 {
        return Err(not_found(key));
    }
    Ok(())
}
