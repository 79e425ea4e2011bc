//! What every search route shares: how a query becomes keyword terms ([`query`]), which modes a
//! search may run in, and how keyword and vector candidates are fused into one ranked list
//! ([`fusion`]).

pub mod asking;
pub mod fusion;
pub mod indexer;
pub mod names;
pub mod query;
pub mod similarity;
pub mod sizes;
pub mod streams;
pub mod when;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::AppState;
use crate::access::Caller;
use crate::db::Scoped;
use crate::error::{ApiError, ApiResult};

pub use fusion::{
    Candidate, Fused, Lifts, Stream, follow_weight, fuse, lift_by_neighbours, liftable,
};
pub use query::{Corpus, TextQuery};

/// How a search ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum SearchMode {
    /// Words: the OR of the query's terms, ranked by how rare the terms a text holds are; the
    /// text just after a match in its stream (the reply to a question) ranks too.
    Keyword,
    /// Meaning: nearest stored embeddings to the query's embedding (needs an embedder).
    Semantic,
    /// Both, fused into one score (needs an embedder).
    Hybrid,
}

impl SearchMode {
    /// The mode a request asked for, or the default: `hybrid` with an embedder, else `keyword`.
    /// Asking for `semantic` or `hybrid` without an embedder is 422 naming the setting.
    pub fn resolve(requested: Option<SearchMode>, embedder: bool) -> ApiResult<SearchMode> {
        match (requested, embedder) {
            (None, true) => Ok(SearchMode::Hybrid),
            (None, false) => Ok(SearchMode::Keyword),
            (Some(SearchMode::Keyword), _) => Ok(SearchMode::Keyword),
            (Some(mode), true) => Ok(mode),
            (Some(mode), false) => Err(ApiError::invalid(
                "mode",
                format!(
                    "mode `{}` needs an embedder; this server runs without one \
                     (MNEMO_EMBEDDER=none), so only `keyword` is available",
                    mode.as_str()
                ),
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SearchMode::Keyword => "keyword",
            SearchMode::Semantic => "semantic",
            SearchMode::Hybrid => "hybrid",
        }
    }

    /// Whether the keyword side runs.
    pub fn keyword(self) -> bool {
        self != SearchMode::Semantic
    }

    /// Whether the vector side runs.
    pub fn semantic(self) -> bool {
        self != SearchMode::Keyword
    }
}

/// The embedding of a search's query, made before its transaction opens.
#[derive(Debug, Clone)]
pub struct QueryVector {
    /// The embedder's model id; only vectors of this model are compared.
    pub model_id: String,
    pub values: Vec<f32>,
    /// Weight of the scaled keyword score in a hybrid score (`MNEMO_SEARCH_KEYWORD_WEIGHT`).
    pub keyword_weight: f32,
    /// Share of its crowding a candidate's similarity loses (`MNEMO_SEARCH_CROWD_WEIGHT`).
    pub crowd_weight: f32,
}

/// Whether a search in `mode` with the query's embedding `vector` runs by words alone: keyword
/// mode, or no vector (no embedder, or it failed). What [`begin_search`] is told.
pub fn words_only(mode: SearchMode, vector: Option<&QueryVector>) -> bool {
    !mode.semantic() || vector.is_none()
}

/// Settings every search sets at its start, for its transaction only: pgvector's iterative index
/// scans (so row-level security and filters never shorten a nearest-neighbour list), and, for a
/// search by words alone (`words_only`), generic plans.
///
/// The vector statements run unnamed (`persistent(false)`), so PostgreSQL plans each for its
/// parameters: with their optional filters (`$n IS NULL OR …`) a generic plan guesses one row and
/// picks nested loops that walk every row of the caller, measured at 7× slower. The keyword
/// statements are prepared once per connection and may settle on a generic plan: planning one
/// for its parameters took 2–3 ms a time, as long as running it (`bench/search/`). Over a small
/// history PostgreSQL kept planning them for their parameters (a custom plan looks cheaper there),
/// 0.6–0.8 ms of each statement's bind, four statements in a `/api/chat/context` recall; so a
/// words-only search, which runs no vector statement, sets `plan_cache_mode` to
/// `force_generic_plan` for the rest of its transaction (a search with vectors sets it back to
/// `auto`). At scale PostgreSQL chose the generic plans by itself, and the two measured the same.
pub async fn begin_search(conn: &mut Scoped, words_only: bool) -> Result<(), sqlx::Error> {
    // A recall searches several kinds in one transaction: the settings are made once.
    if conn.search_settings() == Some(words_only) {
        return Ok(());
    }
    sqlx::query!(
        "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true) AS iterative_scan,
                set_config('plan_cache_mode',
                           CASE WHEN $1 THEN 'force_generic_plan' ELSE 'auto' END, true) AS plans",
        words_only
    )
    .fetch_one(&mut *conn)
    .await?;
    conn.searched(words_only);
    Ok(())
}

/// Plans the rest of the transaction's statements for the caller on each run, for a search over
/// a long history before it looks its hits up by key.
///
/// PostgreSQL estimates `user_id = current_setting('mnemo.user')` with the setting's value when
/// it plans, and a pooled connection keeps the generic plan it made while another user was in
/// scope. Made for a user with few memories, that plan expects one row per user, so any index
/// leading with the user looks as good as the key: the kept plan probed each hit through the
/// stream index (agent, thread, time, id), skipping through the whole history, 3 ms a probe for
/// a user of 100,000 memories. Planning afresh costs about a millisecond a search, which a
/// small history does not need and a long one repays many times over. A later search of the
/// same transaction (a recall's next kind) sets its own settings again.
pub async fn plan_lookups_per_call(conn: &mut Scoped) -> Result<(), sqlx::Error> {
    sqlx::query!("SELECT set_config('plan_cache_mode', 'force_custom_plan', true) AS plans")
        .fetch_one(&mut *conn)
        .await?;
    conn.forget_search_settings();
    Ok(())
}

/// The mode of a search and its query's embedding, made before the search's transaction opens
/// so that no connection waits on the model. The names in `query` that the caller's texts of
/// `corpora` are full of stand as "someone" in the embedded text, and those of a middling share
/// keep half their weight (see [`names`]). When the embedder fails the vector is `None` and the
/// search serves keyword results marked degraded.
pub async fn prepare(
    state: &AppState,
    caller: &Caller,
    corpora: &[&Corpus],
    requested: Option<SearchMode>,
    query: &str,
) -> ApiResult<(SearchMode, Option<QueryVector>)> {
    let mode = SearchMode::resolve(requested, state.embedder.is_some())?;
    let Some(embedder) = state.embedder.as_ref().filter(|_| mode.semantic()) else {
        return Ok((mode, None));
    };
    let embedded = names::embedded_text(caller, corpora, query).await?;
    let vector = match &embedded.halved {
        None => embedder
            .embed_query(&embedded.text)
            .await
            .map(|v| v.as_ref().clone()),
        // Embedded together: concurrent queries join one model call.
        Some(halved) => match tokio::join!(
            embedder.embed_query(&embedded.text),
            embedder.embed_query(halved)
        ) {
            (Ok(a), Ok(b)) => Ok(mean_direction(&a, &b)),
            (Err(err), _) | (_, Err(err)) => Err(err),
        },
    };
    match vector {
        Ok(values) => Ok((
            mode,
            Some(QueryVector {
                model_id: embedder.model_id().to_owned(),
                values,
                keyword_weight: state.config.search_keyword_weight,
                crowd_weight: state.config.search_crowd_weight,
            }),
        )),
        Err(err) => {
            tracing::warn!(error = %err, "the embedder failed; serving keyword results");
            Ok((mode, None))
        }
    }
}

/// The normalised mean of two unit vectors: cosine similarity to it ranks texts by the mean of
/// their similarities to the two. Opposite vectors have no mean direction; the first is kept.
fn mean_direction(a: &[f32], b: &[f32]) -> Vec<f32> {
    let sum: Vec<f32> = a.iter().zip(b).map(|(x, y)| x + y).collect();
    let norm = sum.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 1e-6 {
        sum.into_iter().map(|x| x / norm).collect()
    } else {
        a.to_vec()
    }
}

/// The caller's scope on the rows of `alias`, compared through sub-selects, for the lookups by
/// key of a search (a memory by id, a message by sequence number or by its place in a session).
///
/// PostgreSQL evaluates a bare `current_setting` to cost a plan. For a user the statistics do not
/// know yet (one who arrived after the last `ANALYZE`) it then expects a single row, and every
/// index leading with the tenant and user looks as cheap as the one the lookup needs: a memory
/// looked up by id went through `agent_memories_stream`, which ends with the id, as a skip scan
/// over all of the user's memories (24 index blocks for a user of 1,000 memories instead of 3),
/// and a message's follower through the sequence index, reading every message of the user. A
/// sub-select's value is unknown when the plan is made, so the planner costs a typical user and
/// takes the index the lookup needs whoever searches. Row-level security confines the rows all
/// the same. Statements written as `query!` literals spell the same comparison out.
pub fn scope_unseen(alias: &str) -> String {
    format!(
        "{alias}.tenant_id = (SELECT current_setting('mnemo.tenant'))
         AND {alias}.user_id = (SELECT current_setting('mnemo.user'))"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mean_direction_of_two_vectors_is_a_unit_vector_between_them() {
        let mean = mean_direction(&[1.0, 0.0], &[0.0, 1.0]);
        let half = 0.5f32.sqrt();
        assert!((mean[0] - half).abs() < 1e-6 && (mean[1] - half).abs() < 1e-6);
        assert_eq!(mean_direction(&[1.0, 0.0], &[1.0, 0.0]), [1.0, 0.0]);
        assert_eq!(mean_direction(&[1.0, 0.0], &[-1.0, 0.0]), [1.0, 0.0]);
    }

    #[test]
    fn modes_default_to_what_the_server_can_do() {
        assert_eq!(SearchMode::resolve(None, true).unwrap(), SearchMode::Hybrid);
        assert_eq!(
            SearchMode::resolve(None, false).unwrap(),
            SearchMode::Keyword
        );
        assert_eq!(
            SearchMode::resolve(Some(SearchMode::Semantic), true).unwrap(),
            SearchMode::Semantic
        );
        let err = SearchMode::resolve(Some(SearchMode::Hybrid), false).unwrap_err();
        assert_eq!(err.field(), Some("mode"));
        assert!(SearchMode::Hybrid.keyword() && SearchMode::Hybrid.semantic());
        assert!(!SearchMode::Semantic.keyword() && !SearchMode::Keyword.semantic());
    }
}
