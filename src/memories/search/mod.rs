//! Search over memory summaries and content chunks: keyword, semantic or both. [`search_memory`] is the agent tool
//! `search_memory`.

use std::collections::HashMap;

use serde_json::Value;
use uuid::Uuid;

use super::model::{NextPage, SearchFilters, SearchHit, SearchRequest, SearchResults};
use super::placeholder;
use super::store::check_metadata;
use crate::db::Scoped;
use crate::error::{ApiError, ApiResult};
use crate::search::fusion::candidates;
use crate::search::query::{
    KEYWORD_SAMPLE, QUERY_CTE, bounded_terms, idf_ranking, sample_terms, term_sample_sql,
};
use crate::search::{QueryVector, SearchMode, TextQuery, fuse, lift_by_neighbours};

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

/// A keyword or vector candidate: the memory and its best chunk (`None`: the summary matched).
#[derive(sqlx::FromRow)]
struct Scored {
    memory_id: Uuid,
    byte_start: Option<i64>,
    score: f32,
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

/// The filters of a search over memory `m`; binds $3..$9.
const FILTERS: &str = "($3 OR m.is_active)
       AND ($4::text IS NULL OR m.agent_id = $4)
       AND ($5::text IS NULL OR m.thread_id = $5)
       AND ($6::text IS NULL OR m.memory_type = $6)
       AND ($7::timestamptz IS NULL OR m.created_at >= $7)
       AND ($8::timestamptz IS NULL OR m.created_at < $8)
       AND ($9::jsonb IS NULL OR m.content_metadata @> $9)";

/// The caller's memories a search may see, as a CTE named `mem`: for the exact ranking, whose
/// caller has no more chunks than the sample.
fn memories() -> String {
    format!(
        "mem AS (
     SELECT m.id, m.summary_tsv FROM agent_memories m
     WHERE m.tenant_id = current_setting('mnemo.tenant')
       AND m.user_id = current_setting('mnemo.user')
       AND {FILTERS})"
    )
}

/// Whether the memory `id` (an SQL expression) passes the filters: one lookup by key per
/// candidate, so that a search over a long history never reads all of its memories. (`OFFSET 0`
/// keeps PostgreSQL from turning the test into a join, which it may plan as a hash of every
/// memory of the caller.)
fn admitted(id: &str) -> String {
    format!(
        "EXISTS (SELECT 1 FROM agent_memories m
                 WHERE m.tenant_id = current_setting('mnemo.tenant')
                   AND m.user_id = current_setting('mnemo.user') AND m.id = {id}
                   AND {FILTERS} OFFSET 0)"
    )
}

/// The end of both keyword statements, over a CTE `scored` (`memory_id`, `byte_start`, `score`):
/// a memory once, scored by its best hit and shown at its best content chunk when the content
/// matched (a chunk has a line range to read), else at its summary; the best `$11`, and also
/// those of the memories `$10` that matched (the other side's candidates, scored on this side in
/// the same statement).
const BEST: &str = "best AS (
             SELECT DISTINCT ON (memory_id) memory_id, byte_start,
                    max(score) OVER (PARTITION BY memory_id) AS score
             FROM scored
             ORDER BY memory_id, byte_start IS NULL, score DESC, byte_start
         ), ranked AS (
             SELECT memory_id, byte_start, score,
                    row_number() OVER (ORDER BY score DESC, memory_id DESC) AS place
             FROM best
         )
         SELECT memory_id, byte_start, score FROM ranked
         WHERE place <= $11 OR memory_id = ANY(coalesce($10::uuid[], '{}'))
         ORDER BY place";

/// Most candidates each side contributes before fusion.
const CANDIDATES: i64 = 100;

struct Filters {
    include_inactive: bool,
    agent_id: Option<String>,
    thread_id: Option<String>,
    memory_type: Option<String>,
    created_after: Option<chrono::DateTime<chrono::Utc>>,
    created_before: Option<chrono::DateTime<chrono::Utc>>,
    metadata: Option<Value>,
}

