//! `POST /api/recall`: one ranked list across every kind of memory the caller has — detail
//! memories, conversation messages, long-term notes (by section) and task history.
//!
//! Each kind is searched with its own route's ranking (memories, messages and task history by
//! words, meaning or both; note sections by words), and the kinds' lists are merged by
//! reciprocal rank: a hit scores `1 / (60 + its rank within its kind)`. Scores of different
//! kinds are not comparable (each kind's keyword rank depends on its own corpus), their ranks are.

use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::access::Reader;
use crate::conversations::search::{ChatSearchRequest, search_messages};
use crate::db::Scoped;
use crate::error::{ApiError, ApiResult};
use crate::extract::Json;
use crate::memories::model::{SearchFilters, SearchRequest};
use crate::search::Corpus;
use crate::search::query::{QUERY_CTE, idf_ranking};
use crate::search::{QueryVector, SearchMode, TextQuery};
use crate::state::AppState;

/// The constant of reciprocal rank fusion across kinds.
const RRF_K: f32 = 60.0;

/// A kind of memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Detail memories (large outputs behind placeholders).
    Memory,
    /// Archived conversation messages.
    Message,
    /// Sections of the long-term notes.
    Note,
    /// Task history: messages, log events, steps, tool results, snapshots.
    Task,
}

const ALL_KINDS: [Kind; 4] = [Kind::Memory, Kind::Message, Kind::Note, Kind::Task];

/// Filters of a recall; each applies to the kinds that have the field.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RecallFilters {
    /// Memories and sessions of this agent, and this agent's notes.
    #[serde(default)]
    pub agent_id: Option<String>,
    /// Messages of this session only.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Memories created, and messages written, at or after this time.
    #[serde(default)]
    pub after: Option<DateTime<Utc>>,
    /// Memories created, and messages written, before this time.
    #[serde(default)]
    pub before: Option<DateTime<Utc>>,
}

/// Body of `POST /api/recall`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RecallRequest {
    /// A question or keywords (1 to 1000 characters).
    #[schema(min_length = 1, max_length = 1000, pattern = r"\S")]
    pub query: String,
    /// Kinds to search (default all): `memory`, `message`, `note`, `task`.
    #[serde(default)]
    #[schema(min_items = 1)]
    pub kinds: Option<Vec<Kind>>,
    /// Hits to return (1 to 50, default 10).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 50)]
    pub limit: Option<u32>,
    /// `keyword`, `semantic` or `hybrid` for memories, messages and task history; default
    /// `hybrid` with an embedder, else `keyword`. Notes are ranked by words in every mode.
    #[serde(default)]
    pub mode: Option<SearchMode>,
    #[serde(default)]
    pub filters: Option<RecallFilters>,
}

/// One thing recalled, with how to read more of it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RecallHit {
    pub kind: Kind,
    /// Reciprocal-rank score across kinds; higher is better.
    pub score: f32,
    /// Place within its kind (1 = best).
    pub kind_rank: u32,
    /// The matching text (matched words in `**bold**` where the words matched).
    pub snippet: String,
    /// Memories: the key, and the `[MemoryRef: …]` placeholder to put in a context.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placeholder: Option<String>,
    /// Memories: the matching chunk's lines (`GET /api/memories/{key}?line_start=…`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line_start: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line_end: Option<i64>,
    /// Messages: the session and message (`GET /api/chat/sessions/{session_id}/messages`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// Messages: who wrote it, and when.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sender: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<DateTime<Utc>>,
    /// Notes and messages: the agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Notes: the section's heading (`## Preferences`), none for text before the first heading
    /// (read it with the `read_section` operation).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    /// Task history: the task, where the text sits (`message`, `event`, `step_text`,
    /// `tool_result`, `snapshot`), its seq and step id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_id: Option<Uuid>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_id: Option<String>,
}

impl RecallHit {
    fn new(kind: Kind, snippet: String) -> Self {
        RecallHit {
            kind,
            score: 0.0,
            kind_rank: 0,
            snippet,
            memory_key: None,
            placeholder: None,
            line_start: None,
            line_end: None,
            session_id: None,
            message_id: None,
            sender: None,
            timestamp: None,
            agent_id: None,
            header: None,
            task_id: None,
            source: None,
            seq: None,
            step_id: None,
        }
    }
}

