//! Search over task history (messages, execution-log events, snapshots, step text and tool
//! results), of one task or of all the caller's tasks: by words, by meaning, or both.
//!
//! By words the query's terms are ORed and ranked by [`idf_ranking`] like every other search,
//! and the ranking pages by offset: over every match of one task, or of all tasks while the
//! caller's task history is shorter than the keyword sample; over a longer one, over the
//! candidates the sample bounds, as the message search bounds them (see [`TASKS_CORPUS`]). By
//! meaning each item is compared with the query's embedding through `task_vectors` (filled by
//! the background indexer). Both sides contribute
//! their best [`CANDIDATES`], each candidate is scored on both sides, and
//! [`fuse`](crate::search::fuse) ranks them; a hybrid or semantic search pages through that list.

use std::collections::HashMap;
use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use sqlx::postgres::PgArguments;
use sqlx::query::QueryAs;
use sqlx::{FromRow, Postgres};
use uuid::Uuid;

use super::model::*;
use crate::db::Scoped;
use crate::error::ApiResult;
use crate::search::fusion::{candidates, set_crowding, words_weight};
use crate::search::query::{
    BoundedTerms, Corpus, KEYWORD_SAMPLE, QUERY_CTE, Ranking, bounded_terms_cte, choose_ranking,
    idf_ranking, matches_cte, recent_matches, sample_edge, scored_cte,
};
use crate::search::similarity::{alone_vector, grouped_cte, mean_similarity};
use crate::search::sizes::SampleEdge;
use crate::search::{QueryVector, SearchMode, TextQuery, fuse, scope_unseen};

/// Most candidates each side contributes to a semantic or hybrid ranking.
pub const CANDIDATES: i64 = 100;

/// An item of task history: task, source (`message`, `event`, `snapshot`, `step_text`,
/// `tool_result`), seq, and for step texts the part and the chunk's character offset (-1 for
/// the other sources).
pub type Item = (Uuid, String, i64, i32, i32);

/// What a search of task history found: hits of the page, whether more follow, and whether the
/// embedder failed so that only words ranked (`degraded`).
#[derive(Debug)]
pub struct Found {
    pub hits: Vec<SearchHit>,
    pub more: bool,
    pub mode: SearchMode,
    pub degraded: bool,
    /// When words alone ranked the hits, what an item holding every word of the query would
    /// score (see [`crate::memories::model::SearchResults::words_weight`]).
    pub words_weight: Option<f32>,
}

/// Which of the caller's texts a keyword statement counts, on a table aliased `alias`: one
/// task's (`$3`), or every task's (`$3` null). Two statement texts, not one condition `$3 IS NULL
/// OR task_id = $3`: a word search runs on a generic plan (see
/// [`crate::search::begin_search`]), which cannot use that condition to reach one task, so a
/// search of one task counted the texts of every task of the caller for its document
/// frequencies (33,000 for one task's 700, in a check of its plans).
fn of_tasks(alias: &str, one_task: bool) -> String {
    if one_task {
        format!("{alias}.task_id = $3")
    } else {
        // Binds `$3` all the same, so that both texts take the same parameters.
        "$3::uuid IS NULL".to_owned()
    }
}

/// The keys of an item of task history, as its CTEs name them.
const ITEM_KEYS: &str = "task_id, source, seq, part_index, char_offset";
/// The columns a ranking carries for each item: its keys and its time (`at`, a step text's
/// being its step's), by which equal scores are ordered, newest first.
const RANK_KEYS: &str = "task_id, source, seq, part_index, char_offset, at";

/// The time of the step of a step text aliased `alias`, looked up by key.
fn step_time(alias: &str) -> String {
    format!(
        "(SELECT st.created_at FROM task_steps st
          WHERE {scope} AND st.task_id = {alias}.task_id AND st.seq = {alias}.seq)",
        scope = scope_unseen("st")
    )
}

/// One of the four tables of task history, as the keyword statements read it.
struct TaskTable {
    table: &'static str,
    alias: &'static str,
    /// The items' source; `None` for the step texts, whose source is their `kind`.
    source: Option<&'static str>,
    /// The column of the text's time; `None` for the step texts, whose time is their step's.
    time: Option<&'static str>,
}

/// The tables of task history: messages, execution-log events, snapshots and step texts.
const TASK_TABLES: [TaskTable; 4] = [
    TaskTable {
        table: "task_messages",
        alias: "m",
        source: Some("message"),
        time: Some("created_at"),
    },
    TaskTable {
        table: "task_events",
        alias: "e",
        source: Some("event"),
        time: Some("ts"),
    },
    TaskTable {
        table: "task_snapshots",
        alias: "s",
        source: Some("snapshot"),
        time: Some("ts"),
    },
    TaskTable {
        table: "task_step_texts",
        alias: "t",
        source: None,
        time: None,
    },
];

