//! Search over archived conversation messages, across the caller's sessions: by words, by
//! meaning, or both, with the same ranking as every other search.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::db::Scoped;
use crate::error::{ApiError, ApiResult};
use crate::search::fusion::{LIFTS, Stream};
use crate::search::fusion::{candidates, set_crowding, words_weight};
use crate::search::query::{
    Corpus, KEYWORD_SAMPLE, QUERY_CTE, Ranking, bounded_terms_cte, choose_ranking, idf_ranking,
    matches_cte, prefixed, recent_matches, scored_cte,
};
use crate::search::similarity::{alone_vector, grouped_cte, mean_similarity};
use crate::search::streams::{self, SPAN_READ, place};
use crate::search::{
    QueryVector, SearchMode, TextQuery, follow_weight, fuse, lift_by_neighbours, liftable,
    scope_unseen,
};

/// Body of `POST /api/chat/search`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChatSearchRequest {
    /// A question or keywords (1 to 1000 characters); words and `"phrases"` are ORed, `-word`
    /// excludes.
    #[schema(min_length = 1, max_length = 1000, pattern = r"\S")]
    pub query: String,
    /// Only this session.
    #[serde(default)]
    #[schema(max_length = 256)]
    pub session_id: Option<String>,
    /// Only sessions with this agent.
    #[serde(default)]
    #[schema(max_length = 256)]
    pub agent_id: Option<String>,
    /// Only messages written at or after this time (RFC 3339).
    #[serde(default)]
    pub after: Option<DateTime<Utc>>,
    /// Only messages written before this time (RFC 3339).
    #[serde(default)]
    pub before: Option<DateTime<Utc>>,
    /// Hits to return (1 to 100, default 10).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 100)]
    pub limit: Option<u32>,
    /// `keyword`, `semantic` or `hybrid`; default `hybrid` with an embedder, else `keyword`.
    #[serde(default)]
    pub mode: Option<SearchMode>,
}

/// One message found.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MessageHit {
    pub session_id: String,
    pub message_id: String,
    /// `user` or `ai` (or `tool`).
    pub sender: String,
    /// When the message was written.
    pub timestamp: DateTime<Utc>,
    /// The agent of the message's session.
    pub agent_id: String,
    /// The message text with matched words in `**bold**` (a semantic-only hit: its start).
    pub snippet: String,
    /// Rank score, higher is better (see `SearchHit.score`).
    pub score: f32,
    pub keyword_rank: Option<u32>,
    pub vector_rank: Option<u32>,
    pub similarity: Option<f32>,
    /// The message before this one in its session, if any.
    pub previous_message_id: Option<String>,
    /// The message after this one in its session, if any.
    pub next_message_id: Option<String>,
}

/// Answer of `POST /api/chat/search`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChatSearchResults {
    pub mode: SearchMode,
    /// True when the embedder failed and only keyword results are served.
    pub degraded: bool,
    pub hits: Vec<MessageHit>,
    /// More hits exist past `limit`.
    pub has_more: bool,
    /// When words alone ranked the hits (keyword mode, a degraded search, or no candidate had a
    /// vector yet), what a text holding every word of the query would score: the scores divided
    /// by it are shares of the question, comparable across kinds of text (see `POST
    /// /api/recall`). None when the scores are similarities or fused ones. Not part of the answer.
    #[serde(skip)]
    pub words_weight: Option<f32>,
}

/// The condition that a message `m` is the caller's, in the sessions the session and agent
/// filters ($3 and $4) admit.
macro_rules! in_filtered_sessions {
    () => {
        "m.tenant_id = current_setting('mnemo.tenant')
       AND m.user_id = current_setting('mnemo.user')
       AND ($3::text IS NULL OR m.session_id = $3)
       AND ($4::text IS NULL OR EXISTS (
             SELECT 1 FROM agent_sessions s
             WHERE s.tenant_id = m.tenant_id AND s.user_id = m.user_id
               AND s.session_id = m.session_id AND s.agent_name = $4))"
    };
}

/// The caller's messages a search may see, as a CTE `msg`; binds $3..$7 (and the retention
/// cutoff $8). A message's session is looked up only to test an agent filter.
const MESSAGES: &str = concat!(
    "msg AS (
     SELECT m.seq, m.tsv, m.session_id, m.sent_at FROM conversation_messages m
     WHERE ",
    in_filtered_sessions!(),
    "
       AND ($5::timestamptz IS NULL OR m.sent_at >= $5)
       AND ($6::timestamptz IS NULL OR m.sent_at < $6)
       AND ($7::int IS NULL OR m.archived_at >= now() - make_interval(days => $7::int))
 )"
);

/// The caller's messages in the sessions a search may see, as a CTE `msg` (binds $3 and $4,
/// the session and agent filters), each with its place among its session's user and AI
/// messages: the one just before it (`previous`, and whether that one ends with a question,
/// `follows_question`) and the two just after it (`next`, `next_next`, and the first one's
/// `asks`, `next_at` and `next_archived_at`), by time and then `seq`. These are a user or AI
/// message's neighbours as [`neighbours`] finds them, read in the same pass as the words:
/// `spoken` tells which rows they hold for (a tool message's are among the session's tool
/// messages, and are not used). A message's neighbours lie in its session, so the session and
/// agent filters leave them be; the time and retention filters apply to the matches. Only a
/// match's `tsv` is kept (NULL for the others), so that the sort and the window carry no more
/// than the neighbours need.
const PLACED_MESSAGES: &str = concat!(
    "msg AS MATERIALIZED (
     SELECT m.seq, m.tsv, m.session_id, m.sent_at, m.archived_at, m.asks, m.ends_asking,
            m.spoken,
            lag(m.seq) OVER w AS previous, lag(m.ends_asking) OVER w AS follows_question,
            lead(m.seq) OVER w AS next, lead(m.asks) OVER w AS next_asks,
            lead(m.seq, 2) OVER w AS next_next, lead(m.sent_at) OVER w AS next_at,
            lead(m.archived_at) OVER w AS next_archived_at
     FROM (
         SELECT m.seq, CASE WHEN numnode(q.pos) > 0 AND m.tsv @@ q.q THEN m.tsv END AS tsv,
                m.session_id, m.sent_at, m.archived_at, m.asks, m.ends_asking,
                m.sender IN ('user', 'ai') AS spoken
         FROM conversation_messages m, q
         WHERE ",
    in_filtered_sessions!(),
    "
         -- A fence: the texts are tested before the sort, not after it.
         OFFSET 0
     ) m
     WINDOW w AS (PARTITION BY m.session_id, m.spoken ORDER BY m.sent_at, m.seq)
 )"
);

/// Most messages a history may hold for its exact ranking to place its candidates itself
/// ([`placed_keyword_sql`]). Placing them costs every message of the history a row of a sort
/// and a window, 2 to 4 µs of PostgreSQL's time each (measured at 350 and 860 messages); the
/// neighbour statement it spares, with its round trip and the server's reading of its rows,
/// costs about as much as 600 of them. So a longer history keeps that statement.
const PLACED_HISTORY: i64 = 500;

/// What the placing ranking keeps of each match: where it lies ([`HIT_KEYS`]) and its
/// neighbours, from [`PLACED_MESSAGES`].
const PLACED_KEYS: &str = "seq, session_id, sent_at, spoken, asks, ends_asking, previous, \
                          follows_question, next, next_asks, next_next, next_at, next_archived_at";