fn bind_filters<'q>(
    query: sqlx::query::QueryAs<'q, sqlx::Postgres, Scored, sqlx::postgres::PgArguments>,
    f: &'q Filters,
) -> sqlx::query::QueryAs<'q, sqlx::Postgres, Scored, sqlx::postgres::PgArguments> {
    query
        .bind(f.include_inactive)
        .bind(&f.agent_id)
        .bind(&f.thread_id)
        .bind(&f.memory_type)
        .bind(f.created_after)
        .bind(f.created_before)
        .bind(&f.metadata)
}

/// Keyword candidates: each matching memory once, at its best chunk or its summary, best first:
/// the best [`CANDIDATES`], and also those of `also` (the other side's candidates) that match.
///
/// The rank is [`idf_ranking`]'s: the idf sum of the query terms a text holds. As for messages,
/// the cost stays flat as the memories grow: a first statement counts the query's terms in the
/// chunks of the caller's newest memories ([`KEYWORD_SAMPLE`] chunks). When that is every
/// chunk, all matches are ranked exactly. Otherwise ([`bounded_terms`]) the candidates are the
/// texts holding a rare term (exact document frequency) and the matches among
/// the newest chunks and memory summaries; the common terms' frequencies are estimated from the
/// sample.
async fn keyword_candidates(
    conn: &mut Scoped,
    text: &TextQuery,
    filters: &Filters,
    also: Option<&[Uuid]>,
) -> ApiResult<Vec<Scored>> {
    let sample = term_sample_sql(
        "SELECT c.tsv FROM agent_memory_chunks c
         WHERE c.tenant_id = current_setting('mnemo.tenant')
           AND c.user_id = current_setting('mnemo.user')
         ORDER BY c.memory_id DESC, c.byte_start DESC",
        // Through the full-text index (see `mnemo_chunk_matches`).
        "SELECT 1 FROM mnemo_chunk_matches(t.tq, $4)",
        "SELECT count(*) FROM agent_memory_chunks c
         WHERE c.tenant_id = current_setting('mnemo.tenant')
           AND c.user_id = current_setting('mnemo.user')",
    );
    let terms = sample_terms(conn, &sample, text).await?;
    if terms.is_empty() {
        return Ok(Vec::new());
    }
    let Some(bounded) = bounded_terms(&terms) else {
        return exact_keyword_candidates(conn, text, filters, also).await;
    };
    let sql = format!(
        "WITH {QUERY_CTE}, terms AS (
             SELECT t.term, quote_literal(t.term)::tsquery AS tq, t.estimate
             FROM unnest($12::text[], $13::float8[]) AS t(term, estimate)
         ), rare_chunks AS MATERIALIZED (
             -- Every match of the rare terms, found through the full-text indexes.
             SELECT r.memory_id, r.byte_start, r.tsv
             FROM mnemo_chunk_matches($14::tsquery, NULL) r
             WHERE $14::tsquery IS NOT NULL
         ), rare_summaries AS MATERIALIZED (
             SELECT r.id, r.summary_tsv FROM mnemo_summary_matches($14::tsquery, NULL) r
             WHERE $14::tsquery IS NOT NULL
         ), recent_chunks AS (
             SELECT c.memory_id, c.byte_start, c.tsv FROM agent_memory_chunks c
             WHERE c.tenant_id = current_setting('mnemo.tenant')
               AND c.user_id = current_setting('mnemo.user')
             ORDER BY c.memory_id DESC, c.byte_start DESC LIMIT $15
         ), recent_summaries AS (
             SELECT m.id, m.summary_tsv FROM agent_memories m
             WHERE m.tenant_id = current_setting('mnemo.tenant')
               AND m.user_id = current_setting('mnemo.user')
             ORDER BY m.created_at DESC LIMIT $15
         ), also_chunks AS (
             -- The other side's candidates, scored however old.
             SELECT c.memory_id, c.byte_start, c.tsv FROM agent_memory_chunks c
             WHERE c.tenant_id = current_setting('mnemo.tenant')
               AND c.user_id = current_setting('mnemo.user')
               AND $10::uuid[] IS NOT NULL AND c.memory_id = ANY($10)
         ), also_summaries AS (
             SELECT m.id, m.summary_tsv FROM agent_memories m
             WHERE m.tenant_id = current_setting('mnemo.tenant')
               AND m.user_id = current_setting('mnemo.user')
               AND $10::uuid[] IS NOT NULL AND m.id = ANY($10)
         ), matched AS MATERIALIZED (
             SELECT c.memory_id, c.byte_start, c.tsv
             FROM (SELECT * FROM rare_chunks UNION SELECT * FROM recent_chunks
                   UNION SELECT * FROM also_chunks) c, q
             WHERE numnode(q.pos) > 0 AND c.tsv @@ q.q
             UNION ALL
             SELECT s.id, NULL, s.summary_tsv
             FROM (SELECT * FROM rare_summaries UNION SELECT * FROM recent_summaries
                   UNION SELECT * FROM also_summaries) s, q
             WHERE numnode(q.pos) > 0 AND s.summary_tsv @@ q.q
         ), hits AS MATERIALIZED (
             -- The filters, on the matches only.
             SELECT h.memory_id, h.byte_start, h.tsv FROM matched h WHERE {admitted}
         ), df AS MATERIALIZED (
             SELECT t.term,
                    coalesce(t.estimate,
                             (SELECT count(*) FROM rare_chunks r WHERE r.tsv @@ t.tq)
                             + (SELECT count(*) FROM rare_summaries r WHERE r.summary_tsv @@ t.tq))
                        AS n
             FROM terms t
         ), matches AS MATERIALIZED (
             SELECT h.memory_id, h.byte_start, t.term FROM hits h JOIN terms t ON h.tsv @@ t.tq
         ), scored AS (
             SELECT m.memory_id, m.byte_start,
                    sum(ln(1 + ($16::float8 - df.n + 0.5) / (df.n + 0.5)))::real AS score
             FROM matches m JOIN df USING (term)
             GROUP BY m.memory_id, m.byte_start
         ), {BEST}",
        admitted = admitted("h.memory_id"),
    );
    // Runtime-checked: composed from the ranking and filter SQL the searches share (`BEST`,
    // `FILTERS`, `admitted`); no value is spliced.
    let query = sqlx::query_as::<_, Scored>(&sql)
        .bind(&text.any)
        .bind(&text.none);
    let rows = bind_filters(query, filters)
        .bind(also)
        .bind(CANDIDATES)
        .bind(&bounded.names)
        .bind(&bounded.estimates)
        .bind(bounded.rare_query)
        .bind(KEYWORD_SAMPLE)
        .bind(bounded.corpus)
        .fetch_all(&mut *conn)
        .await?;
    Ok(rows)
}

