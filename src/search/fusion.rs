//! Fusing keyword and vector candidates into one ranked list.
//!
//! Reciprocal rank fusion throws away how far apart scores are: the 40th keyword hit counts
//! nearly as much as the first. On conversational questions that loses to fusing the scores
//! themselves, so a hybrid hit scores `w · keyword / best keyword + (1 − w) · similarity`: the
//! keyword rank is scaled by the best keyword score of the same search (so it lies in 0..=1 like
//! cosine similarity). A candidate the words did not match scores 0 on the keyword side; a keyword
//! match not embedded yet counts as the average similarity. The weight was chosen on the
//! project's retrieval evaluation (`scripts/eval`).

/// Default weight of the scaled keyword score in a hybrid score; the similarity has the rest.
pub const KEYWORD_WEIGHT: f32 = 0.3;

/// One object found by either side of a search.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate<T> {
    pub id: T,
    /// Keyword rank score (higher is better), when the keyword side matched it.
    pub keyword: Option<f32>,
    /// Cosine similarity to the query, when the object has a vector.
    pub similarity: Option<f32>,
}

/// A candidate with its place on each side and its fused score.
#[derive(Debug, Clone, PartialEq)]
pub struct Fused<T> {
    pub id: T,
    pub keyword: Option<f32>,
    pub similarity: Option<f32>,
    /// 1-based rank among keyword matches.
    pub keyword_rank: Option<u32>,
    /// 1-based rank by similarity.
    pub vector_rank: Option<u32>,
    pub score: f32,
}

/// Ranks `candidates` (each id once) by fused score, best first; ties keep the input order.
/// With only one side present (keyword or semantic search) the score is that side's own.
pub fn fuse<T: Clone>(candidates: Vec<Candidate<T>>, keyword_weight: f32) -> Vec<Fused<T>> {
    let keyword_rank = ranks(&candidates, |c| c.keyword);
    let vector_rank = ranks(&candidates, |c| c.similarity);
    let any_keyword = candidates.iter().any(|c| c.keyword.is_some());
    let any_vector = candidates.iter().any(|c| c.similarity.is_some());
    let best_keyword = candidates
        .iter()
        .filter_map(|c| c.keyword)
        .fold(0.0f32, f32::max);
    // A keyword match the indexer has not embedded yet (writes are embedded within seconds)
    // counts as average on the vector side rather than as dissimilar, so a fresh write is not
    // buried below older ones while it waits.
    let present: Vec<f32> = candidates.iter().filter_map(|c| c.similarity).collect();
    let neutral = if present.is_empty() {
        0.0
    } else {
        present.iter().sum::<f32>() / present.len() as f32
    };
    let mut fused: Vec<Fused<T>> = candidates
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let scaled = match c.keyword {
                Some(k) if best_keyword > 0.0 => k / best_keyword,
                _ => 0.0,
            };
            let similarity = c.similarity.unwrap_or(neutral);
            let score = match (any_keyword, any_vector) {
                (true, true) => keyword_weight * scaled + (1.0 - keyword_weight) * similarity,
                (true, false) => c.keyword.unwrap_or(0.0),
                (false, _) => similarity,
            };
            Fused {
                id: c.id,
                keyword: c.keyword,
                similarity: c.similarity,
                keyword_rank: keyword_rank[i],
                vector_rank: vector_rank[i],
                score,
            }
        })
        .collect();
    // Stable: equal scores keep the order the sides produced.
    fused.sort_by(|a, b| b.score.total_cmp(&a.score));
    fused
}