/// Most candidates each side contributes before fusion.
const CANDIDATES: i64 = 100;

#[derive(sqlx::FromRow)]
struct Scored {
    seq: i64,
    score: f32,
    /// The message's vector alone, on the vector side (for its crowding).
    #[sqlx(default)]
    alone: Option<pgvector::Vector>,
    /// What a message holding every query term would score, on the keyword side.
    #[sqlx(default)]
    query_weight: Option<f32>,
    /// The exact keyword ranking of a short history tells where each of its user and AI
    /// messages lies in its session (see [`placed_keyword_sql`]): true when `asks`,
    /// `previous`, `follows_question` and `next` hold that.
    #[sqlx(default)]
    placed: Option<bool>,
    #[sqlx(default)]
    asks: Option<bool>,
    #[sqlx(default)]
    previous: Option<i64>,
    #[sqlx(default)]
    follows_question: Option<bool>,
    #[sqlx(default)]
    next: Option<i64>,
    /// Its text, when the search asks when.
    #[sqlx(default)]
    text: Option<String>,
}

impl Scored {
    /// Its [`Stream`], when the ranking placed it.
    fn stream(&self) -> Option<Stream<i64>> {
        self.placed.filter(|placed| *placed)?;
        Some(Stream {
            previous: self.previous,
            follows_question: self.follows_question.unwrap_or(false),
            next: self.next,
            asks: self.asks.unwrap_or(false),
            tells_time: self
                .text
                .as_deref()
                .is_some_and(crate::search::when::tells_time),
        })
    }
}

struct Shown {
    /// The hit's place in the ranking, from 1.
    ord: i64,
    /// How many of the ranked hits are not excluded (the same on every row).
    kept: i64,
    session_id: String,
    message_id: String,
    sender: String,
    sent_at: DateTime<Utc>,
    agent_name: String,
    snippet: String,
    previous_id: Option<String>,
    next_id: Option<String>,
}

/// The filters of a request, validated.
pub struct Filters {
    session_id: Option<String>,
    agent_id: Option<String>,
    after: Option<DateTime<Utc>>,
    before: Option<DateTime<Utc>>,
    retention_days: Option<i32>,
}

type ScoredQuery<'q> =
    sqlx::query::QueryAs<'q, sqlx::Postgres, Scored, sqlx::postgres::PgArguments>;

impl Filters {
    /// Whether the filters leave out some of the caller's messages: a session, an agent or a
    /// time range. The retention cutoff does not count: it leaves out the oldest messages, never
    /// some of the newest (see [`recent_matches`]).
    fn narrows(&self) -> bool {
        self.session_id.is_some()
            || self.agent_id.is_some()
            || self.after.is_some()
            || self.before.is_some()
    }
}

fn bind_filters<'q>(query: ScoredQuery<'q>, f: &'q Filters) -> ScoredQuery<'q> {
    query
        .bind(&f.session_id)
        .bind(&f.agent_id)
        .bind(f.after)
        .bind(f.before)
        .bind(f.retention_days)
}

/// The conversation messages a keyword search ranks (see [`Corpus`]).
pub(crate) const MESSAGES_CORPUS: Corpus = Corpus {
    kind: "messages",
    recent: "SELECT m.tsv FROM conversation_messages m
             WHERE m.tenant_id = current_setting('mnemo.tenant')
               AND m.user_id = current_setting('mnemo.user')
             ORDER BY m.seq DESC",
    // Through the full-text index (see `mnemo_message_matches`).
    matching: "SELECT 1 FROM mnemo_message_matches(ARRAY[t.term], $4)",
    corpus: "SELECT coalesce(sum(s.message_count), 0) FROM agent_sessions s
             WHERE s.tenant_id = current_setting('mnemo.tenant')
               AND s.user_id = current_setting('mnemo.user')",
    recent_keys: "SELECT NULL::uuid AS id, m.seq AS n FROM conversation_messages m
                  WHERE m.tenant_id = current_setting('mnemo.tenant')
                    AND m.user_id = current_setting('mnemo.user')
                  ORDER BY m.seq DESC",
    matching_keys: "SELECT seq FROM mnemo_message_matches(ARRAY[t.term], $4)",
    // No id: a message's sequence number orders it alone.
    in_sample: "m.seq >= $6::int8",
};

/// Keyword candidates, best first, by [`idf_ranking`]'s score: the idf sum of the query terms a
/// message holds.
///
/// The cost stays flat as a history grows ([`choose_ranking`]). A history shorter than
/// [`KEYWORD_SAMPLE`] messages is ranked exactly, over every match. A longer one: a first
/// statement reads the caller's newest messages (the `(tenant, user, seq)` index, backwards) and
/// counts the query's terms in them; then every match of the rare terms is read, with exact
/// document frequencies, the common terms' frequencies are estimated from the sample, and their
/// matches are taken from the sample only, newest first and at most
/// [`RECENT_MATCHES`](crate::search::query::RECENT_MATCHES) of them unless filters narrow the
/// search (see [`recent_matches`]). So a message holding a rare term is always a candidate, one
/// holding only common terms is one when it is among the newest; the reads are bounded by the
/// sample and the rare terms' matches, whatever the length of the history.
///
/// `also` (the vector side's candidates) are scored too when they match, however far down the
/// keyword ranking or far back in the history they are, so that fusion compares whole scores.
/// With `follow` above 0, the message after each of the best gains that share of its score (see
/// [`best_and_also`]).
async fn keyword_candidates(
    conn: &mut Scoped,
    text: &TextQuery,
    filters: &Filters,
    also: Option<&[i64]>,
    follow: f32,
) -> ApiResult<Vec<Scored>> {
    let bounded = match choose_ranking(conn, &MESSAGES_CORPUS, text).await? {
        // The messages' count here is of those ever archived (deleted ones stay counted): the
        // exact ranking counts the stored ones itself.
        Ranking::Exact { texts } => {
            let placed = texts <= PLACED_HISTORY;
            return exact_keyword_candidates(conn, text, filters, also, follow, placed).await;
        }
        Ranking::Nothing => return Ok(Vec::new()),
        Ranking::Bounded(bounded) => bounded,
    };
    // Not a macro: it begins with the query CTE every search shares.
    let sql = format!(
        "WITH {QUERY_CTE}, {terms}, rare_hits AS MATERIALIZED (
             -- Every match of the rare terms, found through the full-text index.
             SELECT r.seq, r.tsv, r.session_id, r.sent_at, r.archived_at
             FROM mnemo_message_matches($11::text[], NULL) r
             WHERE cardinality($11::text[]) > 0
         ), recent AS MATERIALIZED (
             SELECT r.* FROM (
                 SELECT m.seq, m.tsv, m.session_id, m.sent_at, m.archived_at
                 FROM conversation_messages m
                 WHERE m.tenant_id = current_setting('mnemo.tenant')
                   AND m.user_id = current_setting('mnemo.user')
                 ORDER BY m.seq DESC LIMIT $12
             ) r
             -- The query as an init plan: tested as each text is read, not joined to each.
             WHERE r.tsv @@ (SELECT q.q FROM q WHERE numnode(q.pos) > 0)
             ORDER BY r.seq DESC LIMIT $16
         ), also AS MATERIALIZED (
             -- The other side's candidates, scored however old.
             SELECT m.seq, m.tsv, m.session_id, m.sent_at, m.archived_at
             FROM conversation_messages m
             WHERE {also_scope} AND $14::int8[] IS NOT NULL AND m.seq = ANY($14)
         ), hits AS MATERIALIZED (
             -- The filters on the candidates themselves (an agent filter looks each one's
             -- session up by key, and only then): never a scan of the whole history.
             -- The recent ones match already; the others are tested here.
             SELECT c.seq, c.tsv, c.session_id, c.sent_at
             FROM (SELECT DISTINCT ON (seq) * FROM
                     (SELECT r.* FROM rare_hits r, q
                      WHERE numnode(q.pos) > 0 AND r.tsv @@ q.q
                      UNION ALL SELECT * FROM recent
                      UNION ALL SELECT a.* FROM also a, q
                      WHERE numnode(q.pos) > 0 AND a.tsv @@ q.q) u
                   ORDER BY seq) c
             WHERE ($3::text IS NULL OR c.session_id = $3)
               AND ($4::text IS NULL OR EXISTS (
                     SELECT 1 FROM agent_sessions s
                     WHERE {session_scope}
                       AND s.session_id = c.session_id AND s.agent_name = $4))
               AND {candidate}
         ), df AS (
             SELECT t.term,
                    coalesce(t.estimate, (SELECT count(*) FROM rare_hits r WHERE r.tsv @@ t.tq))
                        AS n
             FROM terms t
         ), {matches}, {scored}, {best}",
        terms = bounded_terms_cte("$9", "$10"),
        matches = matches_cte(HIT_KEYS),
        scored = scored_cte(HIT_KEYS, "$13::float8"),
        best = best_and_also("$14", "$15"),
        candidate = admitted("c.sent_at", "c.archived_at"),
        also_scope = scope_unseen("m"),
        session_scope = scope_unseen("s"),
    );
    let query = sqlx::query_as::<_, Scored>(&sql)
        .bind(&text.any)
        .bind(&text.none);
    Ok(bind_filters(query, filters)
        .bind(CANDIDATES)
        .bind(&bounded.names)
        .bind(&bounded.estimates)
        .bind(&bounded.rare_terms)
        .bind(KEYWORD_SAMPLE)
        .bind(bounded.corpus)
        .bind(also)
        .bind(follow)
        .bind(recent_matches(filters.narrows(), 1))
        .fetch_all(&mut *conn)
        .await?)
}