impl TaskTable {
    /// A row's item keys, `at` and `tsv` ([`RANK_KEYS`] and `tsv`), for a row of this table
    /// aliased as the table is.
    fn columns(&self) -> String {
        let a = self.alias;
        let source = self
            .source
            .map_or(format!("{a}.kind"), |s| format!("'{s}'::text"));
        let (part, offset) = match self.source {
            Some(_) => ("NULL::int".to_owned(), "NULL::int".to_owned()),
            None => (format!("{a}.part_index"), format!("{a}.char_offset")),
        };
        let at = self.time.map_or(step_time(a), |t| format!("{a}.{t}"));
        format!(
            "{a}.task_id, {source} AS source, {a}.seq::int8 AS seq, {part} AS part_index,
             {offset} AS char_offset, {at} AS at, {a}.tsv"
        )
    }

    /// The row of the item whose key is in a CTE `k`, as a lateral subquery aliased as the
    /// table is, with a condition on `k` when the source is the table's own.
    fn by_key(&self) -> (String, String) {
        match self.source {
            Some(source) => (
                by_seq(self.table, self.alias, &format!("{}.*", self.alias)),
                format!("WHERE k.source = '{source}'"),
            ),
            None => (step_text_by_key("t.*"), String::new()),
        }
    }
}

/// The caller's texts matching the query's words, as a CTE `hits` (item keys, `at` and `tsv`), of
/// one task or of all (see [`of_tasks`]). All tasks' are found through the word indexes
/// (`mnemo_task_matches`), which read the matches of the query's words only; one task's by
/// reading that task's texts, which bound the search whatever the caller's other tasks hold.
fn exact_hits(one_task: bool) -> String {
    if !one_task {
        return "hits AS MATERIALIZED (
             SELECT h.task_id, h.source, h.seq, h.part_index, h.char_offset, h.at, h.tsv
             FROM q, mnemo_task_matches(q.terms, NULL) h
             WHERE numnode(q.pos) > 0 AND h.tsv @@ q.q
         )"
        .to_owned();
    }
    let branches: Vec<String> = TASK_TABLES
        .iter()
        .map(|t| {
            format!(
                "SELECT {columns} FROM {table} {a}, q
                 WHERE numnode(q.pos) > 0 AND {a}.tsv @@ q.q AND {of_task}",
                columns = t.columns(),
                table = t.table,
                a = t.alias,
                of_task = of_tasks(t.alias, true),
            )
        })
        .collect();
    format!("hits AS MATERIALIZED ({})", branches.join(" UNION ALL "))
}

/// Texts the document frequencies are taken over: all the caller's history, or one task's.
fn corpus(one_task: bool) -> String {
    let count = |table: &str| {
        format!(
            "(SELECT count(*) FROM {table} c WHERE {})",
            of_tasks("c", one_task)
        )
    };
    format!(
        "SELECT {} + {} + {} + {}",
        count("task_messages"),
        count("task_events"),
        count("task_snapshots"),
        count("task_step_texts")
    )
}

/// The newest of one table's task texts of the caller, by task (a task's id is a UUIDv7, so
/// tasks come in the order they were made) and sequence number: at most the sample
/// (`KEYWORD_SAMPLE`, checked below), with the columns `task_id`, `seq` (`int8`) and `$extra`.
/// A branch of the merged order of all four tables, which reads each table's primary key
/// backwards; the tables' sequence numbers are not all of one type, so PostgreSQL cannot merge
/// the four orders itself, and the branches' limits keep it from sorting every text.
macro_rules! newest_of {
    ($table:literal, $extra:literal) => {
        concat!(
            "(SELECT x.task_id, x.seq::int8 AS seq",
            $extra,
            " FROM ",
            $table,
            " x WHERE x.tenant_id = current_setting('mnemo.tenant')
               AND x.user_id = current_setting('mnemo.user')
             ORDER BY x.task_id DESC, x.seq DESC LIMIT 5000)"
        )
    };
}

/// The caller's task texts newest first (see [`newest_of`]), with the columns `task_id`, `seq`
/// and `$extra`; without a limit of its own beyond the sample.
macro_rules! newest_task_texts {
    ($select:literal, $extra:literal) => {
        concat!(
            $select,
            " FROM (",
            newest_of!("task_messages", $extra),
            " UNION ALL ",
            newest_of!("task_events", $extra),
            " UNION ALL ",
            newest_of!("task_snapshots", $extra),
            " UNION ALL ",
            newest_of!("task_step_texts", $extra),
            ") r ORDER BY r.task_id DESC, r.seq DESC"
        )
    };
}

// The branches of `newest_of` hold the sample.
const _: () = assert!(KEYWORD_SAMPLE == 5000);

