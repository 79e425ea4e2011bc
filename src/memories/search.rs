//! Full-text search over memory summaries and content chunks. [`search_memory`] is the agent tool
//! `search_memory`.

use serde_json::Value;
use sqlx::PgConnection;

use super::model::{NextPage, SearchFilters, SearchHit, SearchRequest, SearchResults};
use super::placeholder;
use super::store::check_metadata;
use crate::error::{ApiError, ApiResult};

#[derive(sqlx::FromRow)]
struct HitRow {
    memory_key: String,
    summary: String,
    memory_type: String,
    agent_id: Option<String>,
    thread_id: Option<String>,
    matched: String,
    score: f32,
    byte_start: Option<i64>,
    byte_len: Option<i32>,
    line_start: Option<i64>,
    line_end: Option<i64>,
    snippet: String,
    chunk: Option<String>,
}

/// Highlight markers of snippets.
const START_SEL: &str = "**";
const STOP_SEL: &str = "**";

/// Words `ts_headline` highlighted in `snippet`.
fn highlighted(snippet: &str) -> Vec<&str> {
    snippet
        .split(START_SEL)
        .skip(1)
        .step_by(2)
        .filter(|w| !w.is_empty())
        .collect()
}

/// Line number of the first line of `chunk` (starting at `line_start`) holding one of `words`.
fn first_line_with(chunk: &str, line_start: i64, words: &[&str]) -> Option<i64> {
    if words.is_empty() {
        return None;
    }
    let lowered: Vec<String> = words.iter().map(|w| w.to_lowercase()).collect();
    chunk
        .split('\n')
        .position(|line| {
            let line = line.to_lowercase();
            lowered.iter().any(|w| line.contains(w.as_str()))
        })
        .map(|i| line_start + i as i64)
}