/// Every match ranked, with document frequencies counted over the matches themselves: the
/// search of a history no longer than the sample. With `placed` (a history of at most
/// [`PLACED_HISTORY`] messages), the statement also tells where each user or AI message lies in
/// its session (see [`Scored::stream`]), so that the lift by neighbours need not look them up.
async fn exact_keyword_candidates(
    conn: &mut Scoped,
    text: &TextQuery,
    filters: &Filters,
    also: Option<&[i64]>,
    follow: f32,
    placed: bool,
) -> ApiResult<Vec<Scored>> {
    let sql = if placed {
        placed_keyword_sql()
    } else {
        exact_keyword_sql()
    };
    let query = sqlx::query_as::<_, Scored>(&sql)
        .bind(&text.any)
        .bind(&text.none);
    let query = bind_filters(query, filters)
        .bind(CANDIDATES)
        .bind(also)
        .bind(follow);
    let query = if placed {
        query.bind(text.asks_when)
    } else {
        query
    };
    Ok(query.fetch_all(&mut *conn).await?)
}

/// The statement of [`exact_keyword_candidates`]: `$1` and `$2` the query's parts (see
/// [`QUERY_CTE`]), `$3` to `$7` the filters (session, agent, after, before, retention days),
/// `$8` the candidates wanted, `$9` the other side's (`int8[]`, may be NULL), `$10` the follow
/// weight (`real`). Public so that a test can check its plans.
pub fn exact_keyword_sql() -> String {
    let ranking = idf_ranking(
        HIT_KEYS,
        "SELECT count(*) FROM conversation_messages c
         WHERE c.tenant_id = current_setting('mnemo.tenant')
           AND c.user_id = current_setting('mnemo.user')",
    );
    // Not a macro: it is assembled from the query CTE and the ranking every search shares.
    format!(
        "WITH {QUERY_CTE}, {MESSAGES}, hits AS MATERIALIZED (
             SELECT msg.seq, msg.tsv, msg.session_id, msg.sent_at FROM msg, q
             WHERE numnode(q.pos) > 0 AND msg.tsv @@ q.q
         ), {ranking}, {}",
        best_and_also("$9", "$10"),
    )
}

/// [`exact_keyword_sql`] for a short history, placing its candidates: the same parameters and
/// `$11`, whether to read the candidates' texts (the search asks when). Public so that a test
/// can check its plans.
///
/// Besides each candidate's score, a row tells where a user or AI message lies in its session
/// (`placed`, `asks`, `previous`, `follows_question`, `next`, from [`PLACED_MESSAGES`]), and its
/// `text` when `$11`. The follow lift takes a leading user or AI message's follower from the
/// same read; a tool message's follower is probed, and is not placed.
pub fn placed_keyword_sql() -> String {
    let ranking = idf_ranking(
        PLACED_KEYS,
        // Without a session or agent filter, `msg` holds every message of the caller.
        "CASE WHEN $3::text IS NULL AND $4::text IS NULL THEN (SELECT count(*) FROM msg)
              ELSE (SELECT count(*) FROM conversation_messages c
                    WHERE c.tenant_id = current_setting('mnemo.tenant')
                      AND c.user_id = current_setting('mnemo.user'))
         END",
    );
    let keys = prefixed(PLACED_KEYS, "msg");
    // Not a macro: it is assembled from the query CTE and the ranking every search shares.
    format!(
        "WITH {QUERY_CTE}, {PLACED_MESSAGES}, hits AS MATERIALIZED (
             SELECT {keys}, msg.tsv FROM msg
             WHERE msg.tsv IS NOT NULL AND {matched}
         ), {ranking}, leaders AS (
             SELECT {PLACED_KEYS}, score FROM scored
             WHERE $10::real > 0
             ORDER BY score DESC, seq DESC LIMIT $8
         ), followers AS (
             -- A user or AI message's follower is the next one of its session, read with it;
             -- the follower's own neighbours are the leader and the one after the follower.
             SELECT l.next AS seq, true AS placed, l.next_asks AS asks, l.seq AS previous,
                    l.ends_asking AS follows_question, l.next_next AS next,
                    $10::real * l.score AS gain
             FROM leaders l
             WHERE l.spoken AND l.next IS NOT NULL AND {next}
             UNION ALL
             -- A tool message's, one probe each (`conversation_messages_by_time`).
             SELECT f.seq, false, NULL, NULL, NULL, NULL, $10::real * l.score
             FROM leaders l {follower_probe} WHERE NOT l.spoken AND {follower}
         ), ranked AS (
             SELECT seq, (coalesce(s.score, 0) + coalesce(f.gain, 0))::real AS score,
                    coalesce(s.spoken, f.placed) AS placed, coalesce(s.asks, f.asks) AS asks,
                    coalesce(s.previous, f.previous) AS previous,
                    coalesce(s.follows_question, f.follows_question, false) AS follows_question,
                    coalesce(s.next, f.next) AS next
             FROM scored s FULL JOIN followers f USING (seq)
         )
         SELECT b.*, (SELECT weight FROM total) AS query_weight,
                CASE WHEN $11 THEN (
                    SELECT t.text FROM conversation_messages t
                    WHERE {text_scope} AND t.seq = b.seq
                    LIMIT 1)
                END AS text
         FROM (
             (SELECT * FROM ranked ORDER BY score DESC, seq DESC LIMIT $8)
             UNION
             SELECT * FROM ranked WHERE $9::int8[] IS NOT NULL AND seq = ANY($9)
         ) b
         ORDER BY b.score DESC, b.seq DESC",
        matched = admitted("msg.sent_at", "msg.archived_at"),
        next = admitted("l.next_at", "l.next_archived_at"),
        follower = admitted("f.sent_at", "f.archived_at"),
        follower_probe = follower(),
        text_scope = scope_unseen("t"),
    )
}