/// The task texts a keyword search of every task ranks (see [`Corpus`]): the messages,
/// execution-log events, snapshots and step texts of all the caller's tasks, newest first by task
/// and sequence number.
pub(crate) const TASKS_CORPUS: Corpus = Corpus {
    kind: "tasks",
    recent: newest_task_texts!("SELECT r.tsv", ", x.tsv"),
    // Through the word indexes (see `mnemo_task_matches`).
    matching: "SELECT 1 FROM mnemo_task_matches(ARRAY[t.term], $4)",
    corpus: "SELECT (SELECT count(*) FROM task_messages c
                     WHERE c.tenant_id = current_setting('mnemo.tenant')
                       AND c.user_id = current_setting('mnemo.user'))
                  + (SELECT count(*) FROM task_events c
                     WHERE c.tenant_id = current_setting('mnemo.tenant')
                       AND c.user_id = current_setting('mnemo.user'))
                  + (SELECT count(*) FROM task_snapshots c
                     WHERE c.tenant_id = current_setting('mnemo.tenant')
                       AND c.user_id = current_setting('mnemo.user'))
                  + (SELECT count(*) FROM task_step_texts c
                     WHERE c.tenant_id = current_setting('mnemo.tenant')
                       AND c.user_id = current_setting('mnemo.user'))",
    recent_keys: newest_task_texts!("SELECT r.task_id AS id, r.seq AS n", ""),
    matching_keys: "SELECT task_id, seq FROM mnemo_task_matches(ARRAY[t.term], $4)",
    in_sample: "(m.task_id, m.seq) >= ($5::uuid, $6::int8)",
};

/// How a keyword search of task history ranks: a search of one task, or of a history shorter
/// than the sample, every match exactly; a search of all of a long history, a bounded candidate
/// set (see [`bounded_ctes`]).
enum TaskRanking {
    /// Every match; `texts`, the caller's texts when the choice counted them (a search of all
    /// tasks), so that the ranking need not count them again.
    Exact {
        texts: Option<i64>,
    },
    Bounded(BoundedTerms, SampleEdge),
}

/// Chooses the ranking of a search of `text` in the caller's task history (one task's, with
/// `task_id`); see [`choose_ranking`]. `None` when the query has no terms: nothing matches.
async fn task_ranking(
    tx: &mut Scoped,
    task_id: Option<Uuid>,
    text: &TextQuery,
) -> Result<Option<TaskRanking>, sqlx::Error> {
    if task_id.is_some() {
        return Ok(Some(TaskRanking::Exact { texts: None }));
    }
    Ok(match choose_ranking(tx, &TASKS_CORPUS, text).await? {
        Ranking::Exact { texts } => Some(TaskRanking::Exact { texts: Some(texts) }),
        Ranking::Nothing => None,
        Ranking::Bounded(bounded) => Some(match sample_edge(tx, &TASKS_CORPUS).await? {
            Some(edge) => TaskRanking::Bounded(bounded, edge),
            // The history shrank under the sample since it was counted.
            None => TaskRanking::Exact { texts: None },
        }),
    })
}

/// The newest of the caller's texts of `table` at or past the sample's oldest text (`${edge}`
/// its task, `${edge + 1}` its sequence number) that match the query, at most `${recent}` of
/// them, with the item keys, `at` and `tsv`.
///
/// Read backwards along the primary key, which stops at the limit: the planner cannot tell how
/// few texts lie past the edge (it weighs the row comparison by the task alone, and a long task
/// is most of a caller's texts), and without the order and limit it read the whole table
/// instead (45 ms for the 100,000 messages of one task, to find none past an edge among its
/// events).
fn recent_of(table: &TaskTable, edge: usize, recent: usize) -> String {
    let a = table.alias;
    format!(
        "(SELECT {columns}
          FROM {name} {a}
          WHERE {a}.tenant_id = current_setting('mnemo.tenant')
            AND {a}.user_id = current_setting('mnemo.user')
            AND ({a}.task_id, {a}.seq) >= (${edge}::uuid, ${}::int8)
            -- The query as an init plan: tested as each text is read.
            AND {a}.tsv @@ (SELECT q.q FROM q WHERE numnode(q.pos) > 0)
          ORDER BY {a}.task_id DESC, {a}.seq DESC
          LIMIT ${recent})",
        edge + 1,
        columns = table.columns(),
        name = table.table,
    )
}

/// The CTE `also` (item keys, `at` and `tsv`): the items whose keys are the arrays `${keys}` to
/// `${keys + 4}` (task, source, seq, part, offset as in [`Item`]), each looked up by its key.
fn also_cte(keys: usize) -> String {
    let k = |i: usize| format!("${}", keys + i);
    let items = format!(
        "unnest({}::uuid[], {}::text[], {}::int8[], {}::int4[], {}::int4[])
             AS k(task_id, source, seq, part_index, char_offset)",
        k(0),
        k(1),
        k(2),
        k(3),
        k(4)
    );
    let branches: Vec<String> = TASK_TABLES
        .iter()
        .map(|t| {
            let (row, only) = t.by_key();
            format!("SELECT {} FROM {items} {row} {only}", t.columns())
        })
        .collect();
    format!("also AS MATERIALIZED ({})", branches.join(" UNION ALL "))
}

