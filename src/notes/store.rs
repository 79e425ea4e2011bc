//! SQL of the notes domain, as plain functions over a connection that knows nothing of HTTP.
//!
//! Every function expects `conn` to be inside a [`crate::db::Scoped`] transaction (the caller's
//! tenant and user come from its `mnemo.tenant` / `mnemo.user` settings, and row-level security
//! scopes every statement), and leaves committing to the caller. The chat endpoint calls
//! [`read_notes`] and [`run_operation`] as the `manage_long_term_memory` tool inside its own
//! transaction.
//!
//! # Writes
//! A write locks the notes row (`SELECT ... FOR UPDATE`; when the row does not exist yet,
//! `INSERT ... ON CONFLICT DO NOTHING` first, then the same `SELECT ... FOR UPDATE`), checks
//! `If-Match` against the locked version, computes the new text, then updates the row, inserts the
//! revision and prunes revisions past the kept count in one statement. Concurrent writers for one
//! agent therefore run one after another and none is lost. A client error (404, 409, 412, 422) is
//! returned before anything is written, and no SQL error is left behind, so the caller's
//! transaction stays usable.

use chrono::{DateTime, Utc};

use super::NotesConfig;
use super::cache::Held;
use super::model::{
    NotesOperationRequest, NotesOperationResponse, Operation, Revision, RevisionSummary,
};
use super::operations::{self, Change};
use crate::access::Caller;
use crate::db::Scoped;
use crate::error::{ApiError, ApiResult};

/// The notes of one agent for the transaction's user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredNotes {
    /// Empty when never written.
    pub notes: String,
    /// 0 when never written.
    pub version: i64,
    pub created_at: Option<DateTime<Utc>>,
    pub updated_at: Option<DateTime<Utc>>,
}

/// The notes row as stored. Statements here are checked against the schema at compile time
/// (`query!`; see `scripts/sqlx-prepare`); each names the caller's tenant, user and agent the same
/// way: `tenant_id = current_setting('mnemo.tenant') AND user_id = current_setting('mnemo.user')
/// AND agent_name = $1`.
struct NotesRow {
    notes: String,
    version: i64,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

/// Reads the notes of `agent_name`: empty text and version 0 when never written. 422 for an invalid
/// agent name.
#[tracing::instrument(skip_all, fields(agent_name = %agent_name))]
pub async fn read_notes(conn: &mut Scoped, agent_name: &str) -> ApiResult<StoredNotes> {
    operations::validate_agent_name(agent_name)?;
    let row = sqlx::query_as!(
        NotesRow,
        "SELECT notes, version, created_at, updated_at FROM agent_long_term_memory
          WHERE tenant_id = current_setting('mnemo.tenant')
            AND user_id = current_setting('mnemo.user') AND agent_name = $1",
        agent_name
    )
    .fetch_optional(&mut *conn)
    .await?;
    Ok(stored(row))
}

/// What the notes read answers when the caller's server names the copy it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotesRead {
    /// The stored row is still the one the held answer was made from.
    Held(Held),
    /// The stored notes (version 0 and empty when never written), and the transaction that
    /// wrote their row (`None` when there is no row).
    Fresh(StoredNotes, Option<i64>),
}

/// [`read_notes`] outside any transaction, in one call (`mnemo_read_notes`, see
/// [`crate::db::Db::read_call`]): the notes route's read. `held` is the answer the server holds
/// (see [`super::cache`]); when the stored row is still the one it was made from, the text is
/// not read and `held` is the answer.
pub async fn read_notes_in_one_call(
    caller: &Caller,
    agent_name: &str,
    held: Option<Held>,
) -> ApiResult<NotesRead> {
    operations::validate_agent_name(agent_name)?;
    // No row has version -1: nothing held matches nothing.
    let (held_version, held_row) = held.as_ref().map_or((-1, -1), |h| (h.version, h.row));
    let rows = caller
        .read_call(|tenant, user| {
            sqlx::query!(
                r#"SELECT notes, version AS "version!", row_xid AS "row_xid!",
                          created_at AS "created_at!", updated_at AS "updated_at!"
                   FROM mnemo_read_notes($1, $2, $3, $4, $5)"#,
                agent_name,
                held_version,
                held_row,
                tenant,
                user
            )
        })
        .await?;
    let Some(row) = rows.into_iter().next() else {
        return Ok(NotesRead::Fresh(stored(None), None));
    };
    let notes = match (row.notes, held) {
        (None, Some(held)) => return Ok(NotesRead::Held(held)),
        // The column is never NULL, so without a held answer the text is always there.
        (notes, _) => notes.unwrap_or_default(),
    };
    let notes = stored(Some(NotesRow {
        notes,
        version: row.version,
        created_at: row.created_at,
        updated_at: row.updated_at,
    }));
    Ok(NotesRead::Fresh(notes, Some(row.row_xid)))
}