/// The user or AI message just after a leading one `l` (its `seq`, `session_id` and `sent_at`)
/// in its session, as `f`: one probe (`conversation_messages_by_time`).
fn follower() -> String {
    format!(
        "CROSS JOIN LATERAL (
             SELECT n.seq, n.sent_at, n.archived_at FROM conversation_messages n
             WHERE {scope}
               AND n.session_id = l.session_id AND n.sender IN ('user', 'ai')
               AND (n.sent_at, n.seq) > (l.sent_at, l.seq)
             ORDER BY n.sent_at, n.seq LIMIT 1
         ) f",
        scope = scope_unseen("n"),
    )
}

/// Whether the time and retention filters ($5 to $7) admit a message written at `sent_at` and
/// archived at `archived_at` (column expressions).
fn admitted(sent_at: &str, archived_at: &str) -> String {
    format!(
        "($5::timestamptz IS NULL OR {sent_at} >= $5)
         AND ($6::timestamptz IS NULL OR {sent_at} < $6)
         AND ($7::int IS NULL OR {archived_at} >= now() - make_interval(days => $7::int))"
    )
}

/// What a keyword ranking keeps of each match: its key, and where it lies (its session and time),
/// so that the message after it is found without looking it up again.
const HIT_KEYS: &str = "seq, session_id, sent_at";

/// The end of a keyword statement: the best `$8` of a CTE `scored` ([`HIT_KEYS`], `score`), and those
/// of the sequence numbers in the `int8[]` parameter `also` (may be NULL) that it scored. With the
/// follow weight `follow` (a `real` parameter, see [`crate::search::fusion::FOLLOW_WEIGHT`])
/// above 0, the user or AI message just after each of the best `$8` in its session gains that
/// share of its score, and is a candidate even when its own words did not match, if the time and
/// retention filters admit it (it shares its session, and so the session and agent filters,
/// with the message before it).
fn best_and_also(also: &str, follow: &str) -> String {
    format!(
        "leaders AS (
             SELECT seq, session_id, sent_at, score FROM scored
             WHERE {follow}::real > 0
             ORDER BY score DESC, seq DESC LIMIT $8
         ), followers AS (
             -- The next message of each leading one (`conversation_messages_by_time`), one
             -- probe each: where the leading one lies came with its match.
             SELECT f.seq, {follow}::real * l.score AS gain
             FROM leaders l {follower} WHERE {admitted}
         ), ranked AS (
             SELECT seq, (coalesce(s.score, 0) + coalesce(f.gain, 0))::real AS score
             FROM scored s FULL JOIN followers f USING (seq)
         )
         SELECT seq, score, (SELECT weight FROM total) AS query_weight FROM (
             (SELECT seq, score FROM ranked ORDER BY score DESC, seq DESC LIMIT $8)
             UNION
             SELECT seq, score FROM ranked WHERE {also}::int8[] IS NOT NULL AND seq = ANY({also})
         ) best ORDER BY score DESC, seq DESC",
        admitted = admitted("f.sent_at", "f.archived_at"),
        follower = follower(),
    )
}

/// The messages nearest the query; with `only`, the similarity of just those messages.
async fn vector_candidates(
    conn: &mut Scoped,
    vector: &QueryVector,
    filters: &Filters,
    only: Option<&[i64]>,
) -> ApiResult<Vec<Scored>> {
    // Not a macro: it binds and compares pgvector's `vector`, which sqlx's macros do not know.
    let dims = vector.values.len();
    // The dimension is the embedder's (see the memory search); it names the HNSW index.
    let distance = format!("(v.embedding::vector({dims}) <=> $1::vector({dims}))");
    // The filters apply to the joined message directly (not through `msg`), so the plan reads
    // the caller's vectors once and looks each message up by its key.
    let sql = format!(
        "WITH near AS (
         SELECT m.seq, v.session_id, v.message_id, v.with_context, v.embedding,
                1 - {distance} AS score
         FROM message_vectors v
         JOIN conversation_messages m
           ON m.tenant_id = v.tenant_id AND m.user_id = v.user_id
          AND m.session_id = v.session_id AND m.message_id = v.message_id
         WHERE v.tenant_id = current_setting('mnemo.tenant')
           AND v.user_id = current_setting('mnemo.user')
           AND v.model = $2
           AND ($3::text IS NULL OR v.session_id = $3)
           AND ($4::text IS NULL OR EXISTS (
                 SELECT 1 FROM agent_sessions s
                 WHERE s.tenant_id = m.tenant_id AND s.user_id = m.user_id
                   AND s.session_id = m.session_id AND s.agent_name = $4))
           AND {nearest}
           AND ($9::int8[] IS NULL OR m.seq = ANY($9))
         ORDER BY {distance}
         LIMIT $8
         ), {messages}
         -- The best $10 messages first, so that only their vectors are looked up.
         SELECT s.seq, s.score, {alone} AS alone
         FROM (SELECT n.*, {similarity} AS score FROM messages n
               ORDER BY score DESC, seq DESC LIMIT $10) s
         ORDER BY s.score DESC, s.seq DESC",
        messages = grouped_cte("messages", "seq, session_id, message_id", ""),
        similarity = mean_similarity(
            "message_vectors",
            "n",
            &["session_id", "message_id"],
            &distance
        ),
        alone = alone_vector("message_vectors", "s", &["session_id", "message_id"]),
        nearest = admitted("m.sent_at", "m.archived_at"),
    );
    // Unnamed, so planned for its parameters every time (see `crate::search::begin_search`).
    let query = sqlx::query_as::<_, Scored>(&sql)
        .persistent(false)
        .bind(pgvector::Vector::from(vector.values.clone()))
        .bind(&vector.model_id);
    // A message has a vector of its own and one with its context: both may be among the
    // nearest.
    let rows = bind_filters(query, filters)
        .bind(CANDIDATES * 2)
        .bind(only)
        .bind(CANDIDATES)
        .fetch_all(&mut *conn)
        .await?;
    Ok(rows)
}

/// Validates a request's filters and limit.
pub fn filters(
    request: &ChatSearchRequest,
    retention_days: Option<i32>,
) -> ApiResult<(TextQuery, Filters, u32)> {
    let text = TextQuery::parse("query", &request.query)?;
    let limit = request.limit.unwrap_or(10);
    if limit == 0 || limit > 100 {
        return Err(ApiError::invalid("limit", "`limit` must be 1 to 100"));
    }
    for (field, value) in [
        ("session_id", &request.session_id),
        ("agent_id", &request.agent_id),
    ] {
        if value
            .as_deref()
            .is_some_and(|v| v.contains('\0') || v.len() > 256)
        {
            return Err(ApiError::invalid(
                field,
                format!("`{field}` must be at most 256 bytes without NUL characters"),
            ));
        }
    }
    Ok((
        text,
        Filters {
            session_id: request.session_id.clone(),
            agent_id: request.agent_id.clone(),
            after: request.after,
            before: request.before,
            retention_days,
        },
        limit,
    ))
}