/// The CTEs of a bounded keyword ranking of all the caller's task history, after the query's
/// (`$1`, `$2`): the query's terms with their estimated frequencies, and the candidates, as the
/// message search bounds them (see `crate::conversations::search`): every text holding a rare
/// term, found through the word indexes with its exact frequency, and the newest matches among
/// the sample's texts (those at or past its oldest), at most a bound of them; with `also` (the
/// parameter of the first of its key arrays), the other side's candidates however old. The
/// parameters from `${first}` on: the terms (`text[]`), their estimates (`float8[]`), the rare
/// terms (`text[]`), the corpus size (`float8`), the most recent matches (`int8`), the sample's
/// oldest text's task (`uuid`) and sequence number (`int8`), as [`bind_bounded`] binds them.
fn bounded_ctes(first: usize, also: Option<usize>) -> String {
    let p = |i: usize| format!("${}", first + i);
    let edge = first + 5;
    let (also_cte, also_hits) = match also {
        Some(keys) => (
            format!(", {}", also_cte(keys)),
            "UNION ALL SELECT a.* FROM also a, q WHERE numnode(q.pos) > 0 AND a.tsv @@ q.q",
        ),
        None => (String::new(), ""),
    };
    format!(
        "{terms}, rare_hits AS MATERIALIZED (
             SELECT r.task_id, r.source, r.seq, r.part_index, r.char_offset, r.at, r.tsv
             FROM mnemo_task_matches({rare}::text[], NULL) r
             WHERE cardinality({rare}::text[]) > 0
         ), recent AS MATERIALIZED (
             SELECT r.* FROM ({newest}) r
             ORDER BY r.task_id DESC, r.seq DESC LIMIT {recent}
         ){also_cte}, hits AS MATERIALIZED (
             SELECT DISTINCT ON ({ITEM_KEYS}) *
             FROM (SELECT r.* FROM rare_hits r, q WHERE numnode(q.pos) > 0 AND r.tsv @@ q.q
                   UNION ALL SELECT * FROM recent
                   {also_hits}) u
         ), df AS (
             SELECT t.term,
                    coalesce(t.estimate, (SELECT count(*) FROM rare_hits r WHERE r.tsv @@ t.tq))
                        AS n
             FROM terms t
         ), {matches}, {scored}",
        terms = bounded_terms_cte(&p(0), &p(1)),
        rare = p(2),
        recent = p(4),
        newest = TASK_TABLES
            .iter()
            .map(|t| recent_of(t, edge, first + 4))
            .collect::<Vec<_>>()
            .join(" UNION ALL "),
        matches = matches_cte(RANK_KEYS),
        scored = scored_cte(RANK_KEYS, &format!("{}::float8", p(3))),
    )
}

/// Binds the parameters of `ranking` that [`keyword_ctes`] takes from `${first}` on.
fn bind_ranking<'q, O>(
    query: QueryAs<'q, Postgres, O, PgArguments>,
    ranking: &'q TaskRanking,
) -> QueryAs<'q, Postgres, O, PgArguments> {
    match ranking {
        TaskRanking::Bounded(bounded, edge) => query
            .bind(&bounded.names)
            .bind(&bounded.estimates)
            .bind(&bounded.rare_terms)
            .bind(bounded.corpus)
            .bind(recent_matches(false, 1))
            .bind(edge.id)
            .bind(edge.n),
        TaskRanking::Exact { texts: Some(texts) } => query.bind(*texts),
        TaskRanking::Exact { texts: None } => query,
    }
}

/// The start of a keyword statement: the query, the matching texts, and their scores (CTE
/// `scored`, and `total`). Binds `$1` (the ORed terms), `$2` (excluded terms) and `$3` (the task,
/// or null for every task, as `one_task` says); from `${first}` on, a bounded ranking the
/// parameters of [`bounded_ctes`] (with `also`, the other side's candidates), an exact one the
/// caller's texts when the choice counted them ([`bind_ranking`] binds them).
fn keyword_ctes(
    ranking: &TaskRanking,
    one_task: bool,
    first: usize,
    also: Option<usize>,
) -> String {
    match ranking {
        TaskRanking::Bounded(..) => {
            format!("WITH {QUERY_CTE}, {}", bounded_ctes(first, also))
        }
        TaskRanking::Exact { texts } => {
            let corpus = match texts {
                Some(_) => format!("SELECT ${first}::int8"),
                None => corpus(one_task),
            };
            let ranking = idf_ranking(RANK_KEYS, &corpus);
            format!("WITH {QUERY_CTE}, {}, {ranking}", exact_hits(one_task))
        }
    }
}

/// The step text of the key in a CTE `k` (`task_id`, `source` its kind, `seq`, `part_index`,
/// `char_offset`), as a lateral subquery `t` with the columns `cols`: one index probe per key.
/// The chunks of a part start at distinct offsets, so a key names one chunk.
fn step_text_by_key(cols: &str) -> String {
    format!(
        "CROSS JOIN LATERAL (
             SELECT {cols}
             FROM task_step_texts t
             WHERE {scope}
               AND t.task_id = k.task_id AND t.seq = k.seq AND t.part_index = k.part_index
               AND t.char_offset = k.char_offset AND t.kind = k.source
             LIMIT 1
         ) t",
        scope = scope_unseen("t"),
    )
}