fn stored(row: Option<NotesRow>) -> StoredNotes {
    match row {
        // A version-0 row is a lock placeholder of a write that did not happen: never written.
        Some(NotesRow {
            notes,
            version,
            created_at,
            updated_at,
        }) if version > 0 => StoredNotes {
            notes,
            version,
            created_at: Some(created_at),
            updated_at: Some(updated_at),
        },
        _ => StoredNotes {
            notes: String::new(),
            version: 0,
            created_at: None,
            updated_at: None,
        },
    }
}

/// Runs one `manage_long_term_memory` operation for `agent_name`.
///
/// `read` only reads. Every other operation is a write: `if_match`, when given, must equal the
/// current version (0 for never-written notes) or the answer is 412 with `current_version`; the
/// result may not grow the notes past `config.max_bytes` (422 with `current_bytes`,
/// `attempted_bytes`, `max_bytes`); each write adds 1 to the version and keeps a revision. Bad
/// fields are 422 naming the field; section lookups fail with 404 (`headings`) or 409 (`matches`).
#[tracing::instrument(skip_all, fields(agent_name = %agent_name, operation = request.operation.as_str()))]
pub async fn run_operation(
    conn: &mut Scoped,
    agent_name: &str,
    request: NotesOperationRequest,
    if_match: Option<i64>,
    config: &NotesConfig,
) -> ApiResult<NotesOperationResponse> {
    operations::validate_agent_name(agent_name)?;
    operations::validate_request(&request)?;
    if request.operation == Operation::Read {
        let current = read_notes(conn, agent_name).await?;
        return Ok(NotesOperationResponse {
            agent_name: agent_name.to_owned(),
            operation: Operation::Read.as_str().to_owned(),
            outcome: operations::read_outcome(&current.notes, current.version),
            size_bytes: current.notes.len(),
            notes: current.notes,
            version: current.version,
            changed: false,
            updated_at: current.updated_at,
        });
    }
    let current = lock(conn, agent_name).await?;
    check_if_match(if_match, current.version)?;
    let change = operations::apply(&current.notes, &request, config.max_bytes)?;
    write(
        conn,
        agent_name,
        request.operation.as_str(),
        None,
        change,
        current.version,
        config,
    )
    .await
}

/// Makes the text of kept revision `version` the current notes (a new version, operation
/// `restore`). 404 when that revision is not kept; `if_match` and the size cap as for writes.
#[tracing::instrument(skip_all, fields(agent_name = %agent_name, version))]
pub async fn restore_revision(
    conn: &mut Scoped,
    agent_name: &str,
    version: i64,
    if_match: Option<i64>,
    config: &NotesConfig,
) -> ApiResult<NotesOperationResponse> {
    operations::validate_agent_name(agent_name)?;
    let current = lock(conn, agent_name).await?;
    check_if_match(if_match, current.version)?;
    let revision = get_revision(conn, agent_name, version).await?;
    operations::check_size(current.notes.len(), revision.notes.len(), config.max_bytes)?;
    let outcome = format!(
        "restored version {version}; {}",
        operations::notes_now(revision.notes.len())
    );
    let change = Change {
        notes: revision.notes,
        outcome,
    };
    write(
        conn,
        agent_name,
        "restore",
        Some(version),
        change,
        current.version,
        config,
    )
    .await
}

/// Kept revisions, newest first: at most `limit`, older than version `before` when given. Returns
/// one more than `limit` when there is a next page (the caller trims it).
pub async fn list_revisions(
    conn: &mut Scoped,
    agent_name: &str,
    limit: i64,
    before: Option<i64>,
) -> ApiResult<Vec<RevisionSummary>> {
    operations::validate_agent_name(agent_name)?;
    let rows = sqlx::query_as!(
        RevisionSummary,
        "SELECT version, operation, restored_from, size_bytes, created_at
           FROM agent_long_term_memory_revisions
          WHERE tenant_id = current_setting('mnemo.tenant')
            AND user_id = current_setting('mnemo.user') AND agent_name = $1 AND version < $2
          ORDER BY version DESC
          LIMIT $3",
        agent_name,
        before.unwrap_or(i64::MAX),
        limit + 1
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows)
}