/// The message just before and just after each of `seqs` in its session (user and assistant
/// messages, by time), whether it only asks and whether the one before it ends with a
/// question (both stored with each message when it is written), and, when the search
/// `asks_when`, whether each says when (its text is read for [`tells_time`] only then), for
/// [`lift_by_neighbours`].
///
/// Each message is looked up by its own index probe (a lateral subquery per key), never by
/// joining the caller's messages to the keys: a connection keeps a statement's plan across the
/// users it serves, and PostgreSQL estimates `user_id = current_setting('mnemo.user')` with the
/// value it has when it plans. A plan made for a user with a few messages read all of them and
/// filtered; kept and run for a user with a million, it read a million rows per search (14 s).
/// The probes compare the scope through sub-selects ([`scope_unseen`]; the `query!` ones spell
/// it out), whose values the planner does not see: for
/// a user the statistics do not know yet, it otherwise expects a single message, and every index
/// leading with the tenant and user costs the same; the follower probe then went through the
/// sequence index, reading every message of the user for each leading one (300 ms for 100
/// leaders among 10,000 messages), and a connection kept that plan for the next user.
///
/// The messages around them are read per session (see [`crate::search::streams`]); a session
/// whose candidates lie far apart has their neighbours probed one by one ([`probe_around`]).
async fn neighbours(
    conn: &mut Scoped,
    seqs: &[i64],
    asks_when: bool,
) -> ApiResult<HashMap<i64, Stream<i64>>> {
    Ok(spanned_neighbours(conn, seqs, asks_when).await?.0)
}

/// The [`Stream`]s of `seqs`: those the keyword ranking placed (see [`Scored::stream`]) as it
/// placed them, the others found by [`neighbours`].
async fn placed_or_found(
    conn: &mut Scoped,
    seqs: &[i64],
    keyword: &[Scored],
    asks_when: bool,
) -> ApiResult<HashMap<i64, Stream<i64>>> {
    let ranked: HashMap<i64, &Scored> = keyword.iter().map(|k| (k.seq, k)).collect();
    let mut out = HashMap::with_capacity(seqs.len());
    let mut unplaced = Vec::new();
    for &seq in seqs {
        match ranked.get(&seq).and_then(|k| k.stream()) {
            Some(stream) => {
                out.insert(seq, stream);
            }
            None => unplaced.push(seq),
        }
    }
    out.extend(neighbours(conn, &unplaced, asks_when).await?);
    Ok(out)
}

/// [`neighbours`], and the candidates of the sessions whose ranges were cut short, whose
/// neighbours were then probed one by one ([`probe_around`]).
async fn spanned_neighbours(
    conn: &mut Scoped,
    seqs: &[i64],
    asks_when: bool,
) -> ApiResult<(HashMap<i64, Stream<i64>>, Vec<i64>)> {
    if seqs.is_empty() {
        return Ok((HashMap::new(), Vec::new()));
    }
    // `part`: 0 a candidate, 1 the message before a session's first candidate, 2 the messages
    // from its first candidate to its last (at most SPAN_READ a candidate, and one more to tell
    // that there were more), 3 the message after its last. `flag`: a candidate only asks; any
    // other row ends with a question.
    let rows = sqlx::query!(
        r#"WITH k AS (SELECT DISTINCT unnest($1::int8[]) AS seq),
         m AS MATERIALIZED (
             SELECT m.seq, m.session_id, m.sent_at, m.asks, CASE WHEN $2 THEN m.text END AS text
             FROM k
             CROSS JOIN LATERAL (
                 SELECT * FROM conversation_messages m
                 WHERE m.tenant_id = (SELECT current_setting('mnemo.tenant'))
                   AND m.user_id = (SELECT current_setting('mnemo.user')) AND m.seq = k.seq
                 LIMIT 1
             ) m
         ), spans AS MATERIALIZED (
             SELECT session_id, count(*) AS n,
                    (array_agg(sent_at ORDER BY sent_at, seq))[1] AS first_at,
                    (array_agg(seq ORDER BY sent_at, seq))[1] AS first_seq,
                    (array_agg(sent_at ORDER BY sent_at DESC, seq DESC))[1] AS last_at,
                    (array_agg(seq ORDER BY sent_at DESC, seq DESC))[1] AS last_seq
             FROM m GROUP BY session_id
         )
         SELECT 0 AS "part!", m.seq AS "seq!", m.session_id AS "session_id!",
                m.sent_at AS "sent_at!", m.asks AS "flag!",
                m.text AS "text?"
         FROM m
         UNION ALL
         SELECT r.part, r.seq, s.session_id, r.sent_at, r.ends_asking, NULL
         FROM spans s
         CROSS JOIN LATERAL (
             (SELECT 1 AS part, p.seq, p.sent_at, p.ends_asking FROM conversation_messages p
              WHERE p.tenant_id = (SELECT current_setting('mnemo.tenant'))
                AND p.user_id = (SELECT current_setting('mnemo.user'))
                AND p.session_id = s.session_id AND p.sender IN ('user', 'ai')
                AND (p.sent_at, p.seq) < (s.first_at, s.first_seq)
              ORDER BY p.sent_at DESC, p.seq DESC LIMIT 1)
             UNION ALL
             -- A lone candidate needs no range: its neighbours are the two probes.
             (SELECT 2, p.seq, p.sent_at, p.ends_asking FROM conversation_messages p
              WHERE p.tenant_id = (SELECT current_setting('mnemo.tenant'))
                AND p.user_id = (SELECT current_setting('mnemo.user'))
                AND p.session_id = s.session_id AND p.sender IN ('user', 'ai')
                AND (p.sent_at, p.seq) >= (s.first_at, s.first_seq)
                AND (p.sent_at, p.seq) <= (s.last_at, s.last_seq)
              ORDER BY p.sent_at, p.seq
              LIMIT CASE WHEN s.n > 1 THEN s.n * $3 + 1 ELSE 0 END)
             UNION ALL
             (SELECT 3, n.seq, n.sent_at, n.ends_asking FROM conversation_messages n
              WHERE n.tenant_id = (SELECT current_setting('mnemo.tenant'))
                AND n.user_id = (SELECT current_setting('mnemo.user'))
                AND n.session_id = s.session_id AND n.sender IN ('user', 'ai')
                AND (n.sent_at, n.seq) > (s.last_at, s.last_seq)
              ORDER BY n.sent_at, n.seq LIMIT 1)
         ) r"#,
        seqs,
        asks_when,
        SPAN_READ
    )
    .fetch_all(&mut *conn)
    .await?;
    let (candidates, around): (Vec<_>, Vec<_>) = rows.iter().partition(|r| r.part == 0);
    let (mut out, far_apart) = place(
        candidates
            .into_iter()
            .map(|c| streams::Candidate {
                id: c.seq,
                stream: c.session_id.as_str(),
                at: (c.sent_at, c.seq),
                asks: c.flag,
                text: c.text.as_deref(),
            })
            .collect(),
        around
            .into_iter()
            .map(|r| streams::Around {
                stream: r.session_id.as_str(),
                at: (r.sent_at, r.seq),
                ends_asking: r.flag,
                in_range: r.part == 2,
            })
            .collect(),
    );
    let mut probed = probe_around(conn, &far_apart).await?;
    for c in &far_apart {
        let (previous, next) = probed.remove(&c.id).unwrap_or_default();
        out.insert(c.id, c.stream(previous, next));
    }
    Ok((out, far_apart.iter().map(|c| c.id).collect()))
}

