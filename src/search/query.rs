//! The keyword side of every search: a question becomes the OR of its words.
//!
//! PostgreSQL's `websearch_to_tsquery` ANDs the words of a query, so "When did Caroline go to the
//! support group?" only finds a text holding every one of them, which a conversation turn almost
//! never does. Here the plain words, quoted phrases and explicit `or` groups of a query are ORed
//! together (the ranking then prefers texts matching more of them, and rarer ones), while
//! `-excluded` words still exclude: `(a | b | "c d") & !e`. Stemming and stopwords stay
//! PostgreSQL's (`english`), so each part is handed to `websearch_to_tsquery` as text and never
//! parsed into tsquery syntax here: any input is safe.

use std::collections::HashMap;

use crate::db::Scoped;
use crate::error::{ApiError, ApiResult};
use crate::search::sizes::{SampleEdge, TermCounts};

/// Longest query, in characters.
pub const MAX_QUERY_CHARS: usize = 1000;

/// A query split into what may match and what must not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextQuery {
    /// Web-search text whose parts are joined by ` or `: `websearch_to_tsquery` of it is the OR
    /// of the query's words and phrases.
    pub any: String,
    /// Web-search text of the excluded words (`-a -b`), empty when there are none.
    pub none: String,
    /// Whether the query asks when something happened (see
    /// [`crate::search::when::asks_when`]).
    pub asks_when: bool,
}

impl TextQuery {
    /// Parses `query` (the request's field `field`): 422 when it is empty, over
    /// [`MAX_QUERY_CHARS`] characters, or holds a NUL character.
    pub fn parse(field: &str, query: &str) -> ApiResult<TextQuery> {
        let trimmed = query.trim();
        if trimmed.is_empty() {
            return Err(ApiError::invalid(
                field,
                format!("`{field}` must not be empty"),
            ));
        }
        if query.chars().count() > MAX_QUERY_CHARS {
            return Err(ApiError::invalid(
                field,
                format!("`{field}` is longer than {MAX_QUERY_CHARS} characters"),
            ));
        }
        if query.contains('\0') {
            return Err(ApiError::invalid(
                field,
                format!("`{field}` contains a NUL character"),
            ));
        }
        let names = crate::search::names::names(trimmed);
        let mut any: Vec<String> = Vec::new();
        let mut none: Vec<String> = Vec::new();
        for part in parts(trimmed) {
            match part {
                Part::Phrase(p) => any.push(format!("\"{p}\"")),
                Part::Excluded(w) => none.push(format!("-{w}")),
                Part::Word(w) if w.eq_ignore_ascii_case("or") => {}
                Part::Word(w) => any.push(keyword_word(trimmed, w, &names)),
            }
        }
        Ok(TextQuery {
            any: any.join(" or "),
            none: none.join(" "),
            asks_when: crate::search::when::asks_when(trimmed),
        })
    }

    /// Whether the query is plain words: no `"quoted phrase"` and no `-excluded` word. A query
    /// with those asks for exact matches, and gets only texts that match it.
    pub fn is_plain(&self) -> bool {
        self.none.is_empty() && !self.any.contains('"')
    }
}

/// How the word `word` of `query` (a slice of it) goes into [`TextQuery::any`]: a name as
/// [`crate::search::names::names`] finds it (so "Caroline" in "When did Caroline go to the
/// support group?", not "Remind" in "Thanks! Remind me when Ruth graduates.") keeps its capital
/// and loses the punctuation before it, which is how [`QUERY_CTE`] tells it; any other word is
/// lower-cased. Neither changes what the word matches: the `english` configuration lower-cases
/// every word and drops punctuation.
fn keyword_word(query: &str, word: &str, names: &[std::ops::Range<usize>]) -> String {
    let start = word.as_ptr() as usize - query.as_ptr() as usize;
    let within = start..start + word.len();
    match names.iter().find(|n| within.contains(&n.start)) {
        Some(name) => query[name.start..within.end].to_owned(),
        None => word.to_lowercase(),
    }
}

/// SQL of the keyword side shared by every search: a CTE `q` holding the tsquery `q` (`any`
/// ORed, `none` excluded; `$1` and `$2`), `pos` (the positive part alone: without it nothing
/// matches), `terms` (the query's lexemes) and `names` (the lexemes of its names: the words of
/// `any` that begin with a capital letter, which [`TextQuery::parse`] leaves only to names, as
/// "Caroline" in "When did Caroline go to the support group?"; see [`term_weights`]). Both texts
/// go through the memory search view (slashes read as spaces), which is how every searchable
/// text is indexed.
pub const QUERY_CTE: &str = "q AS (
     SELECT pos, pos && websearch_to_tsquery('english', mnemo_memory_search_text($2)) AS q,
            tsvector_to_array(to_tsvector('english', mnemo_memory_search_text($1))) AS terms,
            ARRAY(SELECT DISTINCT l.lexeme
                  FROM unnest(string_to_array($1, ' or ')) AS w(word),
                       unnest(tsvector_to_array(
                           to_tsvector('english', mnemo_memory_search_text(w.word)))) AS l(lexeme)
                  WHERE w.word ~ '^[[:upper:]]') AS names
     FROM websearch_to_tsquery('english', mnemo_memory_search_text($1)) AS pos
 )";