/// The candidates of a search from its two sides, each id once: keyword matches first (with
/// their similarity when the vector side scored them too), then what only the vector side found.
pub fn candidates<T: PartialEq + Clone>(
    keyword: &[(T, f32)],
    near: &[(T, f32)],
) -> Vec<Candidate<T>> {
    let mut out: Vec<Candidate<T>> = keyword
        .iter()
        .map(|(id, score)| Candidate {
            id: id.clone(),
            keyword: Some(*score),
            similarity: near.iter().find(|n| n.0 == *id).map(|n| n.1),
        })
        .collect();
    for (id, score) in near {
        if !keyword.iter().any(|k| k.0 == *id) {
            out.push(Candidate {
                id: id.clone(),
                keyword: None,
                similarity: Some(*score),
            });
        }
    }
    out
}

/// 1-based rank of each candidate by `side` (None where the side has no score).
fn ranks<T>(
    candidates: &[Candidate<T>],
    side: impl Fn(&Candidate<T>) -> Option<f32>,
) -> Vec<Option<u32>> {
    let mut order: Vec<(usize, f32)> = candidates
        .iter()
        .enumerate()
        .filter_map(|(i, c)| side(c).map(|s| (i, s)))
        .collect();
    order.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut out = vec![None; candidates.len()];
    for (rank, (i, _)) in order.into_iter().enumerate() {
        out[i] = Some(u32::try_from(rank + 1).unwrap_or(u32::MAX));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(id: &str, keyword: Option<f32>, similarity: Option<f32>) -> Candidate<String> {
        Candidate {
            id: id.into(),
            keyword,
            similarity,
        }
    }

    #[test]
    fn keyword_only_keeps_the_keyword_order() {
        let fused = fuse(
            vec![c("a", Some(0.2), None), c("b", Some(0.5), None)],
            KEYWORD_WEIGHT,
        );
        assert_eq!(fused[0].id, "b");
        assert_eq!(fused[0].score, 0.5);
        assert_eq!(fused[0].keyword_rank, Some(1));
        assert_eq!(fused[1].keyword_rank, Some(2));
        assert_eq!(fused[1].vector_rank, None);
    }

    #[test]
    fn hybrid_weighs_scaled_keyword_and_similarity() {
        let fused = fuse(
            vec![
                // Best keyword match, weak meaning.
                c("words", Some(1.0), Some(0.2)),
                // No shared word, close meaning.
                c("meaning", None, Some(0.8)),
                // Half the best keyword score, fair meaning.
                c("both", Some(0.5), Some(0.6)),
            ],
            KEYWORD_WEIGHT,
        );
        let ids: Vec<&str> = fused.iter().map(|f| f.id.as_str()).collect();
        // meaning: 0.7 × 0.8 = 0.56; both: 0.3 × 0.5 + 0.7 × 0.6 = 0.57; words: 0.3 + 0.14 = 0.44
        assert_eq!(ids, vec!["both", "meaning", "words"]);
        assert!((fused[0].score - 0.57).abs() < 1e-6);
        assert_eq!(fused[1].keyword_rank, None);
        assert_eq!(fused[1].vector_rank, Some(1));
        assert_eq!(fused[2].keyword_rank, Some(1));
        assert_eq!(fused[2].vector_rank, Some(3));
    }

    #[test]
    fn a_match_not_embedded_yet_counts_as_average_similarity() {
        let fused = fuse(
            vec![
                c("fresh", Some(1.0), None),
                c("old", Some(0.9), Some(0.2)),
                c("near", None, Some(0.6)),
            ],
            KEYWORD_WEIGHT,
        );
        // fresh: 0.3 + 0.7 × 0.4 (the average) = 0.58; old: 0.27 + 0.14 = 0.41; near: 0.42.
        assert_eq!(fused[0].id, "fresh");
        assert!((fused[0].score - 0.58).abs() < 1e-6);
        assert_eq!(fused[0].similarity, None, "reported as not compared");
    }

    #[test]
    fn semantic_only_ranks_by_similarity() {
        let fused = fuse(
            vec![c("a", None, Some(0.1)), c("b", None, Some(0.9))],
            KEYWORD_WEIGHT,
        );
        assert_eq!(fused[0].id, "b");
        assert!((fused[0].score - 0.9).abs() < 1e-6);
    }
}
