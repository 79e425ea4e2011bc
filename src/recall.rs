//! `POST /api/recall`: one ranked list across every kind of memory the caller has — detail
//! memories, conversation messages, long-term notes (by section) and task history.
//!
//! Each kind is searched with its own route's ranking (memories, messages and task history by
//! words, meaning or both; note sections by words), and the kinds' lists are merged by score.
//! Memories, messages and task history share one scale in a semantic or hybrid search: the
//! similarity to the question, or `w · share + (1 − w) · similarity`, where the share is the part
//! of the question's word weight a text holds (see [`crate::search::fuse`]), plus the same lifts.
//! By words alone a kind's scores are sums of term weights over its own corpus; divided by what a
//! text holding every word would score, they become shares, comparable across kinds. A note
//! section, ranked by words only, scores its share; beside kinds ranked by meaning it counts as
//! as close in meaning as their average hit, as a memory not embedded yet does in its own search.
//!
//! Merging by reciprocal rank instead (`1 / (60 + rank within its kind)`) gave every kind's first
//! hit the same place whatever it scored: a list of ten became the best five of two kinds. On the
//! project's retrieval evaluation with a conversation's sessions stored half as memories and
//! half as chat messages (`scripts/eval --mixed`), merging by score found more (see the README).

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
    /// Score, comparable across kinds; higher is better. A hybrid hit's fused score, a semantic
    /// hit's similarity (both as its own search route reports them), or, ranked by words alone,
    /// the share of the question's word weight the text holds; each with its route's lifts.
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
/// own search route ranks it, and the lists are merged by score: a hybrid hit's fused score, a
/// semantic hit's similarity, and by words alone the share of the question's word weight a text
/// holds, so one kind's weak hits do not push out another's strong ones. Each hit says its kind,
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
    // A kind with nothing to search sends no statement, and so not the time filters either:
    // checked here as PostgreSQL would check them.
    crate::error::check_storable_time("filters.after", filters.after)?;
    crate::error::check_storable_time("filters.before", filters.before)?;
    let mut lists: Vec<Vec<RecallHit>> = Vec::new();
    let mut degraded = false;
    // The similarities of the hits ranked by meaning, for the note sections' scores.
    let mut similarities: Vec<f32> = Vec::new();
    let mut notes: Vec<RecallHit> = Vec::new();
    let mut notes_at = 0;
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
        let scale = Scale::of(found.words_weight);
        similarities.extend(found.hits.iter().filter_map(|h| h.similarity));
        lists.push(
            found
                .hits
                .into_iter()
                .map(|h| {
                    let mut hit = RecallHit::new(Kind::Memory, h.snippet);
                    hit.score = scale.apply(h.score);
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
            // Each kind contributes up to `limit` hits; the message search itself looks past
            // the excluded ones.
            limit: Some(limit),
            mode: Some(mode),
        };
        let retention = retention_days.and_then(|d| i32::try_from(d).ok());
        let found =
            search_messages(conn, &search, retention, mode, vector, &exclude.messages).await?;
        degraded |= found.degraded;
        let scale = Scale::of(found.words_weight);
        similarities.extend(found.hits.iter().filter_map(|h| h.similarity));
        lists.push(
            found
                .hits
                .into_iter()
                .map(|h| {
                    let mut hit = RecallHit::new(Kind::Message, h.snippet);
                    hit.score = scale.apply(h.score);
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
        notes = note_sections(conn, &text, filters.agent_id.as_deref(), limit).await?;
        notes_at = lists.len();
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
        let scale = Scale::of(found.words_weight);
        similarities.extend(found.hits.iter().filter_map(|h| h.similarity));
        lists.push(
            found
                .hits
                .into_iter()
                .map(|h| {
                    let snippet = h.snippet.replace(['«', '»'], "**");
                    let mut hit = RecallHit::new(Kind::Task, snippet);
                    hit.score = scale.apply(h.rank);
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
    if !notes.is_empty() {
        let keyword_weight =
            vector.map_or(crate::search::fusion::KEYWORD_WEIGHT, |v| v.keyword_weight);
        score_notes(&mut notes, &similarities, keyword_weight);
        // In their place among the kinds, for ties.
        lists.insert(notes_at, notes);
    }
    Ok(RecallResults {
        mode: if degraded { SearchMode::Keyword } else { mode },
        degraded,
        hits: merge(lists, limit as usize),
    })
}

/// How a kind's scores become comparable with the other kinds': ranked by words alone (keyword
/// mode, a degraded search, or texts not embedded yet), divided by what a text holding every
/// word of the question would score; else (similarities, fused scores) as they are.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Scale(Option<f32>);

impl Scale {
    /// `words_weight`: the search's, set only when words alone ranked it.
    fn of(words_weight: Option<f32>) -> Scale {
        Scale(words_weight.filter(|w| *w > 0.0))
    }

    fn apply(self, score: f32) -> f32 {
        self.0.map_or(score, |w| score / w)
    }
}

/// Scores note sections, whose `score` holds the share of the question's word weight each
/// holds: beside hits ranked by meaning (`similarities`), a section counts as close in meaning
/// as their average, fused with its share as a hybrid search fuses (`keyword_weight`); else its
/// share is its score.
fn score_notes(notes: &mut [RecallHit], similarities: &[f32], keyword_weight: f32) {
    if similarities.is_empty() {
        return;
    }
    let average = similarities.iter().sum::<f32>() / similarities.len() as f32;
    for note in notes {
        note.score = keyword_weight * note.score + (1.0 - keyword_weight) * average;
    }
}

/// Merges per-kind lists (each best first, scores comparable across kinds) into the best
/// `limit`, each hit with its place within its kind; equal scores keep the kinds' order.
fn merge(lists: Vec<Vec<RecallHit>>, limit: usize) -> Vec<RecallHit> {
    let mut all: Vec<RecallHit> = lists
        .into_iter()
        .flat_map(|list| {
            list.into_iter().enumerate().map(|(i, mut hit)| {
                hit.kind_rank = u32::try_from(i + 1).unwrap_or(u32::MAX);
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
    /// The share of the question's word weight the section holds.
    share: f32,
}

/// The caller's note sections (each heading with the text up to the next heading), ranked by
/// the shared keyword ranking, each scored by the share of the question's word weight it holds.
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
                    'StartSel=\"**\", StopSel=\"**\", MaxWords=35, MinWords=12') AS snippet,
                coalesce(s.score / nullif(greatest((SELECT weight FROM total), s.score), 0),
                         0)::real AS share
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
            hit.score = r.share;
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

    fn scored(kind: Kind, scores: &[f32]) -> Vec<RecallHit> {
        scores
            .iter()
            .enumerate()
            .map(|(i, score)| {
                let mut hit = RecallHit::new(kind, format!("{kind:?} {i}"));
                hit.score = *score;
                hit
            })
            .collect()
    }

    #[test]
    fn kinds_merge_by_score() {
        let merged = merge(
            vec![
                scored(Kind::Memory, &[0.9, 0.7, 0.4]),
                scored(Kind::Message, &[0.8, 0.3]),
                scored(Kind::Note, &[0.7]),
            ],
            4,
        );
        let places: Vec<(Kind, u32)> = merged.iter().map(|h| (h.kind, h.kind_rank)).collect();
        // Equal scores keep the kinds' order; the weaker second message is left out.
        assert_eq!(
            places,
            [
                (Kind::Memory, 1),
                (Kind::Message, 1),
                (Kind::Memory, 2),
                (Kind::Note, 1)
            ]
        );
    }

    #[test]
    fn scores_by_words_alone_become_shares_of_the_question() {
        assert_eq!(Scale::of(Some(4.0)).apply(3.0), 0.75);
        // Similarities and fused scores (no words weight) are comparable as they are; so is a
        // weight that cannot divide.
        assert_eq!(Scale::of(None).apply(0.6), 0.6);
        assert_eq!(Scale::of(Some(0.0)).apply(0.5), 0.5);
    }

    #[test]
    fn notes_beside_hits_by_meaning_count_as_their_average() {
        let mut notes = scored(Kind::Note, &[1.0, 0.5]);
        score_notes(&mut notes, &[], 0.3);
        assert_eq!((notes[0].score, notes[1].score), (1.0, 0.5));
        score_notes(&mut notes, &[0.6, 0.4], 0.3);
        assert!((notes[0].score - (0.3 + 0.7 * 0.5)).abs() < 1e-6);
        assert!((notes[1].score - (0.15 + 0.7 * 0.5)).abs() < 1e-6);
    }
}