/// Every match ranked, with document frequencies counted over the matches: the search of a
/// caller with no more chunks than the sample.
async fn exact_keyword_candidates(
    conn: &mut Scoped,
    text: &TextQuery,
    filters: &Filters,
    also: Option<&[Uuid]>,
) -> ApiResult<Vec<Scored>> {
    let ranking = idf_ranking(
        "memory_id, byte_start",
        "SELECT count(*) FROM agent_memory_chunks c
         WHERE c.tenant_id = current_setting('mnemo.tenant')
           AND c.user_id = current_setting('mnemo.user')",
    );
    let sql = format!(
        "WITH {QUERY_CTE}, {}, hits AS MATERIALIZED (
             SELECT c.memory_id, c.byte_start, c.tsv
             FROM agent_memory_chunks c, q
             WHERE c.tenant_id = current_setting('mnemo.tenant')
               AND c.user_id = current_setting('mnemo.user')
               AND numnode(q.pos) > 0 AND c.tsv @@ q.q
               AND c.memory_id IN (SELECT id FROM mem)
             UNION ALL
             SELECT mem.id, NULL, mem.summary_tsv
             FROM mem, q
             WHERE numnode(q.pos) > 0 AND mem.summary_tsv @@ q.q
         ), {ranking}, {BEST}",
        memories()
    );
    // Runtime-checked: composed from the ranking and filter SQL the searches share (`BEST`,
    // `FILTERS`, `admitted`); no value is spliced.
    let query = sqlx::query_as::<_, Scored>(&sql)
        .bind(&text.any)
        .bind(&text.none);
    let rows = bind_filters(query, filters)
        .bind(also)
        .bind(CANDIDATES)
        .fetch_all(&mut *conn)
        .await?;
    Ok(rows)
}