/// For each of `candidates` (already read), the user or assistant message just before it in its
/// session (with whether it ends with a question) and the one just after it, each by its own
/// index probe.
async fn probe_around(
    conn: &mut Scoped,
    candidates: &[streams::Candidate<'_, i64, &str>],
) -> ApiResult<HashMap<i64, (Option<(i64, bool)>, Option<i64>)>> {
    if candidates.is_empty() {
        return Ok(HashMap::new());
    }
    let seqs: Vec<i64> = candidates.iter().map(|c| c.id).collect();
    let sessions: Vec<&str> = candidates.iter().map(|c| c.stream).collect();
    let times: Vec<DateTime<Utc>> = candidates.iter().map(|c| c.at.0).collect();
    let rows = sqlx::query!(
        r#"SELECT k.seq AS "seq!", p.seq AS "previous?",
                coalesce(p.ends_asking, false) AS "follows_question!", n.seq AS "next?"
         FROM unnest($1::int8[], $2::text[], $3::timestamptz[]) AS k(seq, session_id, sent_at)
         LEFT JOIN LATERAL (
             SELECT p.seq, p.ends_asking FROM conversation_messages p
             WHERE p.tenant_id = (SELECT current_setting('mnemo.tenant'))
               AND p.user_id = (SELECT current_setting('mnemo.user'))
               AND p.session_id = k.session_id AND p.sender IN ('user', 'ai')
               AND (p.sent_at, p.seq) < (k.sent_at, k.seq)
             ORDER BY p.sent_at DESC, p.seq DESC LIMIT 1
         ) p ON true
         LEFT JOIN LATERAL (
             SELECT n.seq FROM conversation_messages n
             WHERE n.tenant_id = (SELECT current_setting('mnemo.tenant'))
               AND n.user_id = (SELECT current_setting('mnemo.user'))
               AND n.session_id = k.session_id AND n.sender IN ('user', 'ai')
               AND (n.sent_at, n.seq) > (k.sent_at, k.seq)
             ORDER BY n.sent_at, n.seq LIMIT 1
         ) n ON true"#,
        &seqs,
        &sessions as &[&str],
        &times
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let previous = r.previous.map(|p| (p, r.follows_question));
            (r.seq, (previous, r.next))
        })
        .collect())
}

