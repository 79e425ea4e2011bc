//! Search over memory summaries and content chunks: keyword, semantic or both. [`search_memory`] is the agent tool
//! `search_memory`.

mod sides;

pub(crate) use sides::CHUNKS_CORPUS;

use std::collections::HashMap;

use serde_json::Value;
use uuid::Uuid;

use super::model::{NextPage, SearchFilters, SearchHit, SearchRequest, SearchResults};
use super::placeholder;
use super::store::check_metadata;
use crate::db::Scoped;
use crate::error::{ApiError, ApiResult};
use crate::search::fusion::{LIFTS, Stream};
use crate::search::fusion::{candidates, set_crowding, words_weight};
use crate::search::when::tells_time;
use crate::search::{
    QueryVector, SearchMode, TextQuery, follow_weight, fuse, lift_by_neighbours, liftable,
};
use sides::{Filters, Scored, keyword_candidates, keyword_ranking, vector_candidates};

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

#[derive(sqlx::FromRow)]
struct Shown {
    memory_key: String,
    summary: String,
    memory_type: String,
    agent_id: Option<String>,
    thread_id: Option<String>,
    byte_start: Option<i64>,
    byte_len: Option<i32>,
    line_start: Option<i64>,
    line_end: Option<i64>,
    chunk: Option<String>,
    snippet: String,
}

/// The memory written just before and just after each of `ids` in the same agent and thread
/// (by creation time), whether it only asks (a memory of one chunk whose text is only
/// questions) and whether the one before it ends with a question (a memory of one chunk too),
/// and, when the search `asks_when`, whether each says when (its chunk at
/// `starts`, the one the hit shows, or its summary when that is the hit, is read for
/// [`tells_time`] only then), for [`lift_by_neighbours`]. Three index probes per memory: the
/// memory, and the one before and the one after it in its stream.
async fn neighbours(
    conn: &mut Scoped,
    ids: &[Uuid],
    starts: &[Option<i64>],
    asks_when: bool,
) -> ApiResult<HashMap<Uuid, Stream<Uuid>>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    // Whether a memory asks, and whether the one before it ends asking, are stored with it when
    // it is written (`asks`, `ends_asking`); a memory written before they were is read from its
    // chunk here instead. The fallback is said in the statement rather than through a SQL
    // function taking the memory: PostgreSQL never inlines a function holding a sub-select, and
    // such calls cost 1 to 2 ms of PostgreSQL per hybrid search on the evaluation.
    let rows = sqlx::query!(
        r#"SELECT m.id, p.id AS "previous?", coalesce(p.ends_asking, false) AS "follows_question!",
                n.id AS "next?",
                coalesce(m.asks,
                         (SELECT mnemo_only_asks(c.content) FROM agent_memory_chunks c
                          WHERE c.tenant_id = m.tenant_id AND c.user_id = m.user_id
                            AND c.memory_id = m.id AND m.chunk_count = 1), false) AS "asks!",
                CASE WHEN $3 THEN coalesce(
                    (SELECT c.content FROM agent_memory_chunks c
                     WHERE c.tenant_id = m.tenant_id AND c.user_id = m.user_id
                       AND c.memory_id = m.id AND c.byte_start = k.byte_start),
                    m.summary) END AS "text?"
         FROM (SELECT DISTINCT ON (id) id, byte_start
               FROM unnest($1::uuid[], $2::int8[]) AS u(id, byte_start)) AS k
         -- One index probe per memory, in every plan (see the conversation search's
         -- `neighbours`), through the primary key whoever asks (the scope through sub-selects,
         -- see `scope_unseen`).
         CROSS JOIN LATERAL (
             SELECT * FROM agent_memories m
             WHERE m.tenant_id = (SELECT current_setting('mnemo.tenant'))
               AND m.user_id = (SELECT current_setting('mnemo.user')) AND m.id = k.id
             LIMIT 1
         ) m
         LEFT JOIN LATERAL (
             SELECT p.id,
                    coalesce(p.ends_asking,
                             (SELECT mnemo_ends_asking(c.content) FROM agent_memory_chunks c
                              WHERE c.tenant_id = p.tenant_id AND c.user_id = p.user_id
                                AND c.memory_id = p.id AND p.chunk_count = 1)) AS ends_asking
             FROM agent_memories p
             WHERE p.tenant_id = m.tenant_id AND p.user_id = m.user_id
               AND mnemo_same_stream(p.agent_id, p.thread_id, m.agent_id, m.thread_id)
               AND (p.created_at, p.id) < (m.created_at, m.id)
             ORDER BY p.created_at DESC, p.id DESC LIMIT 1
         ) p ON true
         LEFT JOIN LATERAL (
             SELECT n.id FROM agent_memories n
             WHERE n.tenant_id = m.tenant_id AND n.user_id = m.user_id
               AND mnemo_same_stream(n.agent_id, n.thread_id, m.agent_id, m.thread_id)
               AND (n.created_at, n.id) > (m.created_at, m.id)
             ORDER BY n.created_at, n.id LIMIT 1
         ) n ON true"#,
        ids,
        starts as &[Option<i64>],
        asks_when
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let stream = Stream {
                previous: row.previous,
                follows_question: row.follows_question,
                next: row.next,
                asks: row.asks,
                tells_time: row.text.as_deref().is_some_and(tells_time),
            };
            (row.id, stream)
        })
        .collect())
}

