//! Long-term notes in an account export: each agent's notes row and each kept revision as a
//! record, written back as they were (same versions and times) by an import.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::operations::validate_agent_name;
use crate::db::Scoped;
use crate::error::{ApiError, ApiResult};

/// The notes of one agent. A version-0 row (a first write that did not happen) is carried too.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotesRecord {
    pub agent_name: String,
    pub notes: String,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// One kept revision of an agent's notes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RevisionRecord {
    pub agent_name: String,
    pub version: i64,
    pub operation: String,
    pub restored_from: Option<i64>,
    pub notes: String,
    pub created_at: DateTime<Utc>,
}

const OPERATIONS: &[&str] = &[
    "overwrite",
    "append",
    "prepend",
    "delete_section_by_header",
    "replace_section_by_header",
    "delete_all_notes",
    "restore",
];

/// The caller's notes rows after agent `after`, at most `limit`.
pub async fn notes_page(
    conn: &mut Scoped,
    after: Option<&str>,
    limit: i64,
) -> Result<Vec<NotesRecord>, sqlx::Error> {
    sqlx::query_as!(
        NotesRecord,
        "SELECT agent_name, notes, version, created_at, updated_at FROM agent_long_term_memory
         WHERE tenant_id = current_setting('mnemo.tenant')
           AND user_id = current_setting('mnemo.user') AND ($1::text IS NULL OR agent_name > $1)
         ORDER BY agent_name LIMIT $2",
        after,
        limit
    )
    .fetch_all(&mut *conn)
    .await
}

/// The caller's revisions after (agent, version) `after`, at most `limit`.
pub async fn revisions_page(
    conn: &mut Scoped,
    after: Option<(&str, i64)>,
    limit: i64,
) -> Result<Vec<RevisionRecord>, sqlx::Error> {
    sqlx::query_as!(
        RevisionRecord,
        "SELECT agent_name, version, operation, restored_from, notes, created_at
         FROM agent_long_term_memory_revisions
         WHERE tenant_id = current_setting('mnemo.tenant')
           AND user_id = current_setting('mnemo.user')
           AND ($1::text IS NULL OR (agent_name, version) > ($1, $2))
         ORDER BY agent_name, version LIMIT $3",
        after.map(|a| a.0),
        after.map_or(0, |a| a.1),
        limit
    )
    .fetch_all(&mut *conn)
    .await
}

fn check_size(notes: &str, max_bytes: usize) -> ApiResult<()> {
    if notes.len() > max_bytes {
        return Err(ApiError::too_large(format!(
            "the notes are {} bytes; the limit is {max_bytes} bytes (MNEMO_NOTES_MAX_BYTES)",
            notes.len()
        ))
        .with("limit_bytes", max_bytes));
    }
    Ok(())
}

/// Checks a notes row: agent name, version, size within `max_bytes` (413 past it).
pub fn check_notes(record: &NotesRecord, max_bytes: usize) -> ApiResult<()> {
    validate_agent_name(&record.agent_name)?;
    if record.version < 0 {
        return Err(ApiError::invalid(
            "version",
            "`version` must not be negative",
        ));
    }
    check_size(&record.notes, max_bytes)
}

/// Checks a revision: agent name, version, operation, size.
pub fn check_revision(record: &RevisionRecord, max_bytes: usize) -> ApiResult<()> {
    validate_agent_name(&record.agent_name)?;
    if record.version < 1 {
        return Err(ApiError::invalid("version", "`version` must be at least 1"));
    }
    if !OPERATIONS.contains(&record.operation.as_str()) {
        return Err(ApiError::invalid(
            "operation",
            format!(
                "`operation` {:?} is not a notes operation",
                record.operation
            ),
        ));
    }
    check_size(&record.notes, max_bytes)
}

/// Writes notes rows back as they were.
pub async fn restore_notes(conn: &mut Scoped, records: &[NotesRecord]) -> Result<(), sqlx::Error> {
    let names: Vec<&str> = records.iter().map(|r| r.agent_name.as_str()).collect();
    let notes: Vec<&str> = records.iter().map(|r| r.notes.as_str()).collect();
    let versions: Vec<i64> = records.iter().map(|r| r.version).collect();
    let created: Vec<DateTime<Utc>> = records.iter().map(|r| r.created_at).collect();
    let updated: Vec<DateTime<Utc>> = records.iter().map(|r| r.updated_at).collect();
    // The macro expects arrays of owned elements (`&[String]`); `as` states the arrays' own
    // types, which encode the same. So in `restore_revisions`.
    sqlx::query!(
        "INSERT INTO agent_long_term_memory
             (tenant_id, user_id, agent_name, notes, version, created_at, updated_at)
         SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user'), a, n, v, c, u
         FROM unnest($1::text[], $2::text[], $3::int8[], $4::timestamptz[], $5::timestamptz[])
              AS r(a, n, v, c, u)",
        &names as &[&str],
        &notes as &[&str],
        &versions,
        &created,
        &updated
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Writes revisions back as they were (their notes rows must be there).
pub async fn restore_revisions(
    conn: &mut Scoped,
    records: &[RevisionRecord],
) -> Result<(), sqlx::Error> {
    let names: Vec<&str> = records.iter().map(|r| r.agent_name.as_str()).collect();
    let versions: Vec<i64> = records.iter().map(|r| r.version).collect();
    let operations: Vec<&str> = records.iter().map(|r| r.operation.as_str()).collect();
    let restored: Vec<Option<i64>> = records.iter().map(|r| r.restored_from).collect();
    let notes: Vec<&str> = records.iter().map(|r| r.notes.as_str()).collect();
    let created: Vec<DateTime<Utc>> = records.iter().map(|r| r.created_at).collect();
    sqlx::query!(
        "INSERT INTO agent_long_term_memory_revisions
             (tenant_id, user_id, agent_name, version, operation, restored_from, notes, size_bytes,
              created_at)
         SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user'), a, v, o, r, n,
                octet_length(n), c
         FROM unnest($1::text[], $2::int8[], $3::text[], $4::int8[], $5::text[], $6::timestamptz[])
              AS x(a, v, o, r, n, c)",
        &names as &[&str],
        &versions,
        &operations as &[&str],
        &restored as &[Option<i64>],
        &notes as &[&str],
        &created
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}