/// One kept revision with its text; 404 when it is not kept (pruned, or never written).
pub async fn get_revision(
    conn: &mut Scoped,
    agent_name: &str,
    version: i64,
) -> ApiResult<Revision> {
    operations::validate_agent_name(agent_name)?;
    let found = sqlx::query_as!(
        Revision,
        "SELECT version, operation, restored_from, size_bytes, created_at, notes
           FROM agent_long_term_memory_revisions
          WHERE tenant_id = current_setting('mnemo.tenant')
            AND user_id = current_setting('mnemo.user') AND agent_name = $1 AND version = $2",
        agent_name,
        version
    )
    .fetch_optional(&mut *conn)
    .await?;
    match found {
        Some(revision) => Ok(revision),
        None => {
            let range = sqlx::query!(
                "SELECT min(version) AS oldest, max(version) AS newest
                   FROM agent_long_term_memory_revisions
                  WHERE tenant_id = current_setting('mnemo.tenant')
                    AND user_id = current_setting('mnemo.user') AND agent_name = $1",
                agent_name
            )
            .fetch_one(&mut *conn)
            .await?;
            let (oldest, newest) = (range.oldest, range.newest);
            let kept = match (oldest, newest) {
                (Some(oldest), Some(newest)) => {
                    format!("kept revisions are versions {oldest} to {newest}")
                }
                _ => format!("agent `{agent_name}` has no revisions"),
            };
            Err(
                ApiError::not_found(format!("no revision {version} of these notes; {kept}"))
                    .with("oldest_version", oldest)
                    .with("newest_version", newest),
            )
        }
    }
}

fn check_if_match(if_match: Option<i64>, current: i64) -> ApiResult<()> {
    match if_match {
        Some(expected) if expected != current => Err(operations::stale_version(expected, current)),
        _ => Ok(()),
    }
}

/// Locks the notes row, creating an empty version-0 row first when there is none.
async fn lock(conn: &mut Scoped, agent_name: &str) -> ApiResult<StoredNotes> {
    // The same statement twice: a macro each time, so that both are checked.
    macro_rules! select_for_update {
        () => {
            sqlx::query_as!(
                NotesRow,
                "SELECT notes, version, created_at, updated_at FROM agent_long_term_memory
                  WHERE tenant_id = current_setting('mnemo.tenant')
                    AND user_id = current_setting('mnemo.user') AND agent_name = $1
                    FOR UPDATE",
                agent_name
            )
            .fetch_optional(&mut *conn)
        };
    }
    let row = select_for_update!().await?;
    if let Some(row) = row {
        return Ok(stored(Some(row)));
    }
    // First write for this agent: a concurrent first writer makes ours wait on its row, then do
    // nothing; the SELECT below then sees and locks the committed row.
    sqlx::query!(
        "INSERT INTO agent_long_term_memory (tenant_id, user_id, agent_name)
         VALUES (current_setting('mnemo.tenant'), current_setting('mnemo.user'), $1)
         ON CONFLICT (tenant_id, user_id, agent_name) DO NOTHING",
        agent_name
    )
    .execute(&mut *conn)
    .await?;
    let row = select_for_update!().await?;
    match row {
        Some(row) => Ok(stored(Some(row))),
        None => Err(ApiError::Internal(anyhow::anyhow!(
            "the notes row of `{agent_name}` is missing right after its upsert"
        ))),
    }
}

/// Writes the new text as version `previous + 1`, its revision, and prunes old revisions: one
/// statement.
async fn write(
    conn: &mut Scoped,
    agent_name: &str,
    operation: &str,
    restored_from: Option<i64>,
    change: Change,
    previous: i64,
    config: &NotesConfig,
) -> ApiResult<NotesOperationResponse> {
    let version = previous + 1;
    let updated_at = sqlx::query_scalar!(
        r#"WITH updated AS (
             UPDATE agent_long_term_memory
                SET notes = $2, version = $3, updated_at = now()
              WHERE tenant_id = current_setting('mnemo.tenant')
                AND user_id = current_setting('mnemo.user') AND agent_name = $1
          RETURNING tenant_id, user_id, agent_name, version, notes, updated_at
         ), revision AS (
             INSERT INTO agent_long_term_memory_revisions
                 (tenant_id, user_id, agent_name, version, operation, restored_from, notes,
                  size_bytes, created_at)
             SELECT tenant_id, user_id, agent_name, version, $4, $5, notes, octet_length(notes),
                    updated_at
               FROM updated
         ), pruned AS (
             DELETE FROM agent_long_term_memory_revisions
              WHERE tenant_id = current_setting('mnemo.tenant')
                AND user_id = current_setting('mnemo.user') AND agent_name = $1
                AND version <= $3 - $6
         )
         SELECT updated_at AS "updated_at!" FROM updated"#,
        agent_name,
        &change.notes,
        version,
        operation,
        restored_from,
        i64::from(config.revisions_kept)
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(NotesOperationResponse {
        agent_name: agent_name.to_owned(),
        operation: operation.to_owned(),
        size_bytes: change.notes.len(),
        notes: change.notes,
        version,
        changed: true,
        outcome: change.outcome,
        updated_at: Some(updated_at),
    })
}