/// Agent tool `search_memory`: ranked search over the caller's memories, each memory at most
/// once, at its best chunk. `keyword` ORs the query's words (see [`TextQuery`]) and ranks
/// summaries and content chunks by the weights of the terms they hold (see
/// [`crate::search::query::idf_ranking`]); `semantic` ranks chunks by cosine similarity
/// to `vector`; `hybrid` fuses both (see [`crate::search::fusion`]). A content hit names the
/// chunk's line and byte range and the first line in it holding a matched word.
pub async fn search_memory(
    conn: &mut Scoped,
    request: &SearchRequest,
    mode: SearchMode,
    vector: Option<&QueryVector>,
) -> ApiResult<SearchResults> {
    let text = TextQuery::parse("query", &request.query)?;
    let limit = request.limit.unwrap_or(10);
    if limit == 0 || limit > 100 {
        return Err(ApiError::invalid("limit", "`limit` must be 1 to 100"));
    }
    let default_filters = SearchFilters::default();
    let f = request.filters.as_ref().unwrap_or(&default_filters);
    if let Some(metadata) = &f.metadata {
        check_metadata("filters.metadata", metadata)?;
    }
    // Checked as PostgreSQL checks a bound date, since a search with nothing to rank answers
    // before any statement binds them.
    crate::error::check_storable_time("filters.created_after", f.created_after)?;
    crate::error::check_storable_time("filters.created_before", f.created_before)?;
    let filters = Filters {
        include_inactive: f.include_inactive,
        agent_id: f.agent_id.clone(),
        thread_id: f.thread_id.clone(),
        memory_type: f.memory_type.clone(),
        created_after: f.created_after,
        created_before: f.created_before,
        metadata: f.metadata.clone().map(Value::Object),
    };
    // Without a query vector (no embedder, or it failed) only the keyword side runs.
    let vector = vector.filter(|_| mode.semantic());
    let degraded = mode.semantic() && vector.is_none();
    let keyword_side = mode.keyword() || degraded;
    // The mode that ranks the hits: by words when the vector is missing.
    let answered = if degraded { SearchMode::Keyword } else { mode };
    crate::search::begin_search(conn, crate::search::words_only(mode, vector)).await?;
    // The keyword side's ranking is chosen first: its count of the caller's chunks also tells
    // when there is no memory to search, and then no other statement runs (a chat's recall asks
    // every caller, and most chat users store no memory).
    let ranking = if keyword_side {
        let Some(ranking) = keyword_ranking(conn, &text).await? else {
            return Ok(SearchResults {
                mode: answered,
                degraded,
                hits: Vec::new(),
                has_more: false,
                words_weight: None,
            });
        };
        Some(ranking)
    } else {
        None
    };

    // Each side's candidates are scored on the other side too, so that fusion compares whole
    // scores rather than a score against a missing one: the nearest first, then the keyword
    // ranking with the keyword scores of those, then the similarity of the keyword candidates
    // the vector side did not bring.
    let mut near: Vec<Scored> = Vec::new();
    if let Some(vector) = vector {
        near = vector_candidates(conn, vector, &filters, None).await?;
    }
    let mut keyword: Vec<Scored> = Vec::new();
    if let Some(ranking) = ranking {
        let also: Vec<Uuid> = near.iter().map(|n| n.memory_id).collect();
        let also = (!also.is_empty()).then_some(also);
        let follow = follow_weight(vector.is_none(), &text);
        keyword =
            keyword_candidates(conn, ranking, &text, &filters, also.as_deref(), follow).await?;
    }
    if let Some(vector) = vector.filter(|_| keyword_side) {
        let missing: Vec<Uuid> = keyword
            .iter()
            .map(|k| k.memory_id)
            .filter(|id| !near.iter().any(|n| n.memory_id == *id))
            .collect();
        if !missing.is_empty() {
            near.extend(vector_candidates(conn, vector, &filters, Some(&missing)).await?);
        }
    }

    let pairs = |side: &[Scored]| -> Vec<(Uuid, f32)> {
        side.iter().map(|s| (s.memory_id, s.score)).collect()
    };
    let mut candidates = candidates(&pairs(&keyword), &pairs(&near));
    set_crowding(
        &mut candidates,
        near.iter().map(|n| (n.memory_id, n.alone.as_ref())),
        vector.map_or(0.0, |v| v.crowd_weight),
    );
    let query_weight = keyword.iter().find_map(|k| k.query_weight);
    let words_weight = words_weight(&candidates, query_weight);
    let mut ranked = fuse(
        candidates,
        vector.map_or(crate::search::fusion::KEYWORD_WEIGHT, |v| v.keyword_weight),
        query_weight,
    );
    // Where the chunk each candidate shows starts: the keyword side's best when the words
    // matched, else the closest; None for a summary.
    let mut shown_starts: HashMap<Uuid, Option<i64>> = HashMap::with_capacity(ranked.len());
    for side in keyword.iter().chain(&near) {
        shown_starts
            .entry(side.memory_id)
            .or_insert(side.byte_start);
    }
    let shown_start = |id: &Uuid| shown_starts.get(id).copied().flatten();
    let lifts = LIFTS.for_query(&text);
    let lifted = liftable(&ranked, limit as usize, lifts);
    let ids: Vec<Uuid> = ranked[..lifted].iter().map(|r| r.id).collect();
    let starts: Vec<Option<i64>> = ids.iter().map(shown_start).collect();
    // Nothing found, nothing looked up by key: no plans to make either.
    if !ranked.is_empty() && conn.history_size(CHUNKS_CORPUS.kind).is_some() {
        crate::search::plan_lookups_per_call(conn).await?;
    }
    let neighbours = neighbours(conn, &ids, &starts, text.asks_when).await?;
    lift_by_neighbours(&mut ranked, &neighbours, lifts);
    let has_more = ranked.len() > limit as usize;
    ranked.truncate(limit as usize);

    let mut ids = Vec::with_capacity(ranked.len());
    let mut starts = Vec::with_capacity(ranked.len());
    let mut highlight = Vec::with_capacity(ranked.len());
    for hit in &ranked {
        ids.push(hit.id);
        starts.push(shown_start(&hit.id));
        highlight.push(keyword.iter().any(|k| k.memory_id == hit.id));
    }
    let options = format!(
        "StartSel=\"{START_SEL}\", StopSel=\"{STOP_SEL}\", MaxWords=35, MinWords=12, \
         MaxFragments=2, FragmentDelimiter=\" … \""
    );
    // Nothing found, nothing to render.
    let shown = if ranked.is_empty() {
        Vec::new()
    } else {
        sqlx::query_as!(
            Shown,
            r#"WITH q AS (
             SELECT websearch_to_tsquery('english', mnemo_memory_search_text($1)) AS q
         )
         SELECT m.memory_key, m.summary, m.memory_type, m.agent_id, m.thread_id,
                c.byte_start AS "byte_start?", c.byte_len AS "byte_len?",
                c.line_start AS "line_start?", c.line_end AS "line_end?", c.content AS "chunk?",
                CASE WHEN NOT u.highlight
                          THEN left(coalesce(c.content, m.summary), 300)
                     WHEN c.content IS NOT NULL
                          THEN ts_headline('english', mnemo_memory_search_text(c.content), q.q, $5)
                     ELSE ts_headline('english', mnemo_memory_search_text(m.summary), q.q, $5)
                END AS "snippet!"
         FROM unnest($2::uuid[], $3::int8[], $4::bool[]) WITH ORDINALITY
                  AS u(id, byte_start, highlight, ord)
         CROSS JOIN q
         -- One index probe per hit, in every plan (see the conversation search's `neighbours`),
         -- through the primary key whoever asks (see `scope_unseen`).
         CROSS JOIN LATERAL (
             SELECT * FROM agent_memories m
             WHERE m.tenant_id = (SELECT current_setting('mnemo.tenant'))
               AND m.user_id = (SELECT current_setting('mnemo.user')) AND m.id = u.id
             LIMIT 1
         ) m
         LEFT JOIN LATERAL (
             SELECT * FROM agent_memory_chunks c
             WHERE c.tenant_id = current_setting('mnemo.tenant')
               AND c.user_id = current_setting('mnemo.user')
               AND c.memory_id = u.id AND c.byte_start = u.byte_start
             LIMIT 1
         ) c ON true
         ORDER BY u.ord"#,
            text.any,
            &ids,
            // A summary hit has no chunk: NULL elements, which the macro's array check does not admit.
            &starts as &[Option<i64>],
            &highlight,
            options
        )
        .fetch_all(&mut *conn)
        .await?
    };

    let hits = ranked
        .iter()
        .zip(shown)
        .map(|(rank, r)| {
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
                matched: if r.byte_start.is_some() {
                    "content".into()
                } else {
                    "summary".into()
                },
                snippet: r.snippet,
                score: rank.score,
                keyword_rank: rank.keyword_rank,
                vector_rank: rank.vector_rank,
                similarity: rank.similarity,
                line_start: r.line_start,
                line_end: r.line_end,
                byte_start: r.byte_start,
                byte_end: r.byte_start.zip(r.byte_len).map(|(s, l)| s + i64::from(l)),
                match_line,
                retrieve,
            }
        })
        .collect();
    Ok(SearchResults {
        mode: answered,
        degraded,
        hits,
        has_more,
        words_weight,
    })
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