/// CTEs weighing the query's terms, from a CTE `df` (`term`, and `n`: the texts holding it)
/// and `corpus`, a SQL expression counting the texts searched: `weights` (`term`, `weight`) is
/// each term's inverse document frequency, `ln(1 + (N - n + 0.5) / (n + 0.5))`, except that a
/// name of the query (`q.names`) weighs halfway between that and its rarest matched term.
///
/// A name is what a question is about, yet a common one weighs almost nothing by its frequency:
/// in a conversation the speaker's name opens half the turns, so "What did Caroline paint?"
/// would rank Melanie's painting as high as Caroline's. Halfway, not all the way: a turn holding
/// only the name must not tie with one holding the rarest word. On the project's retrieval
/// evaluation (hybrid) this gained 1–2 points of recall@10, 3–4 of recall@5 and 2–3 of MRR, with
/// and without a haystack of other conversations; keyword-only gained 1–2 points of recall@5
/// and MRR. Weighing names as much as the rarest word did as well in hybrid and worse
/// keyword-only; multiplying their weight by 2 or 3 gained nothing.
pub fn term_weights(corpus: &str) -> String {
    format!(
        "idf AS (
             SELECT df.term, df.n, {idf} AS idf
             FROM df
         ), weights AS MATERIALIZED (
             -- A few rows, computed once: inlined, PostgreSQL may compute them again for every
             -- match it joins them to (measured 340 ms instead of 60 over 7,500 matches).
             SELECT i.term,
                    CASE WHEN i.term = ANY(q.names)
                         THEN (i.idf + max(i.idf) FILTER (WHERE i.n > 0) OVER ()) / 2
                         ELSE i.idf
                    END AS weight
             FROM idf i CROSS JOIN q
         )",
        idf = idf(corpus, "df.n"),
    )
}

/// The inverse document frequency of a term held by `n` (an SQL expression) of the `corpus`
/// texts.
fn idf(corpus: &str, n: &str) -> String {
    format!("ln(1 + (({corpus}) - {n} + 0.5) / ({n} + 0.5))")
}

/// CTEs ranking the texts of a CTE `hits` (columns `keys`, comma-separated, and `tsv`) by the
/// sum of the weights of the query terms each holds ([`term_weights`]), into a CTE `scored`
/// (`keys`, `score`). `corpus` is a SQL expression counting the texts searched.
///
/// Term frequency counts as presence and there is no length normalisation (BM25 with b = 0):
/// on the project's retrieval evaluation length normalisation cost 7 points of recall@10, since
/// the turns that carry facts are the longer ones. Document frequencies come from the matching
/// texts themselves: a text holding a query term matches the OR query.
pub fn idf_ranking(keys: &str, corpus: &str) -> String {
    format!(
        "terms AS (
             -- Lexemes as tsquery literals; one with a backslash cannot be quoted, and is skipped.
             SELECT t.term, quote_literal(t.term)::tsquery AS tq
             FROM q, unnest(q.terms) AS t(term)
             WHERE position(E'\\\\' in t.term) = 0
         ), {matches}, df AS (
             SELECT term, count(*) AS n FROM matches GROUP BY term
         ), stats AS MATERIALIZED (
             SELECT greatest(({corpus}), (SELECT count(*) FROM hits)) AS n
         ), {scored}",
        matches = matches_cte(keys),
        scored = scored_cte(keys, "SELECT n FROM stats"),
    )
}

/// The CTE `terms` of a bounded ranking: the query's terms and their estimated document
/// frequencies, from the parameters `names` (`text[]`) and `estimates` (`float8[]`, NULL for a
/// rare term) that [`BoundedTerms`] binds.
pub fn bounded_terms_cte(names: &str, estimates: &str) -> String {
    format!(
        "terms AS (
             SELECT t.term, quote_literal(t.term)::tsquery AS tq, t.estimate
             FROM unnest({names}::text[], {estimates}::float8[]) AS t(term, estimate)
         )"
    )
}

/// The CTE `matches` (`keys`, `term`): each text of a CTE `hits` with each query term it holds.
pub fn matches_cte(keys: &str) -> String {
    let h = prefixed(keys, "h");
    format!(
        "matches AS MATERIALIZED (
             SELECT {h}, t.term FROM hits h JOIN terms t ON h.tsv @@ t.tq
         )"
    )
}

/// The CTEs weighing the terms ([`term_weights`], from a CTE `df`), `scored` (`keys`, `score`):
/// each text of `matches` scored by the sum of its terms' weights, and `total` (`weight`): what a
/// text holding every term of `terms` would score.
pub fn scored_cte(keys: &str, corpus: &str) -> String {
    let m = prefixed(keys, "m");
    format!(
        "{weights}, scored AS (
             SELECT {m}, sum(w.weight)::real AS score
             FROM matches m JOIN weights w USING (term)
             GROUP BY {m}
         ), total AS MATERIALIZED (
             -- What a text holding every query term would score: a term no text holds weighs
             -- as the rarest can.
             SELECT coalesce(sum(coalesce(w.weight, {unheld})), 0)::real AS weight
             FROM terms t LEFT JOIN weights w USING (term)
         )",
        weights = term_weights(corpus),
        unheld = idf(corpus, "0"),
    )
}