/// Answer of `POST /api/recall`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RecallResults {
    /// The mode memories and messages were ranked in.
    pub mode: SearchMode,
    /// True when the embedder failed and only keyword results are served.
    pub degraded: bool,
    pub hits: Vec<RecallHit>,
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(recall))
}

/// Recall across every kind of memory.
///
/// One ranked list over detail memories (`memory`), conversation messages (`message`),
/// long-term notes by section (`note`) and task history (`task`). Each kind is ranked as its
/// own search route ranks it; the lists are merged by reciprocal rank. Each hit says its kind,
/// its ids and how to read more: the `[MemoryRef: …]` placeholder and lines, the session and
/// message, the note's agent and section heading, the task and where in it.
#[utoipa::path(post, path = "/api/recall", tag = "recall",
    request_body = RecallRequest,
    responses(
        (status = 200, description = "Hits, best first", body = RecallResults),
        (status = 422, description = "Empty or over-long query, bad kind, mode or filter (`field` names it)", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn recall(
    State(state): State<AppState>,
    caller: Reader,
    Json(request): Json<RecallRequest>,
) -> ApiResult<axum::Json<RecallResults>> {
    TextQuery::parse("query", &request.query)?;
    let corpora = corpora(request.kinds.as_deref().unwrap_or(&ALL_KINDS));
    let (mode, vector) =
        crate::search::prepare(&state, &caller, &corpora, request.mode, &request.query).await?;
    let mut tx = caller.begin().await?;
    let results = recall_in(
        &mut tx,
        &request,
        state.config.conversations.history_retention_days,
        mode,
        vector.as_ref(),
        &Exclude::default(),
    )
    .await?;
    tx.end_read_only();
    Ok(axum::Json(results))
}

/// The texts of `kinds` whose frequent names the query's embedding leaves out (see
/// [`crate::search::names`]): memory chunks and conversation messages. Notes are ranked by
/// words only, and task history keeps the query as written.
pub fn corpora(kinds: &[Kind]) -> Vec<&'static Corpus> {
    let mut corpora = Vec::new();
    if kinds.contains(&Kind::Memory) {
        corpora.push(&crate::memories::CHUNKS_CORPUS);
    }
    if kinds.contains(&Kind::Message) {
        corpora.push(&crate::conversations::search::MESSAGES_CORPUS);
    }
    corpora
}

/// What a recall leaves out (the chat context leaves out what its window already holds).
#[derive(Debug, Default)]
pub struct Exclude {
    /// Messages `(session_id, message_id)` not to return.
    pub messages: Vec<(String, String)>,
}

/// Runs a recall in the caller's transaction.
pub async fn recall_in(
    conn: &mut Scoped,
    request: &RecallRequest,
    retention_days: Option<u32>,
    mode: SearchMode,
    vector: Option<&QueryVector>,
    exclude: &Exclude,
) -> ApiResult<RecallResults> {
    let text = TextQuery::parse("query", &request.query)?;
    let limit = request.limit.unwrap_or(10);
    if limit == 0 || limit > 50 {
        return Err(ApiError::invalid("limit", "`limit` must be 1 to 50"));
    }
    let kinds = match &request.kinds {
        Some(kinds) if kinds.is_empty() => {
            return Err(ApiError::invalid(
                "kinds",
                "`kinds` must name at least one kind",
            ));
        }
        Some(kinds) => kinds.clone(),
        None => ALL_KINDS.to_vec(),
    };
    let filters = request.filters.clone().unwrap_or_default();
    // Each kind contributes up to `limit` hits, plus room for what is excluded.
    let per_kind = limit
        + u32::try_from(exclude.messages.len())
            .unwrap_or(u32::MAX)
            .min(50);
    let mut lists: Vec<Vec<RecallHit>> = Vec::new();
    let mut degraded = false;
    if kinds.contains(&Kind::Memory) {
        let search = SearchRequest {
            query: request.query.clone(),
            limit: Some(limit),
            mode: Some(mode),
            filters: Some(SearchFilters {
                agent_id: filters.agent_id.clone(),
                created_after: filters.after,
                created_before: filters.before,
                ..SearchFilters::default()
            }),
        };
        let found = crate::memories::store::search_memory(conn, &search, mode, vector).await?;
        degraded |= found.degraded;
        lists.push(
            found
                .hits
                .into_iter()
                .map(|h| {
                    let mut hit = RecallHit::new(Kind::Memory, h.snippet);
                    hit.memory_key = Some(h.memory_key);
                    hit.placeholder = Some(h.placeholder);
                    hit.line_start = h.line_start;
                    hit.line_end = h.line_end;
                    hit.agent_id = h.agent_id;
                    hit
                })
                .collect(),
        );
    }
    if kinds.contains(&Kind::Message) {
        let search = ChatSearchRequest {
            query: request.query.clone(),
            session_id: filters.session_id.clone(),
            agent_id: filters.agent_id.clone(),
            after: filters.after,
            before: filters.before,
            limit: Some(per_kind.min(100)),
            mode: Some(mode),
        };
        let retention = retention_days.and_then(|d| i32::try_from(d).ok());
        let found = search_messages(conn, &search, retention, mode, vector).await?;
        degraded |= found.degraded;
        lists.push(
            found
                .hits
                .into_iter()
                .filter(|h| {
                    !exclude
                        .messages
                        .iter()
                        .any(|(s, m)| *s == h.session_id && *m == h.message_id)
                })
                .take(limit as usize)
                .map(|h| {
                    let mut hit = RecallHit::new(Kind::Message, h.snippet);
                    hit.session_id = Some(h.session_id);
                    hit.message_id = Some(h.message_id);
                    hit.sender = Some(h.sender);
                    hit.timestamp = Some(h.timestamp);
                    hit.agent_id = Some(h.agent_id);
                    hit
                })
                .collect(),
        );
    }
    if kinds.contains(&Kind::Note) {
        lists.push(note_sections(conn, &text, filters.agent_id.as_deref(), limit).await?);
    }
    if kinds.contains(&Kind::Task) {
        let found = crate::tasks::workspace::search::search(
            conn,
            None,
            &request.query,
            (0, i64::from(limit)),
            mode,
            vector,
        )
        .await?;
        degraded |= found.degraded;
        lists.push(
            found
                .hits
                .into_iter()
                .map(|h| {
                    let snippet = h.snippet.replace(['«', '»'], "**");
                    let mut hit = RecallHit::new(Kind::Task, snippet);
                    hit.task_id = Some(h.task_id);
                    hit.source = serde_json::to_value(h.source)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned));
                    hit.seq = Some(h.seq);
                    hit.step_id = h.step_id;
                    hit
                })
                .collect(),
        );
    }
    Ok(RecallResults {
        mode: if degraded { SearchMode::Keyword } else { mode },
        degraded,
        hits: merge(lists, limit as usize),
    })
}