/// Vector candidates: the memories whose chunks are nearest the query, each once at its
/// closest chunk, closest first. With `only` set, the similarity of just those memories.
async fn vector_candidates(
    conn: &mut Scoped,
    vector: &QueryVector,
    filters: &Filters,
    only: Option<&[Uuid]>,
) -> ApiResult<Vec<Scored>> {
    let dims = vector.values.len();
    // The cast names the dimension so that the HNSW index on this model's vectors (an
    // expression index over `embedding::vector(dims)`) serves the ORDER BY. `dims` is the
    // embedder's, never the caller's.
    let distance = format!("(v.embedding::vector({dims}) <=> $1::vector({dims}))");
    let sql = format!(
        "WITH near AS (
             SELECT v.memory_id, v.byte_start, 1 - {distance} AS score
             FROM memory_vectors v
             WHERE v.tenant_id = current_setting('mnemo.tenant')
               AND v.user_id = current_setting('mnemo.user')
               AND v.model = $2
               AND {admitted}
               AND ($10::uuid[] IS NULL OR v.memory_id = ANY($10))
             ORDER BY {distance}
             LIMIT $11
         )
         SELECT DISTINCT ON (memory_id) memory_id, byte_start, score::real AS score FROM near
         ORDER BY memory_id, score DESC",
        admitted = admitted("v.memory_id")
    );
    // Runtime: it binds pgvector's `vector` and names the embedder's dimension in its text.
    let query = sqlx::query_as::<_, Scored>(&sql)
        .bind(pgvector::Vector::from(vector.values.clone()))
        .bind(&vector.model_id);
    let mut rows = bind_filters(query, filters)
        .bind(only)
        // Several chunks of one memory may be among the nearest.
        .bind(CANDIDATES * 3)
        .fetch_all(&mut *conn)
        .await?;
    rows.sort_by(|a, b| b.score.total_cmp(&a.score));
    rows.truncate(CANDIDATES as usize);
    Ok(rows)
}