/// `keys` (comma-separated column names) qualified by `alias`.
pub fn prefixed(keys: &str, alias: &str) -> String {
    keys.split(',')
        .map(|k| format!("{alias}.{}", k.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Texts (messages, memory chunks) of the caller's newest a keyword search reads as its sample of
/// term frequencies. A caller with fewer is ranked exactly over every match; above it the
/// candidates are bounded (see [`bounded_terms`]), so the cost stays flat as a history grows.
pub const KEYWORD_SAMPLE: i64 = 5000;
/// A term held by at least this share of the sample is common: its matches are not all read.
pub const COMMON_SHARE: f64 = 0.01;

/// Most matches a bounded ranking takes from the sample, newest first: ten times the candidates
/// a side of a search contributes. The common terms' matches come from the sample only; where
/// the sample is dense with them (a word in most texts), the newest this many are scored and the
/// older ones in the sample are not read. A search that reads more than one kind of text (a
/// memory's chunks and its summary) shares the bound between them. A search whose filters
/// narrow the texts (a session, an agent, a time range) takes every match of the sample instead,
/// since the filters are applied to the candidates afterwards and could leave few of this many.
pub const RECENT_MATCHES: i64 = 1000;

/// The most matches a bounded ranking takes from the sample of each of the `kinds` kinds of
/// text it reads (see [`RECENT_MATCHES`]).
pub fn recent_matches(narrowed: bool, kinds: i64) -> i64 {
    if narrowed {
        KEYWORD_SAMPLE
    } else {
        RECENT_MATCHES / kinds.max(1)
    }
}

/// Most matches counted of a term the sample does not show to be common: fewer, and the term is
/// rare (its matches are all read); as many, and it is common in older texts.
pub const RARE_CAP: i64 = 5000;

/// A query term counted in the sample, of the `corpus` texts the caller has (see
/// [`TermCounts`]).
#[derive(Debug, sqlx::FromRow)]
pub struct TermSample {
    pub term: String,
    pub corpus: i64,
    #[sqlx(flatten)]
    pub counts: TermCounts,
}

/// The statement listing the query's terms (`$1`, `$2` as in [`QUERY_CTE`]) that
/// [`term_sample_sql`] counts, in its order.
const SAMPLED_TERMS_SQL: &str = "SELECT t.term
     FROM q, unnest(q.terms) WITH ORDINALITY AS t(term, o)
     WHERE numnode(q.pos) > 0 AND position(E'\\\\' in t.term) = 0
     ORDER BY t.o";

/// The statement counting the query's terms (`$1`, `$2` as in [`QUERY_CTE`]) among `$6` (all
/// of them when `$6` is null) in the newest `$3` texts, and the matches (up to `$4`) of those
/// that are not common there, of the `$5` texts the caller has, in the query's order: `recent`
/// selects the texts' `tsv` newest first (without the limit), `matching` the caller's texts
/// holding the tsquery `t.tq`.
fn term_sample_sql(recent: &str, matching: &str) -> String {
    format!(
        "WITH {QUERY_CTE}, recent AS MATERIALIZED ({recent} LIMIT $3), listed AS MATERIALIZED (
             -- Each term's tsquery made once, not once for every text of the sample it is
             -- tested on (a third of the count's time).
             SELECT t.term, t.o, quote_literal(t.term)::tsquery AS tq
             FROM q, unnest(q.terms) WITH ORDINALITY AS t(term, o)
             WHERE numnode(q.pos) > 0 AND position(E'\\\\' in t.term) = 0
               AND ($6::text[] IS NULL OR t.term = ANY($6::text[]))
         ), counted AS MATERIALIZED (
             -- Computed once: inlined, each count would run again for the test of its share.
             SELECT t.term, t.o, t.tq,
                    (SELECT count(*) FROM recent r WHERE r.tsv @@ t.tq) AS in_sample,
                    (SELECT count(*) FROM recent) AS sample
             FROM listed t
         )
         SELECT t.term, t.in_sample, t.sample, $5::int8 AS corpus,
                CASE WHEN t.in_sample::float8 < {COMMON_SHARE} * t.sample THEN
                    (SELECT count(*) FROM ({matching} LIMIT $4) x)
                END AS capped
         FROM counted t
         ORDER BY t.o"
    )
}

/// The texts a keyword search ranks, as statements over the caller's rows: `recent` selects
/// their `tsv` newest first (without a limit), `matching` those holding the tsquery `t.tq`
/// (through the full-text index), `corpus` counts them.
pub struct Corpus {
    /// The kind of text, naming its size among the kept ones (see [`crate::search::sizes`]).
    pub kind: &'static str,
    pub recent: &'static str,
    pub matching: &'static str,
    pub corpus: &'static str,
    /// `recent` selecting its texts' keys instead of `tsv`, as a [`SampleEdge`] (`id`, `n`),
    /// through the same index and in the same order (without a limit).
    pub recent_keys: &'static str,
    /// The caller's texts holding the term `t.term`, as `m`, at most `$4` of them (through the
    /// full-text index, as `matching`).
    pub matching_keys: &'static str,
    /// Whether the text `m` of `matching_keys` is at or past the sample's oldest text, the
    /// [`SampleEdge`] bound as `$5` (`id`) and `$6` (`n`): whether it is in the sample.
    pub in_sample: &'static str,
}

/// How a keyword search ranks.
pub enum Ranking {
    /// Every match, exactly: the history is shorter than the sample. `texts` is the count the
    /// choice made (the `corpus` statement's), for a ranking to weigh its terms by.
    Exact { texts: i64 },
    /// A bounded candidate set (see [`bounded_terms`]).
    Bounded(BoundedTerms),
    /// Nothing: the query has no terms (only stopwords, or only excluded words).
    Nothing,
}

/// Chooses the ranking of a search of `text` over `corpus`: a history shorter than
/// [`KEYWORD_SAMPLE`] is ranked exactly (one count tells), a longer one over the candidates the
/// sample bounds. The size of a long history is counted once a minute at most
/// ([`crate::search::sizes`]).
pub async fn choose_ranking(
    conn: &mut Scoped,
    corpus: &Corpus,
    text: &TextQuery,
) -> Result<Ranking, sqlx::Error> {
    let texts = match conn.history_size(corpus.kind) {
        Some(texts) => texts,
        None => {
            let texts = count_texts(conn, corpus.corpus).await?;
            if texts >= KEYWORD_SAMPLE {
                conn.keep_history_size(corpus.kind, texts);
            }
            texts
        }
    };
    if texts < KEYWORD_SAMPLE {
        return Ok(Ranking::Exact { texts });
    }
    let terms = sample_terms(conn, corpus, text, texts).await?;
    let Some(first) = terms.first() else {
        return Ok(Ranking::Nothing);
    };
    // A sample short of its size read every text there is (the history shrank since it was
    // counted): its count is the exact one.
    let exact = Ranking::Exact {
        texts: first.counts.sample,
    };
    Ok(bounded_terms(&terms).map_or(exact, Ranking::Bounded))
}

/// The caller's texts, as the statement `corpus` counts them. Fewer than [`KEYWORD_SAMPLE`], a
/// search ranks every match exactly, and counting the query's terms in a sample
/// ([`sample_terms`]) would only cost (it reads every text once per term).
async fn count_texts(conn: &mut Scoped, corpus: &str) -> Result<i64, sqlx::Error> {
    // Runtime: the count is each search's own statement.
    sqlx::query_scalar(&format!("SELECT ({corpus})::int8"))
        .fetch_one(conn)
        .await
}

/// The counts of the terms of `text` over the caller's `texts` of `corpus`, in the query's
/// order: those a search of the last minute made are kept (see [`crate::search::sizes`]), the
/// others counted by [`count_terms`]. With none kept for the caller and kind, every term is
/// counted at once; otherwise the terms are listed first, and only the ones not kept are counted.
async fn sample_terms(
    conn: &mut Scoped,
    corpus: &Corpus,
    text: &TextQuery,
    texts: i64,
) -> Result<Vec<TermSample>, sqlx::Error> {
    if !conn.any_term_counts(corpus.kind) {
        let counted = count_terms(conn, corpus, text, texts, None).await?;
        return Ok(counted);
    }
    // Runtime: the text is each search's own (see `term_sample_sql`), not a literal here.
    let names: Vec<String> = sqlx::query_scalar(&format!("WITH {QUERY_CTE} {SAMPLED_TERMS_SQL}"))
        .bind(&text.any)
        .bind(&text.none)
        .fetch_all(&mut *conn)
        .await?;
    let kept: Vec<Option<TermCounts>> = names
        .iter()
        .map(|term| conn.term_counts(corpus.kind, term))
        .collect();
    let missing: Vec<&str> = names
        .iter()
        .zip(&kept)
        .filter(|(_, kept)| kept.is_none())
        .map(|(term, _)| term.as_str())
        .collect();
    let mut counted: HashMap<String, TermSample> = HashMap::new();
    if !missing.is_empty() {
        for row in count_terms(conn, corpus, text, texts, Some(&missing)).await? {
            counted.insert(row.term.clone(), row);
        }
    }
    Ok(names
        .into_iter()
        .zip(kept)
        .filter_map(|(term, kept)| match kept {
            Some(counts) => Some(TermSample {
                term,
                corpus: texts,
                counts,
            }),
            None => counted.remove(&term),
        })
        .collect())
}

/// Most matches of a term read to count it from its matches alone: a term with fewer, which is
/// most of a question's words in a long history (a name, a number, a rare word), is counted
/// without reading the sample.
pub const PROBE_CAP: i64 = 500;

/// A query term as [`probe_sql`]'s statement finds it: `matches` of the caller's texts hold it
/// (up to [`PROBE_CAP`]), `newer` of them are in the sample.
#[derive(Debug, sqlx::FromRow)]
struct Probed {
    term: String,
    matches: i64,
    newer: i64,
}

impl Probed {
    /// The term's counts, when its matches tell them: all of them were read (fewer than
    /// [`PROBE_CAP`]). They are then what [`term_sample_sql`]'s statement counts: the matches in
    /// the sample are the sample's texts holding the term, and the matches in all, fewer than
    /// [`RARE_CAP`], are its capped count.
    fn counts(&self) -> Option<TermCounts> {
        (self.matches < PROBE_CAP).then(|| counts_of_matches(self.matches, self.newer))
    }
}

/// The counts of a term with `matches` texts in all (fewer than [`RARE_CAP`]), `newer` of them
/// in the sample: as [`term_sample_sql`]'s statement gives them, the capped count only for a
/// term not common in the sample.
fn counts_of_matches(matches: i64, newer: i64) -> TermCounts {
    TermCounts {
        in_sample: newer,
        sample: KEYWORD_SAMPLE,
        capped: ((newer as f64) < COMMON_SHARE * KEYWORD_SAMPLE as f64).then_some(matches),
    }
}

/// The statement reading each of the query's terms (`$1`, `$2` as in [`QUERY_CTE`]; only those
/// of `$3`, all of them when it is null) from its matches, at most `$4` of each, and telling how
/// many of them are in the sample (`corpus.in_sample`, with the sample's oldest text bound as
/// `$5` and `$6`). In the query's order.
fn probe_sql(corpus: &Corpus) -> String {
    format!(
        "WITH {QUERY_CTE}, listed AS MATERIALIZED (
             SELECT t.term, t.o
             FROM q, unnest(q.terms) WITH ORDINALITY AS t(term, o)
             WHERE numnode(q.pos) > 0 AND position(E'\\\\' in t.term) = 0
               AND ($3::text[] IS NULL OR t.term = ANY($3::text[]))
         )
         SELECT t.term, f.matches, f.newer
         FROM listed t, LATERAL (
             SELECT count(*) AS matches, count(*) FILTER (WHERE {in_sample}) AS newer
             FROM ({matching_keys}) m
         ) f
         ORDER BY t.o",
        in_sample = corpus.in_sample,
        matching_keys = corpus.matching_keys,
    )
}

/// The oldest of the caller's newest [`KEYWORD_SAMPLE`] texts of `corpus`, as a search of the
/// last minute read it (see [`crate::search::sizes`]) or read now; `None` when the caller has
/// fewer.
pub async fn sample_edge(
    conn: &mut Scoped,
    corpus: &Corpus,
) -> Result<Option<SampleEdge>, sqlx::Error> {
    if let Some(edge) = conn.sample_edge(corpus.kind) {
        return Ok(Some(edge));
    }
    // Runtime: the corpus's own statement, with the offset bound.
    let edge = sqlx::query_as::<_, SampleEdge>(&format!(
        "SELECT e.id, e.n FROM ({} OFFSET $1 - 1 LIMIT 1) e",
        corpus.recent_keys
    ))
    .bind(KEYWORD_SAMPLE)
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(edge) = edge {
        conn.keep_sample_edge(corpus.kind, edge);
    }
    Ok(edge)
}

/// Counts `only` the given terms of `text` (all of them when `None`) and keeps their counts, in
/// the query's order.
///
/// Each term's matches are read first, up to [`PROBE_CAP`] (through the full-text index), and
/// placed against the sample's oldest text ([`sample_edge`], kept for a minute): for a term with
/// fewer, they give its counts ([`Probed::counts`]). Only the others, the common words, are
/// counted in the sample by [`count_terms_in_sample`], which reads the newest
/// [`KEYWORD_SAMPLE`] texts (2 to 4 ms for 5,000 memory chunks) and tests every term on each;
/// kept for a minute, a common word is rarely counted again, while a question's rare words (a
/// name, a number) are new on most turns. With fewer texts than the sample, every term is counted
/// in it.
pub async fn count_terms(
    conn: &mut Scoped,
    corpus: &Corpus,
    text: &TextQuery,
    texts: i64,
    only: Option<&[&str]>,
) -> Result<Vec<TermSample>, sqlx::Error> {
    let Some(edge) = sample_edge(conn, corpus).await? else {
        // Fewer texts than the sample: it holds them all, and says so.
        let rows = count_terms_in_sample(conn, corpus, text, texts, only).await?;
        for row in &rows {
            conn.keep_term_counts(corpus.kind, &row.term, row.counts);
        }
        return Ok(rows);
    };
    // Runtime: composed from the corpus's statements; the text is bound.
    let probed = sqlx::query_as::<_, Probed>(&probe_sql(corpus))
        .bind(&text.any)
        .bind(&text.none)
        .bind(only)
        .bind(PROBE_CAP)
        .bind(edge.id)
        .bind(edge.n)
        .fetch_all(&mut *conn)
        .await?;
    // Each term with its counts when its matches tell them, computed once.
    let counted: Vec<(String, Option<TermCounts>)> = probed
        .into_iter()
        .map(|p| {
            let counts = p.counts();
            (p.term, counts)
        })
        .collect();
    let common: Vec<&str> = counted
        .iter()
        .filter(|(_, counts)| counts.is_none())
        .map(|(term, _)| term.as_str())
        .collect();
    let mut sampled: HashMap<String, TermSample> = HashMap::new();
    if !common.is_empty() {
        for row in count_terms_in_sample(conn, corpus, text, texts, Some(&common)).await? {
            sampled.insert(row.term.clone(), row);
        }
    }
    let mut rows = Vec::with_capacity(counted.len());
    for (term, counts) in counted {
        let row = match counts {
            Some(counts) => TermSample {
                term,
                corpus: texts,
                counts,
            },
            None => match sampled.remove(&term) {
                Some(row) => row,
                None => continue,
            },
        };
        conn.keep_term_counts(corpus.kind, &row.term, row.counts);
        rows.push(row);
    }
    Ok(rows)
}

/// Counts `only` the given terms of `text` (all of them when `None`) in the sample, with
/// [`term_sample_sql`]'s statement.
pub async fn count_terms_in_sample(
    conn: &mut Scoped,
    corpus: &Corpus,
    text: &TextQuery,
    texts: i64,
    only: Option<&[&str]>,
) -> Result<Vec<TermSample>, sqlx::Error> {
    let sql = term_sample_sql(corpus.recent, corpus.matching);
    sqlx::query_as::<_, TermSample>(&sql)
        .bind(&text.any)
        .bind(&text.none)
        .bind(KEYWORD_SAMPLE)
        .bind(RARE_CAP)
        .bind(texts)
        .bind(only)
        .fetch_all(&mut *conn)
        .await
}

/// The terms of a search over a history longer than the sample, for the bounded ranking.
#[derive(Debug, PartialEq)]
pub struct BoundedTerms {
    pub names: Vec<String>,
    /// A common term's document frequency, estimated; `None` for a rare term, whose matches are
    /// all read and counted.
    pub estimates: Vec<Option<f64>>,
    /// The rare terms, whose matches are all read (by the word lookups); empty when every term
    /// is common.
    pub rare_terms: Vec<String>,
    /// The texts of the caller.
    pub corpus: f64,
}

/// `None` when the sample holds every text of the caller: the search ranks all matches exactly.
///
/// A term is rare when it has fewer than [`RARE_CAP`] matches in all: its matches are read and
/// its frequency is exact. A common term's frequency is its share of the sample times the
/// corpus; one the sample misses although it has [`RARE_CAP`] matches or more (common in older
/// texts only) is given the geometric mean of that floor and the corpus, a middle weight.
pub fn bounded_terms(terms: &[TermSample]) -> Option<BoundedTerms> {
    let first = terms.first()?;
    if first.counts.sample < KEYWORD_SAMPLE {
        return None;
    }
    let sample = first.counts.sample as f64;
    let corpus = first.corpus.max(first.counts.sample) as f64;
    let mut bounded = BoundedTerms {
        names: Vec::with_capacity(terms.len()),
        estimates: Vec::with_capacity(terms.len()),
        rare_terms: Vec::new(),
        corpus,
    };
    for term in terms {
        let share = term.counts.in_sample as f64 / sample;
        bounded.names.push(term.term.clone());
        match term.counts.capped {
            Some(found) if found < RARE_CAP => {
                bounded.estimates.push(None);
                bounded.rare_terms.push(term.term.clone());
            }
            Some(_) => bounded.estimates.push(Some(
                (share * corpus).max((RARE_CAP as f64 * corpus).sqrt()),
            )),
            None => bounded.estimates.push(Some(share * corpus)),
        }
    }
    Some(bounded)
}

#[derive(Debug, PartialEq, Eq)]
enum Part<'a> {
    Word(&'a str),
    Phrase(&'a str),
    Excluded(&'a str),
}

/// Splits web-search text into words, `"quoted phrases"` (an unclosed quote runs to the end) and
/// `-excluded` words, the way `websearch_to_tsquery` reads them.
fn parts(text: &str) -> Vec<Part<'_>> {
    let mut out = Vec::new();
    let mut rest = text;
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            return out;
        }
        if let Some(after) = rest.strip_prefix('"') {
            let end = after.find('"').unwrap_or(after.len());
            let phrase = after[..end].trim();
            // Quotes inside the phrase are impossible here; an empty pair is nothing.
            if !phrase.is_empty() {
                out.push(Part::Phrase(phrase));
            }
            rest = after.get(end + 1..).unwrap_or("");
            continue;
        }
        let end = rest
            .find(|c: char| c.is_whitespace() || c == '"')
            .unwrap_or(rest.len());
        let word = &rest[..end];
        rest = &rest[end..];
        match word.strip_prefix('-') {
            Some(excluded) if !excluded.is_empty() && !excluded.starts_with('-') => {
                out.push(Part::Excluded(excluded))
            }
            // A lone or doubled dash is punctuation, not an exclusion.
            Some(_) => {}
            None => out.push(Part::Word(word)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(term: &str, in_sample: i64, sample: i64, corpus: i64) -> TermSample {
        // As the statement counts them: only terms rare in the sample are counted in all.
        let capped = ((in_sample as f64) < COMMON_SHARE * sample as f64).then_some(in_sample);
        TermSample {
            term: term.into(),
            corpus,
            counts: TermCounts {
                in_sample,
                sample,
                capped,
            },
        }
    }

    #[test]
    fn a_short_history_is_ranked_exactly_and_a_long_one_bounded() {
        assert_eq!(bounded_terms(&[]), None);
        assert_eq!(bounded_terms(&[sample("tea", 3, 120, 120)]), None);
        let n = KEYWORD_SAMPLE;
        let bounded = bounded_terms(&[
            sample("deploy", n / 2, n, 1_000_000),
            sample("zanzibar", 0, n, 1_000_000),
            sample("o'neil", 1, n, 1_000_000),
        ])
        .unwrap();
        assert_eq!(bounded.names, ["deploy", "zanzibar", "o'neil"]);
        assert_eq!(bounded.estimates, [Some(500_000.0), None, None]);
        assert_eq!(bounded.rare_terms, ["zanzibar", "o'neil"]);
        assert_eq!(bounded.corpus, 1_000_000.0);
        // Every term common: no rare lookup.
        let bounded = bounded_terms(&[sample("deploy", n, n, n)]).unwrap();
        assert!(bounded.rare_terms.is_empty());
        // Absent from the newest texts but common in older ones: not read in full, and weighed
        // between the floor and the corpus.
        let mut old = sample("migration", 0, n, 1_000_000);
        old.counts.capped = Some(RARE_CAP);
        let bounded = bounded_terms(&[old]).unwrap();
        assert!(bounded.rare_terms.is_empty());
        let estimate = bounded.estimates[0].unwrap();
        assert!(
            estimate > RARE_CAP as f64 && estimate < 1_000_000.0,
            "{estimate}"
        );
    }

    fn q(text: &str) -> (String, String) {
        let parsed = TextQuery::parse("query", text).unwrap();
        (parsed.any, parsed.none)
    }

    #[test]
    fn words_are_ored_and_phrases_kept() {
        assert_eq!(
            q("When did Caroline go to the support group?"),
            (
                "when or did or Caroline or go or to or the or support or group?".into(),
                String::new()
            )
        );
        assert_eq!(
            q(r#"deploy "connection refused" -staging or prod"#),
            (
                r#"deploy or "connection refused" or prod"#.into(),
                "-staging".into()
            )
        );
        assert_eq!(
            q(r#"unclosed "quote here"#).0,
            r#"unclosed or "quote here""#
        );
        assert_eq!(q("a - b -- c"), ("a or b or c".into(), String::new()));
        assert_eq!(q("e-mail x-y"), ("e-mail or x-y".into(), String::new()));
        assert_eq!(q(r#""" x"#).0, "x");
    }

    #[test]
    fn only_names_keep_their_capitals() {
        // A sentence's first word, "I" and "I'm" are lower-cased; a name keeps its capital, and
        // loses the punctuation before it, so the names statement tells it by its first letter.
        assert_eq!(
            q("Thanks! Remind me when Ruth's (Dana) graduates. I'm Sure Dr. Okafor knows?").0,
            "thanks! or remind or me or when or Ruth's or Dana) or graduates. or i'm or Sure \
             or dr. or Okafor or knows?"
        );
        assert_eq!(q("DEPLOY failed").0, "deploy or failed");
    }

    #[test]
    fn bad_queries_are_422_naming_the_field() {
        for bad in ["", "   ", "a\0b"] {
            let err = TextQuery::parse("query", bad).unwrap_err();
            assert_eq!(err.field(), Some("query"), "{bad:?}");
        }
        let long = "x".repeat(MAX_QUERY_CHARS + 1);
        assert!(TextQuery::parse("query", &long).is_err());
        assert!(TextQuery::parse("query", &"x".repeat(MAX_QUERY_CHARS)).is_ok());
    }
}

/// Term counts from the matches against counts from the sample, over real histories.
#[cfg(test)]
mod counted {
    use sqlx::PgPool;

    use super::*;
    use crate::auth::Principal;
    use crate::db::Db;

    /// What each text of a history of `KEYWORD_SAMPLE + OLD` texts holds besides its filler, by
    /// its position `i` (0 the oldest; the newest `KEYWORD_SAMPLE` are `i >= OLD`): one word for
    /// each way a term can stand against the sample and [`PROBE_CAP`].
    const OLD: i64 = 1000;
    const WORDS: &str = "concat_ws(' ', 'filler text', i,
        CASE WHEN i = 0 THEN 'zanzibar' END,             -- one old match
        CASE WHEN i % 100 = 0 THEN 'walrus' END,         -- 60: exactly 50 in the sample, common
        CASE WHEN i % 102 = 0 THEN 'otter' END,          -- 59: 49 in the sample, rare
        CASE WHEN i < 1000 AND i % 3 = 0 THEN 'heron' END, -- 334, none in the sample
        CASE WHEN i < 1000 OR i % 500 = 0 THEN 'badger' END, -- 1,010: past the probe, rare
        CASE WHEN i >= 5501 THEN 'seal' END,             -- 499 newest: under the probe, common
        CASE WHEN i >= 5400 THEN 'puffin' END,           -- 600 newest: past the probe, common
        CASE WHEN i < 5400 THEN 'lynx' END,              -- 5,400 old: past every cap
        'nightly')";
    const QUESTION: &str = "zanzibar walrus otter heron badger seal puffin lynx nightly quokka \
                            vanished 4242";

    async fn scoped(pool: &PgPool, user: &str) -> Scoped {
        let principal = Principal {
            tenant_id: "acme".into(),
            user_id: user.into(),
            scopes: vec![],
        };
        Db::new(pool.clone()).scoped(&principal).await.unwrap()
    }

    /// Alice's history of messages and memory chunks, `KEYWORD_SAMPLE + OLD` of each (`WORDS`),
    /// and Bob's, as long, holding every word in every text.
    async fn histories(pool: &PgPool) {
        for (user, words) in [
            ("alice", WORDS),
            (
                "bob",
                "'zanzibar walrus otter heron badger seal quokka vanished 4242 ' || i",
            ),
        ] {
            // Test-only: the texts are SQL expressions written by the test itself.
            for statement in [
                "INSERT INTO agent_sessions (tenant_id, user_id, session_id, agent_name,
                                             version, message_count)
                 SELECT 'acme', $1, 's' || s, 'bot', 1, ($2 + 2) / 3
                 FROM generate_series(0, 2) s"
                    .to_owned(),
                format!(
                    "INSERT INTO conversation_messages (tenant_id, user_id, session_id,
                                                        message_id, sender, text, sent_at)
                     SELECT 'acme', $1, 's' || (i % 3), 'h' || i, 'user', {words},
                            timestamptz '2026-01-01' + i * interval '1 second'
                     FROM generate_series(0, $2 - 1) i"
                ),
                format!(
                    "INSERT INTO agent_memories (tenant_id, user_id, id, memory_key, memory_type,
                                                 summary, size_bytes, line_count, token_count,
                                                 content_sha256, chunk_count, created_at)
                     SELECT 'acme', $1, ('00000000-0000-7000-8000-' || lpad(to_hex(i), 12, '0'))::uuid,
                            'm-' || i, 'text', 'run', octet_length({words}), 1, 6, md5({words}), 1,
                            timestamptz '2026-01-01' + i * interval '1 second'
                     FROM generate_series(0, $2 - 1) i"
                ),
                format!(
                    "INSERT INTO agent_memory_chunks (tenant_id, user_id, memory_id, byte_start,
                                                      byte_len, line_start, line_end, content)
                     SELECT 'acme', $1, ('00000000-0000-7000-8000-' || lpad(to_hex(i), 12, '0'))::uuid,
                            0, octet_length({words}), 1, 1, {words}
                     FROM generate_series(0, $2 - 1) i"
                ),
            ] {
                sqlx::query(&statement)
                    .bind(user)
                    .bind(KEYWORD_SAMPLE + OLD)
                    .execute(pool)
                    .await
                    .unwrap();
            }
        }
    }

    fn by_term(rows: &[TermSample]) -> Vec<(String, i64, TermCounts)> {
        rows.iter()
            .map(|r| (r.term.clone(), r.corpus, r.counts))
            .collect()
    }

    /// Whatever a term's frequency in the sample and in all, the counts read from its matches
    /// are those the sample statement counts, term for term and in the query's order; another
    /// user's matches count for nothing.
    #[sqlx::test]
    async fn counts_from_the_matches_are_the_samples(pool: PgPool) {
        histories(&pool).await;
        let text = TextQuery::parse("query", QUESTION).unwrap();
        let texts = KEYWORD_SAMPLE + OLD;
        for corpus in [
            &crate::conversations::search::MESSAGES_CORPUS,
            &crate::memories::CHUNKS_CORPUS,
        ] {
            let mut conn = scoped(&pool, "alice").await;
            let probed = count_terms(&mut conn, corpus, &text, texts, None)
                .await
                .unwrap();
            let sampled = count_terms_in_sample(&mut conn, corpus, &text, texts, None)
                .await
                .unwrap();
            assert_eq!(by_term(&probed), by_term(&sampled), "{}", corpus.kind);
            let counts: HashMap<&str, TermCounts> =
                probed.iter().map(|r| (r.term.as_str(), r.counts)).collect();
            let capped = |term: &str| counts[term].capped;
            let in_sample = |term: &str| counts[term].in_sample;
            assert_eq!(
                (capped("zanzibar"), capped("quokka"), capped("4242")),
                (Some(1), Some(0), Some(1)),
                "{}",
                corpus.kind
            );
            assert_eq!((in_sample("walrus"), capped("walrus")), (50, None));
            assert_eq!((in_sample("otter"), capped("otter")), (49, Some(59)));
            assert_eq!((in_sample("heron"), capped("heron")), (0, Some(334)));
            assert_eq!((in_sample("badger"), capped("badger")), (10, Some(1010)));
            assert_eq!((in_sample("seal"), capped("seal")), (499, None));
            assert_eq!((in_sample("puffin"), capped("puffin")), (600, None));
            assert_eq!((in_sample("lynx"), capped("lynx")), (4400, None));
            // Only some terms: those, in the order of the query's lexemes.
            let only = ["seal", "zanzibar", "otter"];
            let probed = count_terms(&mut conn, corpus, &text, texts, Some(&only))
                .await
                .unwrap();
            let sampled = count_terms_in_sample(&mut conn, corpus, &text, texts, Some(&only))
                .await
                .unwrap();
            assert_eq!(by_term(&probed), by_term(&sampled), "{}", corpus.kind);
            let terms: Vec<&str> = probed.iter().map(|r| r.term.as_str()).collect();
            assert_eq!(terms, ["otter", "seal", "zanzibar"]);
        }
    }

    /// A history shorter than the sample has no edge to the sample: every term is counted in the
    /// sample, which then holds every text, and says so.
    #[sqlx::test]
    async fn a_short_history_is_counted_in_the_sample(pool: PgPool) {
        sqlx::query(
            "INSERT INTO agent_sessions (tenant_id, user_id, session_id, agent_name)
             VALUES ('acme', 'alice', 's', 'bot')",
        )
        .execute(&pool)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO conversation_messages (tenant_id, user_id, session_id, message_id,
                                                sender, text, sent_at)
             SELECT 'acme', 'alice', 's', 'h' || i, 'user', 'zanzibar ' || i, now()
             FROM generate_series(1, 30) i",
        )
        .execute(&pool)
        .await
        .unwrap();
        let text = TextQuery::parse("query", "zanzibar quokka").unwrap();
        let mut conn = scoped(&pool, "alice").await;
        let corpus = &crate::conversations::search::MESSAGES_CORPUS;
        let probed = count_terms(&mut conn, corpus, &text, 30, None)
            .await
            .unwrap();
        let sampled = count_terms_in_sample(&mut conn, corpus, &text, 30, None)
            .await
            .unwrap();
        assert_eq!(by_term(&probed), by_term(&sampled));
        assert_eq!(probed[0].counts.sample, 30);
        assert_eq!(bounded_terms(&probed), None);
    }
}