/// One row of a history table by its task and sequence number (those of a CTE `k`), with the
/// columns `cols`, as a lateral subquery: one index probe per key, with the scope compared
/// through sub-selects ([`scope_unseen`]).
fn by_seq(table: &str, alias: &str, cols: &str) -> String {
    format!(
        "CROSS JOIN LATERAL (
             SELECT {cols} FROM {table} {alias}
             WHERE {scope}
               AND {alias}.task_id = k.task_id AND {alias}.seq = k.seq
             LIMIT 1
         ) {alias}",
        scope = scope_unseen(alias),
    )
}

/// The documents of items in a CTE `k` (`task_id`, `source`, `seq`, `part_index`, `char_offset`,
/// `score`, `ord`), with where each sits and its time; ordered by `ord`.
///
/// Each item is looked up by its key in a lateral subquery, which every plan runs as one index
/// probe per item, with the scope compared through sub-selects ([`scope_unseen`]): for a user
/// the statistics do not know, a step looked up by task and sequence number went through the
/// steps' index by step id with the number as a filter, reading the task's other steps. Joined
/// to the tables, a plan made (generic, or cached on a pooled connection) while a caller with a
/// short history searched may read all of the caller's rows of a table once instead: measured
/// 50,000 steps read for 10 hits (13 ms, 0.5 ms as probes).
static DOCS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "docs AS (
         SELECT k.ord, m.task_id, 'message' AS source, m.seq::bigint AS seq, NULL::text AS step_id,
                NULL::int AS part_index, NULL::int AS char_offset, NULL::text AS tool_call_id,
                NULL::text AS label, m.content AS doc, m.created_at AS at, k.score AS rank
         FROM k
         {messages}
         WHERE k.source = 'message'
       UNION ALL
         SELECT k.ord, e.task_id, 'event', e.seq, NULL, NULL, NULL, NULL, NULL,
                mnemo_task_event_text(e.step_narrative, e.tool_name, e.result_data, e.error_info),
                e.ts, k.score
         FROM k
         {events}
         WHERE k.source = 'event'
       UNION ALL
         SELECT k.ord, s.task_id, 'snapshot', s.seq, NULL, NULL, NULL, NULL, s.label, s.content,
                s.ts, k.score
         FROM k
         {snapshots}
         WHERE k.source = 'snapshot'
       UNION ALL
         SELECT k.ord, t.task_id, t.kind, t.seq, st.step_id, t.part_index, t.char_offset,
                st.parts -> t.part_index ->> 'tool_call_id', NULL, t.content, st.created_at,
                k.score
         FROM k
         {texts}
         CROSS JOIN LATERAL (
             SELECT st.step_id, st.parts, st.created_at FROM task_steps st
             WHERE {steps_scope}
               AND st.task_id = t.task_id AND st.seq = t.seq
             LIMIT 1
         ) st
     )",
        messages = by_seq(
            "task_messages",
            "m",
            "m.task_id, m.seq, m.content, m.created_at"
        ),
        events = by_seq(
            "task_events",
            "e",
            "e.task_id, e.seq, e.step_narrative, e.tool_name, e.result_data, e.error_info, e.ts"
        ),
        snapshots = by_seq(
            "task_snapshots",
            "s",
            "s.task_id, s.seq, s.label, s.content, s.ts"
        ),
        texts =
            step_text_by_key("t.task_id, t.kind, t.seq, t.part_index, t.char_offset, t.content"),
        steps_scope = scope_unseen("st"),
    )
});

/// The end of a statement over documents in `from` (as [`DOCS`] makes them): the hit's fields
/// with a snippet, matches in `«»`, in the order `order`.
fn show(from: &str, order: &str, weight: bool) -> String {
    let weight = if weight {
        ", (SELECT weight FROM total) AS query_weight"
    } else {
        ""
    };
    format!(
        "SELECT d.task_id, d.source, d.seq, d.step_id, d.part_index, d.char_offset,
                d.tool_call_id, d.label,
                ts_headline('english', left(d.doc, 100000), q.q,
                            'StartSel=«, StopSel=», MaxWords=30, MinWords=12, MaxFragments=2') AS snippet,
                d.rank, d.at{weight}
         FROM {from} d, q
         ORDER BY {order}"
    )
}

#[derive(FromRow)]
struct HitRow {
    task_id: Uuid,
    source: String,
    seq: i64,
    step_id: Option<String>,
    part_index: Option<i32>,
    char_offset: Option<i32>,
    tool_call_id: Option<String>,
    label: Option<String>,
    snippet: String,
    rank: f32,
    at: DateTime<Utc>,
    /// What an item holding every query term would score (keyword pages only).
    #[sqlx(default)]
    query_weight: Option<f32>,
}

#[derive(FromRow)]
struct Scored {
    task_id: Uuid,
    source: String,
    seq: i64,
    part_index: i32,
    char_offset: i32,
    score: f32,
    /// The item's vector alone, on the vector side (for its crowding).
    #[sqlx(default)]
    alone: Option<pgvector::Vector>,
    /// What an item holding every query term would score, on the keyword side.
    #[sqlx(default)]
    query_weight: Option<f32>,
}

/// A candidate of the vector side.
struct Near {
    item: Item,
    similarity: f32,
    /// Its vector alone (for its crowding).
    alone: Option<pgvector::Vector>,
}