/// Agent tool `search_memory`: ranked search over the caller's memories, each memory at most
/// once, at its best chunk. `keyword` ORs the query's words (see [`TextQuery`]) and ranks by
/// `ts_rank_cd` over summaries and content chunks; `semantic` ranks chunks by cosine similarity
/// to `vector`; `hybrid` fuses both (see [`crate::search::fusion`]). A content hit names the
/// chunk's line and byte range and the first line in it holding a matched word.
/// The memory written just before and just after each of `ids` in the same agent and thread
/// (by creation time), for [`lift_by_neighbours`]. Two index probes per memory.
async fn neighbours(
    conn: &mut Scoped,
    ids: &[Uuid],
) -> ApiResult<HashMap<Uuid, [Option<Uuid>; 2]>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = sqlx::query!(
        r#"SELECT m.id,
                (SELECT p.id FROM agent_memories p
                 WHERE p.tenant_id = m.tenant_id AND p.user_id = m.user_id
                   AND coalesce(p.agent_id, '') = coalesce(m.agent_id, '')
                   AND coalesce(p.thread_id, '') = coalesce(m.thread_id, '')
                   AND (p.created_at, p.id) < (m.created_at, m.id)
                 ORDER BY p.created_at DESC, p.id DESC LIMIT 1) AS "previous?",
                (SELECT n.id FROM agent_memories n
                 WHERE n.tenant_id = m.tenant_id AND n.user_id = m.user_id
                   AND coalesce(n.agent_id, '') = coalesce(m.agent_id, '')
                   AND coalesce(n.thread_id, '') = coalesce(m.thread_id, '')
                   AND (n.created_at, n.id) > (m.created_at, m.id)
                 ORDER BY n.created_at, n.id LIMIT 1) AS "next?"
         FROM agent_memories m
         WHERE m.tenant_id = current_setting('mnemo.tenant')
           AND m.user_id = current_setting('mnemo.user')
           AND m.id = ANY($1)"#,
        ids
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| (row.id, [row.previous, row.next]))
        .collect())
}

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
    crate::search::begin_search(conn).await?;

    // Each side's candidates are scored on the other side too, so that fusion compares whole
    // scores rather than a score against a missing one: the nearest first, then the keyword
    // ranking with the keyword scores of those, then the similarity of the keyword candidates
    // the vector side did not bring.
    let mut near: Vec<Scored> = Vec::new();
    if let Some(vector) = vector {
        near = vector_candidates(conn, vector, &filters, None).await?;
    }
    let mut keyword: Vec<Scored> = Vec::new();
    if keyword_side {
        let also: Vec<Uuid> = near.iter().map(|n| n.memory_id).collect();
        let also = (!also.is_empty()).then_some(also);
        keyword = keyword_candidates(conn, &text, &filters, also.as_deref()).await?;
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
    let candidates = candidates(&pairs(&keyword), &pairs(&near));
    let mut ranked = fuse(
        candidates,
        vector.map_or(crate::search::fusion::KEYWORD_WEIGHT, |v| v.keyword_weight),
    );
    let ids: Vec<Uuid> = ranked.iter().map(|r| r.id).collect();
    let neighbours = neighbours(conn, &ids).await?;
    lift_by_neighbours(
        &mut ranked,
        &neighbours,
        crate::search::fusion::NEIGHBOUR_WEIGHT,
    );
    let has_more = ranked.len() > limit as usize;
    ranked.truncate(limit as usize);

    // The chunk a hit shows: the keyword side's best when the words matched, else the closest.
    let mut ids = Vec::with_capacity(ranked.len());
    let mut starts = Vec::with_capacity(ranked.len());
    let mut highlight = Vec::with_capacity(ranked.len());
    for hit in &ranked {
        let from_keyword = keyword.iter().find(|k| k.memory_id == hit.id);
        let from_vector = near.iter().find(|n| n.memory_id == hit.id);
        ids.push(hit.id);
        starts.push(from_keyword.or(from_vector).and_then(|s| s.byte_start));
        highlight.push(from_keyword.is_some());
    }
    let options = format!(
        "StartSel=\"{START_SEL}\", StopSel=\"{STOP_SEL}\", MaxWords=35, MinWords=12, \
         MaxFragments=2, FragmentDelimiter=\" … \""
    );
    let shown = sqlx::query_as!(
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
         JOIN agent_memories m
           ON m.tenant_id = current_setting('mnemo.tenant')
          AND m.user_id = current_setting('mnemo.user') AND m.id = u.id
         LEFT JOIN agent_memory_chunks c
           ON c.tenant_id = current_setting('mnemo.tenant')
          AND c.user_id = current_setting('mnemo.user')
          AND c.memory_id = u.id AND c.byte_start = u.byte_start
         ORDER BY u.ord"#,
        text.any,
        &ids,
        // A summary hit has no chunk: NULL elements, which the macro's array check does not admit.
        &starts as &[Option<i64>],
        &highlight,
        options
    )
    .fetch_all(&mut *conn)
    .await?;

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
        mode: if degraded { SearchMode::Keyword } else { mode },
        degraded,
        hits,
        has_more,
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
