//! The two sides of a memory search, each a list of candidates with a score: the keyword side
//! (idf-ranked full-text matches over summaries and chunks) and the vector side (the chunks
//! nearest the query vector), under the same filters.

use serde_json::Value;
use uuid::Uuid;

use crate::db::Scoped;
use crate::error::ApiResult;
use crate::search::query::{
    Corpus, KEYWORD_SAMPLE, QUERY_CTE, Ranking, bounded_terms_cte, choose_ranking, idf_ranking,
    matches_cte, recent_matches, scored_cte,
};
use crate::search::similarity::{alone_vector, grouped_cte, mean_similarity};
use crate::search::{QueryVector, TextQuery, scope_unseen};

/// A keyword or vector candidate: the memory and its best chunk (`None`: the summary matched).
#[derive(sqlx::FromRow)]
pub(super) struct Scored {
    pub(super) memory_id: Uuid,
    pub(super) byte_start: Option<i64>,
    pub(super) score: f32,
    /// The chunk's vector alone, on the vector side (for its crowding).
    #[sqlx(default)]
    pub(super) alone: Option<pgvector::Vector>,
    /// What a memory holding every query term would score, on the keyword side.
    #[sqlx(default)]
    pub(super) query_weight: Option<f32>,
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
                 WHERE {scope} AND m.id = {id}
                   AND {FILTERS} OFFSET 0)",
        scope = scope_unseen("m"),
    )
}

/// The end of both keyword statements, over a CTE `scored` (`memory_id`, `byte_start`, `score`):
/// a memory once, scored by its best hit and shown at its best content chunk when the content
/// matched (a chunk has a line range to read), else at its summary. With the follow weight
/// `follow` (a `real` parameter, see [`crate::search::fusion::FOLLOW_WEIGHT`]) above 0, the
/// memory written just after each of the best `$11` (the leaders) in the same agent and thread
/// gains that share of its score, and is a candidate (shown at its summary) even when its own
/// words did not match, if the filters admit it. The best `$11`, and also those of the memories
/// `$10` that matched (the other side's candidates, scored on this side in the same statement).
///
/// With `late` the matches in `scored` have not been filtered: the filters are tested on the
/// best memories in order of score until `$11` pass, and on those of `$10`, rather than on every
/// match (a lookup by key each; 2,700 of them for a question over a history of 100,000
/// memories). The answer is the same: a memory below the best `$11` that pass can only rise into
/// them by following one of them, and followers are tested too. Without `late`, `scored` holds
/// only what the filters admit (the exact ranking counts document frequencies over them).
fn best(follow: &str, late: bool) -> String {
    let (kept, ranked_from) = if late {
        (
            format!(
                "kept AS MATERIALIZED (
             (SELECT b.memory_id, b.byte_start, b.score
              FROM (SELECT * FROM best ORDER BY score DESC, memory_id DESC OFFSET 0) b
              WHERE {admitted} LIMIT $11)
             UNION
             SELECT b.memory_id, b.byte_start, b.score FROM best b
             WHERE b.memory_id = ANY(coalesce($10::uuid[], '{{}}')) AND {admitted}
         )",
                admitted = admitted("b.memory_id"),
            ),
            // A follower keeps its own score when it matched, kept or not.
            "(SELECT memory_id FROM kept UNION SELECT memory_id FROM followers) u
              LEFT JOIN best b USING (memory_id) LEFT JOIN followers f USING (memory_id)",
        )
    } else {
        (
            "kept AS (SELECT memory_id, byte_start, score FROM best)".to_owned(),
            "best b FULL JOIN followers f USING (memory_id)",
        )
    };
    format!(
        "best AS (
             SELECT DISTINCT ON (memory_id) memory_id, byte_start,
                    max(score) OVER (PARTITION BY memory_id) AS score
             FROM scored
             ORDER BY memory_id, byte_start IS NULL, score DESC, byte_start
         ), {kept}, leaders AS (
             SELECT memory_id, score FROM kept
             WHERE {follow}::real > 0
             ORDER BY score DESC, memory_id DESC LIMIT $11
         ), followers AS (
             -- The next memory of each leading one (`agent_memories_stream`, one probe). The
             -- leading one is looked up by key in a subquery of its own, one probe in every plan
             -- (see the messages' followers).
             SELECT f.id AS memory_id, {follow}::real * l.score AS gain
             FROM leaders l
             CROSS JOIN LATERAL (
                 SELECT m.tenant_id, m.user_id, m.agent_id, m.thread_id, m.created_at, m.id
                 FROM agent_memories m
                 WHERE {scope} AND m.id = l.memory_id
                 LIMIT 1
             ) m
             CROSS JOIN LATERAL (
                 SELECT n.id FROM agent_memories n
                 WHERE n.tenant_id = m.tenant_id AND n.user_id = m.user_id
                   AND mnemo_same_stream(n.agent_id, n.thread_id, m.agent_id, m.thread_id)
                   AND (n.created_at, n.id) > (m.created_at, m.id)
                 ORDER BY n.created_at, n.id LIMIT 1
             ) f
             WHERE {admitted}
         ), ranked AS (
             SELECT memory_id, b.byte_start,
                    (coalesce(b.score, 0) + coalesce(f.gain, 0))::real AS score
             FROM {ranked_from}
         ), placed AS (
             SELECT memory_id, byte_start, score,
                    row_number() OVER (ORDER BY score DESC, memory_id DESC) AS place
             FROM ranked
         )
         SELECT memory_id, byte_start, score, (SELECT weight FROM total) AS query_weight
         FROM placed
         WHERE place <= $11 OR memory_id = ANY(coalesce($10::uuid[], '{{}}'))
         ORDER BY place",
        admitted = admitted("f.id"),
        scope = scope_unseen("m"),
    )
}