impl Scored {
    fn near(mut self) -> Near {
        let alone = self.alone.take();
        let (item, similarity) = self.pair();
        Near {
            item,
            similarity,
            alone,
        }
    }

    fn pair(self) -> (Item, f32) {
        (
            (
                self.task_id,
                self.source,
                self.seq,
                self.part_index,
                self.char_offset,
            ),
            self.score,
        )
    }
}

/// Item keys as the parallel arrays statements take.
struct Keys {
    tasks: Vec<Uuid>,
    sources: Vec<String>,
    seqs: Vec<i64>,
    parts: Vec<i32>,
    offsets: Vec<i32>,
}

impl Keys {
    fn of<'a>(items: impl Iterator<Item = &'a Item>) -> Keys {
        let mut keys = Keys {
            tasks: Vec::new(),
            sources: Vec::new(),
            seqs: Vec::new(),
            parts: Vec::new(),
            offsets: Vec::new(),
        };
        for (task, source, seq, part, offset) in items {
            keys.tasks.push(*task);
            keys.sources.push(source.clone());
            keys.seqs.push(*seq);
            keys.parts.push(*part);
            keys.offsets.push(*offset);
        }
        keys
    }
}

/// Whether the caller has any task. A search of all of a caller's task history asks first: the
/// ranking statement reads five tables and costs as much to start as to run (a chat's recall
/// asks every caller, and most chat users have no task), the question one index probe.
async fn has_tasks(tx: &mut Scoped) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (
             SELECT 1 FROM tasks
             WHERE tenant_id = current_setting('mnemo.tenant')
               AND user_id = current_setting('mnemo.user')
         ) AS "any!""#
    )
    .fetch_one(&mut *tx)
    .await
}

/// Searches task history: of one task (`task_id`) or all of the caller's. `keyword` ranks the
/// whole history by words and pages by `offset`/`limit`; `semantic` and `hybrid` (with `vector`,
/// the query's embedding) rank the best candidates of each side. Without a vector in those
/// modes (the embedder failed) the answer is the keyword ranking, marked degraded.
pub async fn search(
    tx: &mut Scoped,
    task_id: Option<Uuid>,
    query: &str,
    (offset, limit): (i64, i64),
    mode: SearchMode,
    vector: Option<&QueryVector>,
) -> ApiResult<Found> {
    let text = TextQuery::parse("query", query)?;
    let vector = vector.filter(|_| mode.semantic());
    let degraded = mode.semantic() && vector.is_none();
    // The mode that ranks the hits: by words when the vector is missing.
    let answered = if degraded { SearchMode::Keyword } else { mode };
    if task_id.is_none() && !has_tasks(tx).await? {
        return Ok(Found {
            hits: Vec::new(),
            more: false,
            mode: answered,
            degraded,
            words_weight: None,
        });
    }
    crate::search::begin_search(tx, crate::search::words_only(mode, vector)).await?;
    let Some(vector) = vector else {
        let (hits, more, query_weight) = match task_ranking(tx, task_id, &text).await? {
            Some(ranking) => by_words(tx, task_id, &ranking, &text, offset, limit).await?,
            None => (Vec::new(), false, None),
        };
        return Ok(Found {
            hits,
            more,
            mode: answered,
            degraded,
            words_weight: query_weight,
        });
    };

    let mut near = nearest(tx, task_id, vector, None).await?;
    let mut words: Vec<(Item, f32)> = Vec::new();
    let mut query_weight = None;
    if mode.keyword() {
        // Each side's candidates scored on the other side too, so that fusion compares whole
        // scores.
        if let Some(ranking) = task_ranking(tx, task_id, &text).await? {
            (words, query_weight) = keyword_scores(tx, task_id, &ranking, &text, &near).await?;
        }
        let missing: Vec<Item> = words
            .iter()
            .map(|w| w.0.clone())
            .filter(|item| !near.iter().any(|n| n.item == *item))
            .collect();
        if !missing.is_empty() {
            near.extend(nearest(tx, task_id, vector, Some(&missing)).await?);
        }
    }
    let pairs: Vec<(Item, f32)> = near
        .iter()
        .map(|n| (n.item.clone(), n.similarity))
        .collect();
    let mut candidates = candidates(&words, &pairs);
    let alone = near.iter().map(|n| (n.item.clone(), n.alone.as_ref()));
    set_crowding(&mut candidates, alone, vector.crowd_weight);
    let words_weight = words_weight(&candidates, query_weight);
    let mut ranked = fuse(candidates, vector.keyword_weight, query_weight);
    let start = usize::try_from(offset).unwrap_or(usize::MAX);
    let end = start.saturating_add(usize::try_from(limit).unwrap_or(usize::MAX));
    let more = ranked.len() > end;
    ranked.truncate(end);
    let page: Vec<_> = ranked.into_iter().skip(start).collect();

    let keys = Keys::of(page.iter().map(|f| &f.id));
    let scores: Vec<f32> = page.iter().map(|f| f.score).collect();
    // Runtime-checked, like every keyword statement: the ranking SQL every search shares
    // (`QUERY_CTE`) is spliced in, one text for all of them; no value is spliced.
    let rows: Vec<HitRow> = sqlx::query_as(&format!(
        "WITH {QUERY_CTE}, k AS (
             SELECT * FROM unnest($3::uuid[], $4::text[], $5::int8[], $6::int4[], $7::int4[],
                                  $8::real[])
                 WITH ORDINALITY AS k(task_id, source, seq, part_index, char_offset, score, ord)
         ), {docs}
         {}",
        show("docs", "d.ord", false),
        docs = DOCS.as_str()
    ))
    .bind(&text.any)
    .bind(&text.none)
    .bind(&keys.tasks)
    .bind(&keys.sources)
    .bind(&keys.seqs)
    .bind(&keys.parts)
    .bind(&keys.offsets)
    .bind(&scores)
    .fetch_all(&mut *tx)
    .await?;
    let mut by_item: HashMap<Item, HitRow> = rows
        .into_iter()
        .map(|r| {
            let item = (
                r.task_id,
                r.source.clone(),
                r.seq,
                r.part_index.unwrap_or(-1),
                r.char_offset.unwrap_or(-1),
            );
            (item, r)
        })
        .collect();
    let hits = page
        .into_iter()
        .filter_map(|f| {
            let row = by_item.remove(&f.id)?;
            let mut hit = hit(row)?;
            hit.keyword_rank = f.keyword_rank;
            hit.vector_rank = f.vector_rank;
            hit.similarity = f.similarity;
            Some(hit)
        })
        .collect();
    Ok(Found {
        hits,
        more,
        mode,
        degraded: false,
        words_weight,
    })
}