/// Agent tool `search_memory`: full-text search (`websearch_to_tsquery`, English; slashes read as
/// spaces so path and URL segments are words) over summaries
/// and content chunks, best first. A content hit names the chunk's line and byte range and the
/// first line in it holding a matched word.
pub async fn search_memory(
    conn: &mut PgConnection,
    request: &SearchRequest,
) -> ApiResult<SearchResults> {
    let query = request.query.trim();
    if query.is_empty() {
        return Err(ApiError::invalid("query", "`query` must not be empty"));
    }
    if query.chars().count() > 1000 {
        return Err(ApiError::invalid(
            "query",
            "`query` is longer than 1000 characters",
        ));
    }
    let limit = request.limit.unwrap_or(10);
    if limit == 0 || limit > 100 {
        return Err(ApiError::invalid("limit", "`limit` must be 1 to 100"));
    }
    let default_filters = SearchFilters::default();
    let filters = request.filters.as_ref().unwrap_or(&default_filters);
    if let Some(metadata) = &filters.metadata {
        check_metadata("filters.metadata", metadata)?;
    }
    let metadata = filters.metadata.clone().map(Value::Object);
    let options = format!(
        "StartSel=\"{START_SEL}\", StopSel=\"{STOP_SEL}\", MaxWords=35, MinWords=12, \
         MaxFragments=2, FragmentDelimiter=\" … \""
    );
    let mut rows = sqlx::query_as::<_, HitRow>(
        "WITH mem AS (
             SELECT id, memory_key, summary, summary_tsv, memory_type, agent_id, thread_id
             FROM agent_memories
             WHERE tenant_id = current_setting('mnemo.tenant')
               AND user_id = current_setting('mnemo.user')
               AND ($2 OR is_active)
               AND ($3::text IS NULL OR agent_id = $3)
               AND ($4::text IS NULL OR thread_id = $4)
               AND ($5::text IS NULL OR memory_type = $5)
               AND ($6::timestamptz IS NULL OR created_at >= $6)
               AND ($7::timestamptz IS NULL OR created_at < $7)
               AND ($8::jsonb IS NULL OR content_metadata @> $8)
         ), hits AS (
             SELECT c.memory_id, 'content' AS matched, c.byte_start, c.byte_len,
                    ts_rank_cd(c.tsv, mnemo_memory_query($1)) AS score
             FROM agent_memory_chunks c
             WHERE c.tenant_id = current_setting('mnemo.tenant')
               AND c.user_id = current_setting('mnemo.user')
               AND c.tsv @@ mnemo_memory_query($1)
               AND c.memory_id IN (SELECT id FROM mem)
             UNION ALL
             SELECT mem.id, 'summary', NULL, NULL,
                    ts_rank_cd(mem.summary_tsv, mnemo_memory_query($1))
             FROM mem
             WHERE mem.summary_tsv @@ mnemo_memory_query($1)
         ), top AS (
             SELECT * FROM hits ORDER BY score DESC, memory_id DESC, byte_start NULLS FIRST
             LIMIT $9
         )
         SELECT mem.memory_key, mem.summary, mem.memory_type, mem.agent_id, mem.thread_id,
                top.matched, top.score, top.byte_start, top.byte_len,
                c.line_start, c.line_end, c.content AS chunk,
                CASE WHEN top.matched = 'content'
                     THEN ts_headline('english', mnemo_memory_search_text(c.content),
                                      mnemo_memory_query($1), $10)
                     ELSE ts_headline('english', mnemo_memory_search_text(mem.summary),
                                      mnemo_memory_query($1), $10)
                END AS snippet
         FROM top
         JOIN mem ON mem.id = top.memory_id
         LEFT JOIN agent_memory_chunks c
                ON c.tenant_id = current_setting('mnemo.tenant')
               AND c.user_id = current_setting('mnemo.user')
               AND c.memory_id = top.memory_id AND c.byte_start = top.byte_start
         ORDER BY top.score DESC, top.memory_id DESC, top.byte_start NULLS FIRST",
    )
    .bind(query)
    .bind(filters.include_inactive)
    .bind(&filters.agent_id)
    .bind(&filters.thread_id)
    .bind(&filters.memory_type)
    .bind(filters.created_after)
    .bind(filters.created_before)
    .bind(metadata)
    .bind(i64::from(limit) + 1)
    .bind(&options)
    .fetch_all(&mut *conn)
    .await?;
    let has_more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    let hits = rows
        .into_iter()
        .map(|r| {
            let match_line = match (&r.chunk, r.line_start) {
                (Some(chunk), Some(line_start)) => {
                    first_line_with(chunk, line_start, &highlighted(&r.snippet))
                }
                _ => None,
            };
            let retrieve = match (r.line_start, r.line_end) {
                (Some(start), Some(end)) => Some(NextPage {
                    offset: None,
                    limit: None,
                    line_start: Some(start as u64),
                    line_count: Some((end - start + 1) as u64),
                }),
                _ => None,
            };
            SearchHit {
                placeholder: placeholder::placeholder(&r.memory_key, &r.summary),
                memory_key: r.memory_key,
                summary: r.summary,
                memory_type: r.memory_type,
                agent_id: r.agent_id,
                thread_id: r.thread_id,
                matched: r.matched,
                snippet: r.snippet,
                score: r.score,
                line_start: r.line_start,
                line_end: r.line_end,
                byte_start: r.byte_start,
                byte_end: r.byte_start.zip(r.byte_len).map(|(s, l)| s + i64::from(l)),
                match_line,
                retrieve,
            }
        })
        .collect();
    Ok(SearchResults { hits, has_more })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn highlighted_words_and_their_line() {
        let snippet = "x **ERROR** y … **error** z";
        assert_eq!(highlighted(snippet), vec!["ERROR", "error"]);
        let chunk = "tail of line 9\nok\nsomething ERROR here\n";
        assert_eq!(first_line_with(chunk, 9, &highlighted(snippet)), Some(11));
        assert_eq!(first_line_with(chunk, 9, &[]), None);
    }
}