/// Most candidates each side contributes before fusion.
const CANDIDATES: i64 = 100;

pub(super) struct Filters {
    pub(super) include_inactive: bool,
    pub(super) agent_id: Option<String>,
    pub(super) thread_id: Option<String>,
    pub(super) memory_type: Option<String>,
    pub(super) created_after: Option<chrono::DateTime<chrono::Utc>>,
    pub(super) created_before: Option<chrono::DateTime<chrono::Utc>>,
    pub(super) metadata: Option<Value>,
}

impl Filters {
    /// Whether the filters leave out some of the caller's active memories (see
    /// [`recent_matches`]).
    fn narrows(&self) -> bool {
        self.agent_id.is_some()
            || self.thread_id.is_some()
            || self.memory_type.is_some()
            || self.created_after.is_some()
            || self.created_before.is_some()
            || self.metadata.is_some()
    }
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

/// The memory chunks a keyword search ranks (see [`Corpus`]).
pub(crate) const CHUNKS_CORPUS: Corpus = Corpus {
    kind: "chunks",
    recent: "SELECT c.tsv FROM agent_memory_chunks c
             WHERE c.tenant_id = current_setting('mnemo.tenant')
               AND c.user_id = current_setting('mnemo.user')
             ORDER BY c.memory_id DESC, c.byte_start DESC",
    // Through the full-text index (see `mnemo_chunk_matches`).
    matching: "SELECT 1 FROM mnemo_chunk_matches(ARRAY[t.term], $4)",
    corpus: "SELECT count(*) FROM agent_memory_chunks c
             WHERE c.tenant_id = current_setting('mnemo.tenant')
               AND c.user_id = current_setting('mnemo.user')",
    // The primary key's index, backwards.
    recent_keys: "SELECT c.memory_id AS id, c.byte_start AS n FROM agent_memory_chunks c
                  WHERE c.tenant_id = current_setting('mnemo.tenant')
                    AND c.user_id = current_setting('mnemo.user')
                  ORDER BY c.memory_id DESC, c.byte_start DESC",
    matching_keys: "SELECT memory_id, byte_start FROM mnemo_chunk_matches(ARRAY[t.term], $4)",
    in_sample: "(m.memory_id, m.byte_start) >= ($5::uuid, $6::int8)",
};

/// How the keyword side ranks the caller's memories ([`choose_ranking`] over the chunks), or
/// `None` when the caller has no memory: every memory has at least one chunk (its content is
/// never empty), so a count of no chunks means nothing to search, by words or by meaning.
pub(super) async fn keyword_ranking(
    conn: &mut Scoped,
    text: &TextQuery,
) -> Result<Option<Ranking>, sqlx::Error> {
    Ok(match choose_ranking(conn, &CHUNKS_CORPUS, text).await? {
        Ranking::Exact { texts: 0 } => None,
        ranking => Some(ranking),
    })
}

/// Keyword candidates: each matching memory once, at its best chunk or its summary, best first:
/// the best [`CANDIDATES`], and also those of `also` (the other side's candidates) that match.
/// With `follow` above 0, the memory after each of the best gains that share of its score (see
/// `best`).
///
/// The rank is [`idf_ranking`]'s: the idf sum of the query terms a text holds. As for messages,
/// the cost stays flat as the memories grow ([`choose_ranking`]): fewer than
/// [`KEYWORD_SAMPLE`] chunks are ranked exactly; otherwise the query's terms are counted in the
/// chunks of the caller's newest memories, and the candidates are the texts holding a rare term
/// (exact document frequency) and the matches among the newest chunks and memory summaries
/// (newest first, at most half of [`RECENT_MATCHES`](crate::search::query::RECENT_MATCHES)
/// of each, so as many texts in all as a message search scores, unless filters narrow the
/// search, see [`recent_matches`]); the common terms' frequencies are estimated from the sample.
///
/// `ranking` is [`choose_ranking`]'s choice for the chunks, made by the caller (see
/// [`keyword_ranking`]).
pub(super) async fn keyword_candidates(
    conn: &mut Scoped,
    ranking: Ranking,
    text: &TextQuery,
    filters: &Filters,
    also: Option<&[Uuid]>,
    follow: f32,
) -> ApiResult<Vec<Scored>> {
    let bounded = match ranking {
        Ranking::Exact { texts } => {
            return exact_keyword_candidates(conn, text, filters, also, follow, texts).await;
        }
        Ranking::Nothing => return Ok(Vec::new()),
        Ranking::Bounded(bounded) => bounded,
    };
    let sql = format!(
        "WITH {QUERY_CTE}, {terms}, rare_chunks AS MATERIALIZED (
             -- Every match of the rare terms, found through the full-text indexes.
             SELECT r.memory_id, r.byte_start, r.tsv
             FROM mnemo_chunk_matches($14::text[], NULL) r
             WHERE cardinality($14::text[]) > 0
         ), rare_summaries AS MATERIALIZED (
             SELECT r.id, r.summary_tsv FROM mnemo_summary_matches($14::text[], NULL) r
             WHERE cardinality($14::text[]) > 0
         ), recent_chunks AS (
             SELECT r.* FROM (
                 SELECT c.memory_id, c.byte_start, c.tsv FROM agent_memory_chunks c
                 WHERE c.tenant_id = current_setting('mnemo.tenant')
                   AND c.user_id = current_setting('mnemo.user')
                 ORDER BY c.memory_id DESC, c.byte_start DESC LIMIT $15
             ) r
             -- The query as an init plan: tested as each text is read, not joined to each.
             WHERE r.tsv @@ (SELECT q.q FROM q WHERE numnode(q.pos) > 0)
             ORDER BY r.memory_id DESC, r.byte_start DESC LIMIT $18
         ), recent_summaries AS (
             SELECT r.id, r.summary_tsv FROM (
                 SELECT m.id, m.summary_tsv, m.created_at FROM agent_memories m
                 WHERE m.tenant_id = current_setting('mnemo.tenant')
                   AND m.user_id = current_setting('mnemo.user')
                 ORDER BY m.created_at DESC LIMIT $15
             ) r
             -- The query as an init plan: tested as each text is read, not joined to each.
             WHERE r.summary_tsv @@ (SELECT q.q FROM q WHERE numnode(q.pos) > 0)
             ORDER BY r.created_at DESC LIMIT $18
         ), also_chunks AS (
             -- The other side's candidates, scored however old.
             SELECT c.memory_id, c.byte_start, c.tsv FROM agent_memory_chunks c
             WHERE c.tenant_id = current_setting('mnemo.tenant')
               AND c.user_id = current_setting('mnemo.user')
               AND $10::uuid[] IS NOT NULL AND c.memory_id = ANY($10)
         ), also_summaries AS (
             SELECT m.id, m.summary_tsv FROM agent_memories m
             WHERE {also_scope} AND $10::uuid[] IS NOT NULL AND m.id = ANY($10)
         ), matched AS MATERIALIZED (
             -- The recent ones match already; the others are tested here.
             SELECT c.memory_id, c.byte_start, c.tsv
             FROM (SELECT c.* FROM (SELECT * FROM rare_chunks
                                    UNION ALL SELECT * FROM also_chunks) c, q
                   WHERE numnode(q.pos) > 0 AND c.tsv @@ q.q
                   UNION SELECT * FROM recent_chunks) c
             UNION ALL
             SELECT s.id, NULL, s.summary_tsv
             FROM (SELECT s.* FROM (SELECT * FROM rare_summaries
                                    UNION ALL SELECT * FROM also_summaries) s, q
                   WHERE numnode(q.pos) > 0 AND s.summary_tsv @@ q.q
                   UNION SELECT * FROM recent_summaries) s
         ), hits AS (
             -- The filters are tested on the best of them only (see `best`).
             SELECT h.memory_id, h.byte_start, h.tsv FROM matched h
         ), df AS MATERIALIZED (
             SELECT t.term,
                    coalesce(t.estimate,
                             (SELECT count(*) FROM rare_chunks r WHERE r.tsv @@ t.tq)
                             + (SELECT count(*) FROM rare_summaries r WHERE r.summary_tsv @@ t.tq))
                        AS n
             FROM terms t
         ), {matches}, {scored}, {best}",
        terms = bounded_terms_cte("$12", "$13"),
        best = best("$17", true),
        matches = matches_cte("memory_id, byte_start"),
        scored = scored_cte("memory_id, byte_start", "$16::float8"),
        also_scope = scope_unseen("m"),
    );
    // Runtime-checked: composed from the ranking and filter SQL the searches share (`best`,
    // `FILTERS`, `admitted`); no value is spliced.
    let query = sqlx::query_as::<_, Scored>(&sql)
        .bind(&text.any)
        .bind(&text.none);
    let rows = bind_filters(query, filters)
        .bind(also)
        .bind(CANDIDATES)
        .bind(&bounded.names)
        .bind(&bounded.estimates)
        .bind(&bounded.rare_terms)
        .bind(KEYWORD_SAMPLE)
        .bind(bounded.corpus)
        .bind(follow)
        .bind(recent_matches(filters.narrows(), 2))
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
    follow: f32,
    chunks: i64,
) -> ApiResult<Vec<Scored>> {
    // The caller's chunks, as `choose_ranking` counted them (`CHUNKS_CORPUS.corpus`).
    let ranking = idf_ranking("memory_id, byte_start", "$13::int8");
    let sql = format!(
        "WITH {QUERY_CTE}, {}, hits AS MATERIALIZED (
             -- The caller's chunks in one range scan, the words tested first and the filters
             -- on the matches only (a memory lookup per matching chunk, not per memory): the
             -- query as an init plan makes the word test a filter of the scan, which PostgreSQL
             -- runs before the costlier sub-plan.
             SELECT c.memory_id, c.byte_start, c.tsv
             FROM agent_memory_chunks c
             WHERE c.tenant_id = current_setting('mnemo.tenant')
               AND c.user_id = current_setting('mnemo.user')
               AND c.tsv @@ (SELECT q.q FROM q WHERE numnode(q.pos) > 0)
               AND {admitted}
             UNION ALL
             SELECT mem.id, NULL, mem.summary_tsv
             FROM mem, q
             WHERE numnode(q.pos) > 0 AND mem.summary_tsv @@ q.q
         ), {ranking}, {best}",
        memories(),
        best = best("$12", false),
        admitted = admitted("c.memory_id"),
    );
    // Runtime-checked: composed from the ranking and filter SQL the searches share (`best`,
    // `FILTERS`, `admitted`); no value is spliced.
    let query = sqlx::query_as::<_, Scored>(&sql)
        .bind(&text.any)
        .bind(&text.none);
    let rows = bind_filters(query, filters)
        .bind(also)
        .bind(CANDIDATES)
        .bind(follow)
        .bind(chunks)
        .fetch_all(&mut *conn)
        .await?;
    Ok(rows)
}