fn hit(r: HitRow) -> Option<SearchHit> {
    Some(SearchHit {
        task_id: r.task_id,
        source: HitSource::parse(&r.source)?,
        seq: r.seq,
        step_id: r.step_id,
        part_index: r.part_index,
        char_offset: r.char_offset,
        tool_call_id: r.tool_call_id,
        label: r.label,
        snippet: r.snippet,
        rank: r.rank,
        keyword_rank: None,
        vector_rank: None,
        similarity: None,
        at: r.at,
    })
}

/// The keyword ranking of the whole history, one page: `limit + 1` rows are fetched to tell
/// whether more follow, and snippets are made for the page only.
async fn by_words(
    tx: &mut Scoped,
    task_id: Option<Uuid>,
    ranking: &TaskRanking,
    text: &TextQuery,
    offset: i64,
    limit: i64,
) -> ApiResult<(Vec<SearchHit>, bool, Option<f32>)> {
    // The page is cut from the scores, newest first among equal ones, and only its documents
    // are read (a long history's search ranks up to a thousand candidates).
    let sql = format!(
        "{}, k AS (
             SELECT p.task_id, p.source, p.seq, p.part_index, p.char_offset, p.score,
                    row_number() OVER (ORDER BY {order}) AS ord
             FROM (SELECT * FROM scored s ORDER BY {order} OFFSET $4 LIMIT $5) p
         ), {docs}
         {}",
        keyword_ctes(ranking, task_id.is_some(), 6, None),
        show("docs", "d.ord", true),
        order = "score DESC, at DESC, task_id, source, seq, part_index, char_offset",
        docs = DOCS.as_str(),
    );
    // Runtime-checked: built from the shared ranking SQL (see `keyword_ctes`).
    let query = sqlx::query_as(&sql)
        .bind(&text.any)
        .bind(&text.none)
        .bind(task_id)
        .bind(offset)
        .bind(limit + 1);
    let rows: Vec<HitRow> = bind_ranking(query, ranking).fetch_all(&mut *tx).await?;
    let (rows, more) = crate::pagination::split(rows, limit);
    let query_weight = rows.iter().find_map(|r| r.query_weight);
    let hits = rows
        .into_iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let mut hit = hit(r)?;
            hit.keyword_rank = u32::try_from(offset + 1).ok()?.checked_add(i as u32);
            Some(hit)
        })
        .collect();
    Ok((hits, more, query_weight))
}

/// The best [`CANDIDATES`] items by words, and the keyword score of each of `also` that the
/// words match.
async fn keyword_scores(
    tx: &mut Scoped,
    task_id: Option<Uuid>,
    ranking: &TaskRanking,
    text: &TextQuery,
    also: &[Near],
) -> ApiResult<(Vec<(Item, f32)>, Option<f32>)> {
    let keys = Keys::of(also.iter().map(|a| &a.item));
    let sql = format!(
        "{}, ranked AS (
             SELECT task_id, source, seq, coalesce(part_index, -1) AS part_index,
                    coalesce(char_offset, -1) AS char_offset, score,
                    row_number() OVER (ORDER BY score DESC, task_id, source, seq, part_index,
                                                char_offset) AS ord
             FROM scored
         )
         SELECT task_id, source, seq, part_index, char_offset, score,
                (SELECT weight FROM total) AS query_weight
         FROM ranked
         WHERE ord <= $4
            OR (task_id, source, seq, part_index, char_offset) IN (
                   SELECT * FROM unnest($5::uuid[], $6::text[], $7::int8[], $8::int4[],
                                        $9::int4[]))
         ORDER BY ord",
        keyword_ctes(ranking, task_id.is_some(), 10, Some(5))
    );
    // Runtime-checked: built from the shared ranking SQL (see `keyword_ctes`).
    let query = sqlx::query_as(&sql)
        .bind(&text.any)
        .bind(&text.none)
        .bind(task_id)
        .bind(CANDIDATES)
        .bind(&keys.tasks)
        .bind(&keys.sources)
        .bind(&keys.seqs)
        .bind(&keys.parts)
        .bind(&keys.offsets);
    let rows: Vec<Scored> = bind_ranking(query, ranking).fetch_all(&mut *tx).await?;
    let query_weight = rows.iter().find_map(|r| r.query_weight);
    Ok((rows.into_iter().map(Scored::pair).collect(), query_weight))
}