/// Merges per-kind lists (each best first) by reciprocal rank; ties keep kind order.
fn merge(lists: Vec<Vec<RecallHit>>, limit: usize) -> Vec<RecallHit> {
    let mut all: Vec<RecallHit> = lists
        .into_iter()
        .flat_map(|list| {
            list.into_iter().enumerate().map(|(i, mut hit)| {
                let rank = u32::try_from(i + 1).unwrap_or(u32::MAX);
                hit.kind_rank = rank;
                hit.score = 1.0 / (RRF_K + rank as f32);
                hit
            })
        })
        .collect();
    all.sort_by(|a, b| b.score.total_cmp(&a.score));
    all.truncate(limit);
    all
}

struct NotesRow {
    agent_name: String,
    notes: String,
}

#[derive(sqlx::FromRow)]
struct RankedPiece {
    ord: i64,
    snippet: String,
}

/// The caller's note sections (each heading with the text up to the next heading), ranked by
/// the shared keyword ranking.
async fn note_sections(
    conn: &mut Scoped,
    text: &TextQuery,
    agent: Option<&str>,
    limit: u32,
) -> ApiResult<Vec<RecallHit>> {
    let rows = sqlx::query_as!(
        NotesRow,
        "SELECT agent_name, notes FROM agent_long_term_memory
         WHERE tenant_id = current_setting('mnemo.tenant')
           AND user_id = current_setting('mnemo.user')
           AND version > 0 AND ($1::text IS NULL OR agent_name = $1)",
        agent
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut pieces: Vec<(String, Option<String>, String)> = Vec::new();
    for row in rows {
        let headings = crate::notes::sections::headings(&row.notes);
        let mut starts: Vec<(usize, Option<String>)> = Vec::new();
        if headings.first().is_none_or(|h| h.start > 0) {
            starts.push((0, None));
        }
        starts.extend(headings.iter().map(|h| (h.start, Some(h.display()))));
        for (i, (start, header)) in starts.iter().enumerate() {
            let end = starts.get(i + 1).map_or(row.notes.len(), |s| s.0);
            let body = row.notes.get(*start..end).unwrap_or_default();
            if !body.trim().is_empty() {
                pieces.push((row.agent_name.clone(), header.clone(), body.to_owned()));
            }
        }
    }
    if pieces.is_empty() {
        return Ok(Vec::new());
    }
    let texts: Vec<&str> = pieces.iter().map(|p| p.2.as_str()).collect();
    // Not a macro: it is assembled from the query CTE and the ranking every search shares.
    let ranking = idf_ranking("ord", "SELECT cardinality($3::text[])");
    let sql = format!(
        "WITH {QUERY_CTE}, hits AS MATERIALIZED (
             SELECT u.ord, mnemo_memory_tsv(u.body) AS tsv
             FROM unnest($3::text[]) WITH ORDINALITY AS u(body, ord), q
             WHERE numnode(q.pos) > 0 AND mnemo_memory_tsv(u.body) @@ q.q
         ), {ranking}
         SELECT s.ord, ts_headline('english', mnemo_memory_search_text(u.body), q.q,
                    'StartSel=\"**\", StopSel=\"**\", MaxWords=35, MinWords=12') AS snippet
         FROM scored s
         JOIN unnest($3::text[]) WITH ORDINALITY AS u(body, ord) ON u.ord = s.ord
         CROSS JOIN q
         ORDER BY s.score DESC, s.ord
         LIMIT $4"
    );
    let ranked = sqlx::query_as::<_, RankedPiece>(&sql)
        .bind(&text.any)
        .bind(&text.none)
        .bind(&texts)
        .bind(i64::from(limit))
        .fetch_all(&mut *conn)
        .await?;
    Ok(ranked
        .into_iter()
        .filter_map(|r| {
            let (agent, header, _) = pieces.get(usize::try_from(r.ord - 1).ok()?)?;
            let mut hit = RecallHit::new(Kind::Note, r.snippet);
            hit.agent_id = Some(agent.clone());
            hit.header = header.clone();
            Some(hit)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_counted_in_the_memories_and_messages_searched() {
        let kinds = |k: &[Kind]| -> Vec<&str> { corpora(k).iter().map(|c| c.kind).collect() };
        assert_eq!(kinds(&ALL_KINDS), ["chunks", "messages"]);
        assert_eq!(kinds(&[Kind::Message]), ["messages"]);
        assert_eq!(kinds(&[Kind::Task, Kind::Memory]), ["chunks"]);
        assert!(kinds(&[Kind::Note, Kind::Task]).is_empty());
    }

    #[test]
    fn kinds_merge_by_reciprocal_rank() {
        let list = |kind: Kind, n: usize| -> Vec<RecallHit> {
            (0..n)
                .map(|i| RecallHit::new(kind, format!("{kind:?} {i}")))
                .collect()
        };
        let merged = merge(vec![list(Kind::Memory, 3), list(Kind::Note, 1)], 3);
        assert_eq!(merged.len(), 3);
        // The two first places tie; the kind listed first stays first.
        assert_eq!((merged[0].kind, merged[0].kind_rank), (Kind::Memory, 1));
        assert_eq!((merged[1].kind, merged[1].kind_rank), (Kind::Note, 1));
        assert_eq!((merged[2].kind, merged[2].kind_rank), (Kind::Memory, 2));
        assert!(merged[0].score > merged[2].score);
    }
}