/// Vector candidates: the memories whose chunks are nearest the query, each once at its
/// closest chunk, closest first; a chunk's similarity is the mean of its two vectors' (alone
/// and with its context). With `only` set, the similarity of just those memories.
pub(super) async fn vector_candidates(
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
             -- The nearest vectors first, then the filters on those only, as they are read:
             -- a memory is looked up for each vector the limit reaches, not for every vector of
             -- the caller (`OFFSET 0` keeps the test out of the scan). The vectors themselves are
             -- not carried through the ordering; the kept texts' are looked up below.
             SELECT o.memory_id, o.byte_start, o.with_context, NULL::vector AS embedding,
                    1 - o.distance AS score
             FROM (SELECT v.memory_id, v.byte_start, v.with_context, {distance} AS distance
                   FROM memory_vectors v
                   WHERE v.tenant_id = current_setting('mnemo.tenant')
                     AND v.user_id = current_setting('mnemo.user')
                     AND v.model = $2
                     AND ($10::uuid[] IS NULL OR v.memory_id = ANY($10))
                   ORDER BY {distance}
                   OFFSET 0) o
             WHERE {admitted}
             ORDER BY o.distance
             LIMIT $11
         ), {chunks}, both_vectors AS (
             SELECT c.memory_id, c.byte_start, {similarity} AS score, c.alone FROM chunks c
         )
         -- The best $13 memories first, so that only their vectors are looked up.
         SELECT b.memory_id, b.byte_start, b.score, {alone} AS alone
         FROM (SELECT * FROM (SELECT DISTINCT ON (memory_id) memory_id, byte_start, score, alone
                              FROM both_vectors
                              ORDER BY memory_id, score DESC) d
               ORDER BY score DESC, memory_id LIMIT $13) b
         ORDER BY b.score DESC, b.memory_id",
        alone = alone_vector("memory_vectors", "b", &["memory_id", "byte_start"]),
        chunks = grouped_cte(
            "chunks",
            "memory_id, byte_start",
            "ORDER BY max(score) DESC LIMIT $12"
        ),
        similarity = mean_similarity(
            "memory_vectors",
            "c",
            &["memory_id", "byte_start"],
            &distance
        ),
        admitted = admitted("o.memory_id")
    );
    // Runtime: it binds pgvector's `vector` and names the embedder's dimension in its text.
    // Unnamed, so planned for its parameters every time (see `crate::search::begin_search`).
    let query = sqlx::query_as::<_, Scored>(&sql)
        .persistent(false)
        .bind(pgvector::Vector::from(vector.values.clone()))
        .bind(&vector.model_id);
    let rows = bind_filters(query, filters)
        .bind(only)
        // Several chunks of one memory, and both vectors of a chunk, may be among the nearest.
        .bind(CANDIDATES * 3)
        .bind(CANDIDATES * 2)
        .bind(CANDIDATES)
        .fetch_all(&mut *conn)
        .await?;
    Ok(rows)
}