/// The items closest in meaning to `vector`, closest first, each once (scored by the mean of its
/// vectors' similarities, alone and with context); with `only`, the similarity of just those
/// items.
async fn nearest(
    tx: &mut Scoped,
    task_id: Option<Uuid>,
    vector: &QueryVector,
    only: Option<&[Item]>,
) -> ApiResult<Vec<Near>> {
    let dims = vector.values.len();
    // The cast names the dimension so that this model's HNSW index serves the ORDER BY; `dims`
    // is the embedder's, never the caller's.
    let distance = format!("(v.embedding::vector({dims}) <=> $1::vector({dims}))");
    let keys = only.map(|items| Keys::of(items.iter()));
    // Without `only`, the caller's vectors of the model, so that its HNSW index serves the ORDER
    // BY (`$4` to `$8` go unused). With `only`, each item's vectors (at most two: alone and with
    // its context) looked up by its key, which every plan runs as one index probe per item: the
    // index scan filtered by the keys stops after its budget of tuples, short of the items of a
    // long history, and a plan made while a caller with a short history searched reads all of the
    // caller's vectors (measured: 2 of 7 items found in 47 ms, and 500,000 vectors read in
    // 136 ms; 0.2 ms as probes).
    let vectors = if only.is_some() {
        "(SELECT DISTINCT * FROM unnest($4::uuid[], $5::text[], $6::int8[], $7::int4[],
                                        $8::int4[]))
              AS k(task_id, source, seq, part_index, char_offset)
         CROSS JOIN LATERAL (
             SELECT * FROM task_vectors v
             WHERE v.tenant_id = current_setting('mnemo.tenant')
               AND v.user_id = current_setting('mnemo.user')
               AND v.task_id = k.task_id AND v.source = k.source AND v.seq = k.seq
               AND v.part_index = k.part_index AND v.char_offset = k.char_offset
               AND v.model = $2
               AND ($3::uuid IS NULL OR v.task_id = $3)
             LIMIT 2
         ) v"
    } else {
        "task_vectors v
         WHERE v.tenant_id = current_setting('mnemo.tenant')
           AND v.user_id = current_setting('mnemo.user')
           AND v.model = $2
           AND ($3::uuid IS NULL OR v.task_id = $3)"
    };
    // Runtime-checked: it binds pgvector's `vector`, which the macros do not know, and names the
    // dimension in its text.
    let rows: Vec<Scored> = sqlx::query_as(&format!(
        "WITH near AS (
         SELECT v.task_id, v.source, v.seq, v.part_index, v.char_offset, v.with_context,
                v.embedding,
                1 - {distance} AS score
         FROM {vectors}
         ORDER BY {distance}
         LIMIT $9
         ), {items}
         -- The best $10 items first, so that only their vectors are looked up.
         SELECT s.task_id, s.source, s.seq, s.part_index, s.char_offset, s.score,
                {alone} AS alone
         FROM (SELECT i.*, {similarity} AS score FROM items i ORDER BY score DESC LIMIT $10) s
         ORDER BY s.score DESC",
        items = grouped_cte("items", "task_id, source, seq, part_index, char_offset", ""),
        similarity = mean_similarity(
            "task_vectors",
            "i",
            &["task_id", "source", "seq", "part_index", "char_offset"],
            &distance
        ),
        alone = alone_vector(
            "task_vectors",
            "s",
            &["task_id", "source", "seq", "part_index", "char_offset"]
        ),
    ))
    // Unnamed, so planned for its parameters every time (see `crate::search::begin_search`).
    .persistent(false)
    .bind(pgvector::Vector::from(vector.values.clone()))
    .bind(&vector.model_id)
    .bind(task_id)
    .bind(keys.as_ref().map(|k| &k.tasks))
    .bind(keys.as_ref().map(|k| &k.sources))
    .bind(keys.as_ref().map(|k| &k.seqs))
    .bind(keys.as_ref().map(|k| &k.parts))
    .bind(keys.as_ref().map(|k| &k.offsets))
    // Each item may have two vectors (with and without its context).
    .bind(CANDIDATES * 2)
    .bind(CANDIDATES)
    .fetch_all(&mut *tx)
    .await?;
    Ok(rows.into_iter().map(Scored::near).collect())
}