/// Ranked search over the caller's archived messages; see [`crate::search`] for the modes.
///
/// `exclude` names messages `(session_id, message_id)` the caller does not want (a chat turn's
/// recall leaves out what its window holds): the ranking looks that many places deeper, and
/// they are dropped before the hits are rendered, so the answer holds up to `limit` others and
/// no snippet or neighbour is looked up for a message that is then thrown away.
pub async fn search_messages(
    conn: &mut Scoped,
    request: &ChatSearchRequest,
    retention_days: Option<i32>,
    mode: SearchMode,
    vector: Option<&QueryVector>,
    exclude: &[(String, String)],
) -> ApiResult<ChatSearchResults> {
    let (text, filters, limit) = filters(request, retention_days)?;
    // How deep the ranking is read: every excluded message may take a place (at most 50 more).
    let depth = limit as usize + exclude.len().min(50);
    let vector = vector.filter(|_| mode.semantic());
    let degraded = mode.semantic() && vector.is_none();
    let keyword_side = mode.keyword() || degraded;
    crate::search::begin_search(conn, crate::search::words_only(mode, vector)).await?;

    // Each side's candidates are scored on the other side too (as in the memory search): the
    // nearest first, then the keyword ranking with the keyword scores of those, then the
    // similarity of the keyword candidates the vector side did not bring.
    let mut near = Vec::new();
    if let Some(vector) = vector {
        near = vector_candidates(conn, vector, &filters, None).await?;
    }
    let mut keyword = Vec::new();
    if keyword_side {
        let also: Vec<i64> = near.iter().map(|n| n.seq).collect();
        let also = (!also.is_empty()).then_some(also);
        let follow = follow_weight(vector.is_none(), &text);
        keyword = keyword_candidates(conn, &text, &filters, also.as_deref(), follow).await?;
    }
    if let Some(vector) = vector.filter(|_| keyword_side) {
        let missing: Vec<i64> = keyword
            .iter()
            .map(|k| k.seq)
            .filter(|seq| !near.iter().any(|n| n.seq == *seq))
            .collect();
        if !missing.is_empty() {
            near.extend(vector_candidates(conn, vector, &filters, Some(&missing)).await?);
        }
    }
    let pairs =
        |side: &[Scored]| -> Vec<(i64, f32)> { side.iter().map(|s| (s.seq, s.score)).collect() };
    let mut candidates = candidates(&pairs(&keyword), &pairs(&near));
    set_crowding(
        &mut candidates,
        near.iter().map(|n| (n.seq, n.alone.as_ref())),
        vector.map_or(0.0, |v| v.crowd_weight),
    );
    let query_weight = keyword.iter().find_map(|k| k.query_weight);
    let words_weight = words_weight(&candidates, query_weight);
    let mut ranked = fuse(
        candidates,
        vector.map_or(crate::search::fusion::KEYWORD_WEIGHT, |v| v.keyword_weight),
        query_weight,
    );
    let lifts = LIFTS.for_query(&text);
    let lifted = liftable(&ranked, depth, lifts);
    let seqs: Vec<i64> = ranked[..lifted].iter().map(|r| r.id).collect();
    let neighbours = placed_or_found(conn, &seqs, &keyword, text.asks_when).await?;
    lift_by_neighbours(&mut ranked, &neighbours, lifts);
    let deeper = ranked.len() > depth;
    ranked.truncate(depth);

    let seqs: Vec<i64> = ranked.iter().map(|r| r.id).collect();
    let highlight: Vec<bool> = ranked.iter().map(|r| r.keyword.is_some()).collect();
    let (gone_sessions, gone_ids): (Vec<&str>, Vec<&str>) = exclude
        .iter()
        .map(|(session, id)| (session.as_str(), id.as_str()))
        .unzip();
    // The hits in rank order less the excluded ones; only the first `limit` of those are
    // rendered (snippet, agent, the ids around them), and `kept` counts all of them.
    let shown = sqlx::query_as!(
        Shown,
        r#"WITH q AS (SELECT websearch_to_tsquery('english', mnemo_memory_search_text($1)) AS q)
         SELECT h.ord AS "ord!", h.kept AS "kept!", h.session_id, h.message_id, h.sender,
                h.sent_at, s.agent_name,
                CASE WHEN h.highlight
                     THEN ts_headline('english', mnemo_memory_search_text(h.text), q.q,
                              'StartSel="**", StopSel="**", MaxWords=35, MinWords=12')
                     ELSE left(h.text, 300)
                END AS "snippet!",
                (SELECT p.message_id FROM conversation_messages p
                 WHERE p.tenant_id = h.tenant_id AND p.user_id = h.user_id
                   AND p.session_id = h.session_id AND (p.sent_at, p.seq) < (h.sent_at, h.seq)
                 ORDER BY p.sent_at DESC, p.seq DESC LIMIT 1) AS "previous_id?",
                (SELECT n.message_id FROM conversation_messages n
                 WHERE n.tenant_id = h.tenant_id AND n.user_id = h.user_id
                   AND n.session_id = h.session_id AND (n.sent_at, n.seq) > (h.sent_at, h.seq)
                 ORDER BY n.sent_at, n.seq LIMIT 1) AS "next_id?"
         FROM (
             SELECT u.ord, u.highlight, m.tenant_id, m.user_id, m.session_id, m.message_id,
                    m.sender, m.sent_at, m.seq, m.text,
                    row_number() OVER (ORDER BY u.ord) AS place, count(*) OVER () AS kept
             FROM unnest($2::int8[], $3::bool[]) WITH ORDINALITY AS u(seq, highlight, ord)
             -- One index lookup per hit in every plan (see `neighbours`).
             CROSS JOIN LATERAL (
                 SELECT * FROM conversation_messages m
                 WHERE m.tenant_id = (SELECT current_setting('mnemo.tenant'))
                   AND m.user_id = (SELECT current_setting('mnemo.user')) AND m.seq = u.seq
                 LIMIT 1
             ) m
             WHERE NOT EXISTS (
                 SELECT 1 FROM unnest($4::text[], $5::text[]) AS x(session_id, message_id)
                 WHERE x.session_id = m.session_id AND x.message_id = m.message_id
             )
         ) h
         CROSS JOIN q
         CROSS JOIN LATERAL (
             SELECT s.agent_name FROM agent_sessions s
             WHERE s.tenant_id = h.tenant_id AND s.user_id = h.user_id
               AND s.session_id = h.session_id
             LIMIT 1
         ) s
         WHERE h.place <= $6
         ORDER BY h.ord"#,
        &text.any,
        &seqs,
        &highlight,
        &gone_sessions as &[&str],
        &gone_ids as &[&str],
        i64::from(limit)
    )
    .fetch_all(&mut *conn)
    .await?;
    let has_more = deeper || shown.first().is_some_and(|m| m.kept > i64::from(limit));
    let hits = shown
        .into_iter()
        .filter_map(|m| Some((ranked.get(usize::try_from(m.ord - 1).ok()?)?, m)))
        .map(|(rank, m)| MessageHit {
            session_id: m.session_id,
            message_id: m.message_id,
            sender: m.sender,
            timestamp: m.sent_at,
            agent_id: m.agent_name,
            snippet: m.snippet,
            score: rank.score,
            keyword_rank: rank.keyword_rank,
            vector_rank: rank.vector_rank,
            similarity: rank.similarity,
            previous_message_id: m.previous_id,
            next_message_id: m.next_id,
        })
        .collect();
    Ok(ChatSearchResults {
        mode: if degraded { SearchMode::Keyword } else { mode },
        degraded,
        hits,
        has_more,
        words_weight,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Principal;
    use crate::db::Db;
    use crate::search::when::tells_time;
    use sqlx::PgPool;

    /// The neighbours as they were looked up before the range reads, for comparison: three
    /// index probes per candidate (the message, the one before it, the one after it).
    async fn probed_neighbours(
        conn: &mut Scoped,
        seqs: &[i64],
        asks_when: bool,
    ) -> ApiResult<HashMap<i64, Stream<i64>>> {
        let rows = sqlx::query!(
            r#"SELECT m.seq, p.seq AS "previous?", coalesce(mnemo_ends_asking(p.text), false) AS "follows_question!",
                    n.seq AS "next?", coalesce(mnemo_only_asks(m.text), false) AS "asks!",
                    CASE WHEN $2 THEN m.text END AS "text?"
             FROM (SELECT DISTINCT unnest($1::int8[])) AS k(seq)
             CROSS JOIN LATERAL (
                 SELECT * FROM conversation_messages m
                 WHERE m.tenant_id = (SELECT current_setting('mnemo.tenant'))
                   AND m.user_id = (SELECT current_setting('mnemo.user')) AND m.seq = k.seq
                 LIMIT 1
             ) m
             LEFT JOIN LATERAL (
                 SELECT p.seq, p.text FROM conversation_messages p
                 WHERE p.tenant_id = m.tenant_id AND p.user_id = m.user_id
                   AND p.session_id = m.session_id AND p.sender IN ('user', 'ai')
                   AND (p.sent_at, p.seq) < (m.sent_at, m.seq)
                 ORDER BY p.sent_at DESC, p.seq DESC LIMIT 1
             ) p ON true
             LEFT JOIN LATERAL (
                 SELECT n.seq FROM conversation_messages n
                 WHERE n.tenant_id = m.tenant_id AND n.user_id = m.user_id
                   AND n.session_id = m.session_id AND n.sender IN ('user', 'ai')
                   AND (n.sent_at, n.seq) > (m.sent_at, m.seq)
                 ORDER BY n.sent_at, n.seq LIMIT 1
             ) n ON true"#,
            seqs,
            asks_when
        )
        .fetch_all(&mut *conn)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| {
                let stream = Stream {
                    previous: r.previous,
                    follows_question: r.follows_question,
                    next: r.next,
                    asks: r.asks,
                    tells_time: r.text.as_deref().is_some_and(tells_time),
                };
                (r.seq, stream)
            })
            .collect())
    }

    /// The `seq`s of the caller's messages in `session`, by time.
    async fn seqs(pool: &PgPool, session: &str) -> Vec<i64> {
        sqlx::query_scalar(
            "SELECT seq FROM conversation_messages
             WHERE tenant_id = 'acme' AND user_id = 'alice' AND session_id = $1
             ORDER BY sent_at, seq",
        )
        .bind(session)
        .fetch_all(pool)
        .await
        .unwrap()
    }

    /// Sessions a (120 messages, every third from a tool, every fourth a question; written in
    /// an order their times do not follow, pairs sharing a time), b of three, c of one and d
    /// of four that say when, of alice at acme; and a scoped connection as her.
    async fn sessions_abc(pool: &PgPool) -> Scoped {
        for session in ["a", "b", "c", "d"] {
            sqlx::query(
                "INSERT INTO agent_sessions (tenant_id, user_id, session_id, agent_name)
                 VALUES ('acme', 'alice', $1, 'bot')",
            )
            .bind(session)
            .execute(pool)
            .await
            .unwrap();
        }
        sqlx::query(
            "INSERT INTO conversation_messages (tenant_id, user_id, session_id, message_id,
                                                sender, text, sent_at)
             SELECT 'acme', 'alice', m.* FROM (
                 SELECT 'a', 'm' || i, (ARRAY['user', 'ai', 'tool'])[1 + i % 3],
                        CASE WHEN i % 4 = 0 THEN 'Where did we leave it?'
                             ELSE 'We left it at ' || i END,
                        timestamptz '2026-01-01' + ((i * 7) % 120 / 2) * interval '1 minute'
                 FROM generate_series(0, 119) i
                 UNION ALL
                 VALUES ('b', 'b1', 'user', 'Anything new?', timestamptz '2026-01-02'),
                        ('b', 'b2', 'ai', 'A new build.', '2026-01-02 00:01'),
                        ('b', 'b3', 'user', 'Good.', '2026-01-02 00:02'),
                        ('c', 'c1', 'ai', 'Only this.', '2026-01-03'),
                        ('d', 'd1', 'user', 'When did we leave the build?', '2026-01-04'),
                        ('d', 'd2', 'tool', 'build left at 09:00', '2026-01-04 00:01'),
                        ('d', 'd3', 'ai', 'We left the build on Monday.', '2026-01-04 00:02'),
                        ('d', 'd4', 'user', 'Then leave it.', '2026-01-04 00:03')
             ) m",
        )
        .execute(pool)
        .await
        .unwrap();
        let principal = Principal {
            tenant_id: "acme".into(),
            user_id: "alice".into(),
            scopes: vec![],
        };
        Db::new(pool.clone()).scoped(&principal).await.unwrap()
    }

    /// The range reads find the same neighbours as probing each candidate: for candidates next
    /// to each other (read as ranges), far apart (left to the probes), alone in their session,
    /// tool messages among them, times out of the order of writing and times shared.
    #[sqlx::test]
    async fn ranges_find_the_neighbours_probes_find(pool: PgPool) {
        let mut conn = sessions_abc(&pool).await;
        let a = seqs(&pool, "a").await;
        let b = seqs(&pool, "b").await;
        let c = seqs(&pool, "c").await;
        let cases: Vec<(Vec<i64>, bool)> = vec![
            (a.clone(), false),
            (a[10..14].to_vec(), false),
            // Further apart than the range reads, which reach only the first few of five.
            (
                a.iter()
                    .step_by(3 * SPAN_READ as usize + 3)
                    .copied()
                    .collect(),
                true,
            ),
            (
                [&a[20..22], &b[..2], &c[..], &[b[2], 999_999_999]].concat(),
                false,
            ),
        ];
        for (candidates, far) in cases {
            for asks_when in [false, true] {
                let (spanned, far_apart) = spanned_neighbours(&mut conn, &candidates, asks_when)
                    .await
                    .unwrap();
                assert_eq!(!far_apart.is_empty(), far, "{candidates:?}");
                // A range cut short still places the candidates it reached past.
                assert!(far_apart.len() < candidates.len() - 1, "{far_apart:?}");
                let probed = probed_neighbours(&mut conn, &candidates, asks_when)
                    .await
                    .unwrap();
                let found = neighbours(&mut conn, &candidates, asks_when).await.unwrap();
                assert_eq!(found, probed, "{candidates:?}");
                if !far {
                    assert_eq!(spanned, probed, "{candidates:?}");
                }
                assert_eq!(
                    found.len(),
                    candidates.iter().filter(|s| **s != 999_999_999).count()
                );
            }
        }
        // Some candidates follow questions, and some messages around them are tools'.
        let all = neighbours(&mut conn, &a, false).await.unwrap();
        assert!(all.values().any(|s| s.follows_question));
        assert!(all.values().any(|s| s.asks));
        assert!(all.values().any(|s| s.previous.is_none()));
    }

    /// The exact keyword ranking of a short history ranks as the one of a longer history and
    /// places its user and AI messages in their sessions as probing each one does, followers and the other side's candidates among them, whatever the
    /// filters (a message's neighbours are its session's, before and after any time range);
    /// tool messages, and a tool message's follower, it leaves to [`neighbours`].
    #[sqlx::test]
    async fn the_exact_ranking_places_candidates_as_probes_do(pool: PgPool) {
        let mut conn = sessions_abc(&pool).await;
        let messages: Vec<(i64, String, DateTime<Utc>)> = sqlx::query_as(
            "SELECT seq, sender, sent_at FROM conversation_messages WHERE tenant_id = 'acme'",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        let senders: HashMap<i64, String> = messages.iter().map(|m| (m.0, m.1.clone())).collect();
        let sent: HashMap<i64, DateTime<Utc>> = messages.iter().map(|m| (m.0, m.2)).collect();
        let a = seqs(&pool, "a").await;
        let unfiltered = || Filters {
            session_id: None,
            agent_id: None,
            after: None,
            before: None,
            retention_days: None,
        };
        let cases = [
            ("where did we leave it", unfiltered()),
            ("When did we leave the build?", unfiltered()),
            (
                "leave it",
                Filters {
                    session_id: Some("a".into()),
                    ..unfiltered()
                },
            ),
            (
                "leave or left",
                Filters {
                    after: "2026-01-01T00:20:00Z".parse().ok(),
                    before: "2026-01-01T00:40:00Z".parse().ok(),
                    retention_days: Some(3650),
                    ..unfiltered()
                },
            ),
            (
                "build",
                Filters {
                    agent_id: Some("bot".into()),
                    ..unfiltered()
                },
            ),
        ];
        let mut placed_followers = 0;
        for (query, filters) in &cases {
            let text = TextQuery::parse("query", query).unwrap();
            let also = [a[1], a[2], a[3]];
            let follow = crate::search::fusion::FOLLOW_WEIGHT;
            let rows =
                exact_keyword_candidates(&mut conn, &text, filters, Some(&also), follow, true)
                    .await
                    .unwrap();
            assert!(!rows.is_empty(), "{query}");
            // It ranks as the statement that does not place them, score for score.
            let unplaced =
                exact_keyword_candidates(&mut conn, &text, filters, Some(&also), follow, false)
                    .await
                    .unwrap();
            let scores = |rows: &[Scored]| -> Vec<(i64, f32, Option<f32>)> {
                rows.iter()
                    .map(|r| (r.seq, r.score, r.query_weight))
                    .collect()
            };
            assert_eq!(scores(&rows), scores(&unplaced), "{query}");
            assert!(unplaced.iter().all(|r| r.stream().is_none()));
            let seqs: Vec<i64> = rows.iter().map(|r| r.seq).collect();
            let probed = probed_neighbours(&mut conn, &seqs, text.asks_when)
                .await
                .unwrap();
            let mut placed = 0;
            let mut unplaced_spoken = 0;
            for row in &rows {
                let tool = senders[&row.seq] == "tool";
                match row.stream() {
                    Some(stream) => {
                        assert!(!tool, "{query}: {}", row.seq);
                        assert_eq!(Some(&stream), probed.get(&row.seq), "{query}: {}", row.seq);
                        placed += 1;
                        let matched = sqlx::query_scalar::<_, bool>(
                            "SELECT tsv @@ websearch_to_tsquery('english', $2)
                             FROM conversation_messages WHERE tenant_id = 'acme' AND seq = $1",
                        )
                        .bind(row.seq)
                        .bind(&text.any)
                        .fetch_one(&pool)
                        .await
                        .unwrap();
                        placed_followers += usize::from(!matched);
                    }
                    None if tool => {}
                    None => unplaced_spoken += 1,
                }
            }
            assert!(placed > 0, "{query}");
            // Only a tool message's follower is left unplaced, one per tool message.
            let tools = rows.iter().filter(|r| senders[&r.seq] == "tool").count();
            assert!(
                unplaced_spoken <= tools,
                "{query}: {unplaced_spoken} > {tools}"
            );
            // The time filters left the matches out, not the neighbours.
            if let Some(after) = filters.after {
                let before = filters.before.unwrap();
                let outside = |seq: &i64| sent[seq] < after || sent[seq] >= before;
                assert!(
                    rows.iter().filter_map(|r| r.stream()).any(|s| s
                        .previous
                        .iter()
                        .chain(&s.next)
                        .any(outside)),
                    "{seqs:?}"
                );
            }
            // The search asking when reads the texts, and some tell when.
            if text.asks_when {
                assert!(
                    rows.iter()
                        .any(|r| r.stream().is_some_and(|s| s.tells_time))
                );
            }
        }
        // Followers that matched no word were placed too.
        assert!(placed_followers > 0);
    }
}
