//! Fusing keyword and vector candidates into one ranked list.
//!
//! Reciprocal rank fusion throws away how far apart scores are: the 40th keyword hit counts
//! nearly as much as the first. On conversational questions that loses to fusing the scores
//! themselves, so a hybrid hit scores `w · keyword / query weight + (1 − w) · similarity`: the
//! keyword score is scaled by what a text holding every term of the question would score (so it
//! lies in 0..=1 like cosine similarity, and says how much of the question the text holds). Scaled
//! by the best keyword score of the search instead, the best match of a question whose words
//! mostly appear nowhere took the whole keyword weight; on the project's retrieval evaluation the
//! share gained 2–3 points of recall@5 and 3 of MRR, and on its held-out set 5–11 and 5–6. A
//! candidate the words did not match scores 0 on the keyword side; a keyword match not embedded
//! yet counts as the average similarity. The weight was chosen on the project's retrieval
//! evaluation (`scripts/eval`).
//!
//! A text has two vectors, of itself alone and of itself after what precedes it in its stream;
//! its similarity (computed by each search's vector statement) is the mean of the two, or its one
//! vector's when nothing precedes it. The closer of the two let a text rank on its context alone:
//! the mean gained 2 points of recall@10 hybrid on the evaluation. The vector side ranks by that
//! similarity less a share of the candidate's crowding (see [`crowding`]): a generic text close
//! to every candidate is close to every query too.

use crate::search::similarity::crowding;

/// Default weight of the scaled keyword score in a hybrid score; the similarity has the rest.
pub const KEYWORD_WEIGHT: f32 = 0.3;

/// Share of its best neighbour's score that a hit gains (see [`lift_by_neighbours`]).
pub const NEIGHBOUR_WEIGHT: f32 = 0.2;

/// Share of a keyword hit's score that the text just after it in its stream gains, in a search
/// by words alone (see [`follow_weight`]).
///
/// A question is usually answered by the turn after the one that shares its words ("Who looked
/// after the dog while you were away?" is answered by "My neighbour Mrs. Okafor."): so in a
/// keyword search, the text written just after each of the best keyword hits in its stream (the
/// next memory of the same agent and thread; the next user or AI message of the session) gains
/// this share of that hit's score, and becomes a candidate when its own words did not match. On
/// the project's retrieval evaluation this gained 3 points of keyword-only recall@10 (0.740 →
/// 0.772) and 5 with distractors (0.587 → 0.636); in a hybrid search the context vectors already
/// carry what precedes a text, and it gained nothing there, so hybrid searches leave it out.
pub const FOLLOW_WEIGHT: f32 = 0.2;

/// The follow weight of a search of `text`: [`FOLLOW_WEIGHT`] when only words rank it (`keyword`
/// mode, or a semantic search without its query vector) and the query is plain words (a phrase
/// or an excluded word asks for exact matches only), else 0.
pub fn follow_weight(words_only: bool, text: &crate::search::TextQuery) -> f32 {
    if words_only && text.is_plain() {
        FOLLOW_WEIGHT
    } else {
        0.0
    }
}

/// One object found by either side of a search.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate<T> {
    pub id: T,
    /// Keyword rank score (higher is better), when the keyword side matched it.
    pub keyword: Option<f32>,
    /// Cosine similarity to the query, when the object has a vector.
    pub similarity: Option<f32>,
    /// How near the other candidates its vector is (see [`crowding`]), times the share of it
    /// the similarity loses; 0 until [`set_crowding`] sets it.
    pub crowding: f32,
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
///
/// A keyword score is scaled by `query_weight`, what a text holding every term of the query
/// would score (see [`crate::search::query::scored_cte`]), or by the best keyword score when that
/// is larger or the weight unknown: a text holding a small share of the question's words gains
/// that share of the keyword weight, not all of it because nothing matched better.
pub fn fuse<T: Clone>(
    candidates: Vec<Candidate<T>>,
    keyword_weight: f32,
    query_weight: Option<f32>,
) -> Vec<Fused<T>> {
    let keyword_rank = ranks(&candidates, |c| c.keyword);
    let vector_rank = ranks(&candidates, Candidate::closeness);
    let any_keyword = candidates.iter().any(|c| c.keyword.is_some());
    let any_vector = candidates.iter().any(|c| c.similarity.is_some());
    let best_keyword = candidates
        .iter()
        .filter_map(|c| c.keyword)
        .fold(0.0f32, f32::max);
    // A keyword match the indexer has not embedded yet (writes are embedded within seconds)
    // counts as average on the vector side rather than as dissimilar, so a fresh write is not
    // buried below older ones while it waits.
    let present: Vec<f32> = candidates.iter().filter_map(Candidate::closeness).collect();
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
                Some(k) if best_keyword > 0.0 => k / query_weight.unwrap_or(0.0).max(best_keyword),
                _ => 0.0,
            };
            let similarity = c.closeness().unwrap_or(neutral);
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

/// The weight by which [`fuse`]'s scores of `candidates` become shares of the question (what a
/// text holding every query term scores, `query_weight`), when they are keyword scores
/// themselves: no candidate has a similarity. None when they are similarities or fused scores,
/// already on the scale every kind of text shares.
pub fn words_weight<T>(candidates: &[Candidate<T>], query_weight: Option<f32>) -> Option<f32> {
    query_weight.filter(|_| candidates.iter().all(|c| c.similarity.is_none()))
}

/// Share of its score a text that only asks loses (see [`lift_by_neighbours`]).
pub const ASKING_DISCOUNT: f32 = 0.2;

/// Share of the score of a hit that ends with a question which the text just after it gains
/// (see [`lift_by_neighbours`]).
pub const ANSWER_WEIGHT: f32 = 0.3;

/// Share of its score a hit gains when the search asks when and the hit says when (see
/// [`lift_by_neighbours`]).
pub const TIME_WEIGHT: f32 = 0.15;

/// The weights [`lift_by_neighbours`] applies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Lifts {
    /// Share of its best neighbour's score a hit gains.
    pub neighbour: f32,
    /// Share of the score of the hit before it a hit gains when that one ends with a question.
    pub answer: f32,
    /// Share of its score a hit that only asks loses.
    pub asking: f32,
    /// Share of its score a hit gains when it tells a time the search asks for.
    pub time: f32,
}

impl Lifts {
    /// These weights for a search of `text`: no time lift unless it asks when, so a search that
    /// does not looks up no more neighbours for it (see [`liftable`]).
    pub fn for_query(self, text: &crate::search::TextQuery) -> Lifts {
        Lifts {
            time: if text.asks_when { self.time } else { 0.0 },
            ..self
        }
    }
}

/// The weights of every search.
pub const LIFTS: Lifts = Lifts {
    neighbour: NEIGHBOUR_WEIGHT,
    answer: ANSWER_WEIGHT,
    asking: ASKING_DISCOUNT,
    time: TIME_WEIGHT,
};

/// A hit's place in its stream (an agent's thread of memories, a session's messages): the
/// objects written just before and after it, whether the one before it ends with a question,
/// whether it only asks (every sentence a question), and whether it says when, for a search
/// that asks when.
#[derive(Debug, Clone, PartialEq)]
pub struct Stream<T> {
    pub previous: Option<T>,
    /// The object before it ends with a question ("I quit. Did you hear?" as well).
    pub follows_question: bool,
    pub next: Option<T>,
    pub asks: bool,
    /// The search asks when and the hit says when (see [`crate::search::when`]); false for
    /// every other search.
    pub tells_time: bool,
}

/// Lifts each hit by its neighbours among the hits of the same search, then ranks again.
/// Neighbours are the objects written just before and after it in the same stream (see
/// [`Stream`]). All of it is computed from the unlifted scores, so the order does not matter:
///
/// - A hit gains `neighbour` × the best score of its two neighbours that are hits. In a
///   conversation the answer to a question is often split over turns: "What did you make?"
///   then "A bowl that leans to one side." A turn whose neighbour also matches is more likely
///   the one asked about than an isolated match of the same score.
/// - A hit that ends with a question lifts the hit just after it by `answer` × its score: in a
///   conversation, what answers a question is usually said right after it was asked ("Where
///   are you going to go?" then "We're thinking about the Osa Peninsula"). A hit that only
///   asks also loses `asking` of its score: a search by a question looks for a statement, and
///   a text that only asks ("Who looked after Pepper?") holds none; it matches the question's
///   words and meaning, and the text after it ("My neighbour Mrs. Okafor.") holds the answer.
///   On the project's retrieval evaluation, turns that only ask were 9.5% of the turns, 1 of
///   the 169 answering a question, and took a fifth of the places in the hybrid top ten. A text
///   that says something before its question ("That's sweet. Where are you going to go?")
///   may hold the answer itself and keeps its score.
/// - A hit that says when ("yesterday", "last Sunday", "the 15th of October") gains `time` of its
///   score when the search asks when ("When did Nadia run the race?", "What year ..."): such a
///   question is answered by a text that places something in time, and its words and meaning
///   match the turns about the event whether or not they say when it was.
///
/// Only neighbours that are hits count, so a lift never reaches past what the search itself
/// found, and every filter holds.
pub fn lift_by_neighbours<T: Clone + Eq + std::hash::Hash>(
    fused: &mut [Fused<T>],
    streams: &std::collections::HashMap<T, Stream<T>>,
    lifts: Lifts,
) {
    if streams.is_empty() {
        return;
    }
    let score: std::collections::HashMap<T, f32> =
        fused.iter().map(|f| (f.id.clone(), f.score)).collect();
    for hit in fused.iter_mut() {
        let Some(stream) = streams.get(&hit.id) else {
            continue;
        };
        let base = hit.score;
        let hit_score = |n: &Option<T>| n.as_ref().and_then(|n| score.get(n).copied());
        let best = [hit_score(&stream.previous), hit_score(&stream.next)]
            .into_iter()
            .flatten()
            .fold(None, |acc: Option<f32>, s| {
                Some(acc.map_or(s, |a| a.max(s)))
            });
        if stream.asks {
            hit.score -= lifts.asking * base;
        }
        if stream.tells_time {
            hit.score += lifts.time * base;
        }
        if let Some(best) = best.filter(|b| *b > 0.0) {
            hit.score += lifts.neighbour * best;
        }
        if stream.follows_question
            && let Some(asked) = hit_score(&stream.previous).filter(|s| *s > 0.0)
        {
            hit.score += lifts.answer * asked;
        }
    }
    fused.sort_by(|a, b| b.score.total_cmp(&a.score));
}

/// How many of `ranked` (best first, not yet lifted) may be among its best `limit` once lifted
/// by [`lift_by_neighbours`] with `lifts`: only those need their streams looked up. A lift adds
/// at most (`neighbour` + `answer` + `time`) × the best score, and the `limit`-th may lose
/// `asking` of its own, so a candidate that scores below that lowered bar by more than the lift
/// stays out whatever its neighbours. Candidates past the count keep their scores; the best `limit` and
/// their order come out the same.
pub fn liftable<T>(ranked: &[Fused<T>], limit: usize, lifts: Lifts) -> usize {
    if limit == 0 || ranked.len() <= limit {
        return ranked.len();
    }
    let bar = ranked[limit - 1].score * (1.0 - lifts.asking.clamp(0.0, 1.0));
    let reach = (lifts.neighbour.max(0.0) + lifts.answer.max(0.0) + lifts.time.max(0.0))
        * ranked[0].score.max(0.0);
    ranked.iter().take_while(|r| r.score + reach >= bar).count()
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
            crowding: 0.0,
        })
        .collect();
    for (id, score) in near {
        if !keyword.iter().any(|k| k.0 == *id) {
            out.push(Candidate {
                id: id.clone(),
                keyword: None,
                similarity: Some(*score),
                crowding: 0.0,
            });
        }
    }
    out
}

/// Sets the crowding of the vector side's candidates `near` (each with its vector alone, when
/// it has one), measured among them (see [`crowding`]), times `weight`; nothing is measured
/// when `weight` is 0.
pub fn set_crowding<'a, T: PartialEq + 'a>(
    candidates: &mut [Candidate<T>],
    near: impl IntoIterator<Item = (T, Option<&'a pgvector::Vector>)>,
    weight: f32,
) {
    if weight == 0.0 {
        return;
    }
    let (ids, vectors): (Vec<T>, Vec<Option<&[f32]>>) = near
        .into_iter()
        .map(|(id, v)| (id, v.map(pgvector::Vector::as_slice)))
        .unzip();
    for (id, value) in ids.iter().zip(crowding(&vectors)) {
        if let Some(c) = candidates.iter_mut().find(|c| c.id == *id) {
            c.crowding = weight * value;
        }
    }
}

impl<T> Candidate<T> {
    /// What the vector side ranks by: the similarity less the weighed crowding.
    fn closeness(&self) -> Option<f32> {
        self.similarity.map(|s| s - self.crowding)
    }
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
            crowding: 0.0,
        }
    }

    #[test]
    fn only_keyword_scores_have_a_words_weight() {
        let words = [c("a", Some(2.0), None), c("b", Some(1.0), None)];
        assert_eq!(words_weight(&words, Some(4.0)), Some(4.0));
        let fused = [c("a", Some(2.0), None), c("b", None, Some(0.5))];
        assert_eq!(words_weight(&fused, Some(4.0)), None);
        assert_eq!(words_weight(&words, None), None);
    }

    /// A keyword score counts as its share of what a text holding every query term would score:
    /// the best match of a question it barely matches gains little of the keyword weight.
    #[test]
    fn keyword_scores_are_shares_of_the_query() {
        let pair = || {
            vec![
                c("words", Some(2.0), Some(0.5)),
                c("meaning", None, Some(0.6)),
            ]
        };
        let score =
            |fused: &[Fused<String>], id: &str| fused.iter().find(|f| f.id == id).unwrap().score;
        // Two tenths of the query's weight: 0.3 × 0.2 + 0.7 × 0.5 = 0.41 against 0.42.
        let weak = fuse(pair(), 0.3, Some(10.0));
        assert_eq!(weak[0].id, "meaning");
        assert!((score(&weak, "words") - 0.41).abs() < 1e-6);
        // The whole query matched: 0.3 + 0.35.
        let whole = fuse(pair(), 0.3, Some(2.0));
        assert_eq!(whole[0].id, "words");
        assert!((score(&whole, "words") - 0.65).abs() < 1e-6);
        // Without the query's weight, or with one below the best score (a lift added to it),
        // the best keyword score scales: never above 1.
        for query_weight in [None, Some(1.0)] {
            let fused = fuse(pair(), 0.3, query_weight);
            assert!(
                (score(&fused, "words") - 0.65).abs() < 1e-6,
                "{query_weight:?}"
            );
        }
    }

    #[test]
    fn keyword_only_keeps_the_keyword_order() {
        let fused = fuse(
            vec![c("a", Some(0.2), None), c("b", Some(0.5), None)],
            KEYWORD_WEIGHT,
            None,
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
            None,
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
            None,
        );
        // fresh: 0.3 + 0.7 × 0.4 (the average) = 0.58; old: 0.27 + 0.14 = 0.41; near: 0.42.
        assert_eq!(fused[0].id, "fresh");
        assert!((fused[0].score - 0.58).abs() < 1e-6);
        assert_eq!(fused[0].similarity, None, "reported as not compared");
    }

    fn stream(previous: Option<&str>, next: Option<&str>) -> Stream<String> {
        Stream {
            previous: previous.map(str::to_owned),
            follows_question: false,
            next: next.map(str::to_owned),
            asks: false,
            tells_time: false,
        }
    }

    fn streams<const N: usize>(
        entries: [(&str, Stream<String>); N],
    ) -> std::collections::HashMap<String, Stream<String>> {
        entries
            .into_iter()
            .map(|(id, s)| (id.to_owned(), s))
            .collect()
    }

    /// `question`, then `answer` after it in its stream, and `statement` alone; `question`
    /// only asks when `only_asks`, else it ends with a question after saying something.
    fn asked_then_answered(
        question: &str,
        only_asks: bool,
    ) -> std::collections::HashMap<String, Stream<String>> {
        streams([
            (
                question,
                Stream {
                    asks: only_asks,
                    ..stream(None, Some("answer"))
                },
            ),
            (
                "answer",
                Stream {
                    follows_question: true,
                    ..stream(Some(question), None)
                },
            ),
            ("statement", stream(None, None)),
        ])
    }

    #[test]
    fn looking_up_the_streams_of_the_liftable_ones_ranks_the_best_the_same() {
        // Scores spread evenly below 1.0, neighbours in a chain (each id's are id ± 1), every
        // third one asking, every fourth saying when; a search asking when and one not.
        let not_when = Lifts { time: 0.0, ..LIFTS };
        for (n, limit, lifts) in [
            (40, 5, not_when),
            (40, 10, not_when),
            (7, 10, not_when),
            (200, 3, not_when),
            (40, 5, LIFTS),
            (40, 10, LIFTS),
            (200, 3, LIFTS),
        ] {
            let candidates: Vec<Candidate<u32>> = (0..n)
                .map(|i| {
                    let keyword = 1.0 - (i * 37 % n) as f32 / n as f32;
                    Candidate {
                        id: i,
                        keyword: Some(keyword),
                        similarity: None,
                        crowding: 0.0,
                    }
                })
                .collect();
            let ranked = fuse(candidates, KEYWORD_WEIGHT, None);
            let chain = |id: u32| Stream {
                previous: id.checked_sub(1),
                follows_question: id > 0 && (id - 1).is_multiple_of(3),
                next: Some(id + 1),
                asks: id.is_multiple_of(3),
                tells_time: id.is_multiple_of(4),
            };
            let all: std::collections::HashMap<u32, Stream<u32>> =
                ranked.iter().map(|r| (r.id, chain(r.id))).collect();
            let count = liftable(&ranked, limit, lifts);
            let some: std::collections::HashMap<u32, Stream<u32>> = ranked[..count]
                .iter()
                .map(|r| (r.id, chain(r.id)))
                .collect();
            let (mut full, mut pruned) = (ranked.clone(), ranked.clone());
            lift_by_neighbours(&mut full, &all, lifts);
            lift_by_neighbours(&mut pruned, &some, lifts);
            let top = |f: &[Fused<u32>]| -> Vec<(u32, f32)> {
                f.iter().take(limit).map(|x| (x.id, x.score)).collect()
            };
            assert_eq!(top(&full), top(&pruned), "n {n}, limit {limit}");
            // The time lift reaches further: at 40 candidates for 10 it prunes none.
            let spare = if lifts.time > 0.0 { 4 } else { 2 };
            if n > spare * limit as u32 {
                assert!(count < ranked.len(), "n {n}, limit {limit}: nothing pruned");
            }
        }
    }

    #[test]
    fn a_hit_whose_neighbour_matched_rises_above_an_isolated_one() {
        let mut fused = fuse(
            vec![
                c("isolated", Some(0.95), None),
                c("answer", Some(0.9), None),
                c("question", Some(0.5), None),
                c("unrelated", Some(0.1), None),
            ],
            KEYWORD_WEIGHT,
            None,
        );
        let neighbours = streams([
            ("answer", stream(Some("question"), None)),
            // Its neighbour is not a hit: no lift.
            ("isolated", stream(Some("elsewhere"), None)),
            ("question", stream(None, Some("answer"))),
        ]);
        lift_by_neighbours(&mut fused, &neighbours, LIFTS);
        let ids: Vec<&str> = fused.iter().map(|f| f.id.as_str()).collect();
        // answer: 0.9 + 0.2 × 0.5 = 1.0; question: 0.5 + 0.2 × 0.9 = 0.68.
        assert_eq!(ids, vec!["answer", "isolated", "question", "unrelated"]);
        assert!((fused[0].score - 1.0).abs() < 1e-6);
        assert!((fused[2].score - 0.68).abs() < 1e-6);
        assert_eq!(
            fused[1].score, 0.95,
            "a neighbour that is no hit lifts nothing"
        );
        // Lifted from the unlifted scores: no weights change nothing.
        let before = fused.clone();
        let none = Lifts {
            neighbour: 0.0,
            answer: 0.0,
            asking: 0.0,
            time: 0.0,
        };
        lift_by_neighbours(&mut fused, &neighbours, none);
        assert_eq!(fused, before);
    }

    #[test]
    fn a_hit_that_says_when_rises_when_the_search_asks_when() {
        // "When did Nadia run the race?": "the race is on the 15th" says when; "the race was
        // brutal" matches better and says nothing of when.
        let mut fused = fuse(
            vec![c("brutal", Some(1.0), None), c("date", Some(0.96), None)],
            KEYWORD_WEIGHT,
            None,
        );
        let dated = streams([
            ("brutal", stream(None, None)),
            (
                "date",
                Stream {
                    tells_time: true,
                    ..stream(None, None)
                },
            ),
        ]);
        lift_by_neighbours(&mut fused, &dated, LIFTS);
        // date: 0.96 × 1.15 = 1.104.
        assert_eq!(fused[0].id, "date");
        assert!((fused[0].score - 0.96 * (1.0 + TIME_WEIGHT)).abs() < 1e-6);
        assert_eq!(fused[1].score, 1.0);
    }

    #[test]
    fn a_text_that_only_asks_yields_to_the_one_after_it() {
        // "Who looked after Pepper?" matches best; "My neighbour Mrs. Okafor." after it holds
        // the answer; "Pepper loves the beach." is a statement that matches as well.
        let mut fused = fuse(
            vec![
                c("question", Some(1.0), None),
                c("statement", Some(0.8), None),
                c("answer", Some(0.3), None),
            ],
            KEYWORD_WEIGHT,
            None,
        );
        let streams = asked_then_answered("question", true);
        lift_by_neighbours(&mut fused, &streams, LIFTS);
        let scored: Vec<(&str, f32)> = fused.iter().map(|f| (f.id.as_str(), f.score)).collect();
        // question: 1.0 − 0.2 × 1.0 + 0.2 × 0.3 = 0.86; statement 0.8; answer: 0.3 + 0.2 × 1.0
        // + 0.3 × 1.0 = 0.8 (after the statement, which came first).
        assert_eq!(scored[0].0, "question");
        assert!((scored[0].1 - 0.86).abs() < 1e-6, "{scored:?}");
        assert_eq!(scored[1], ("statement", 0.8));
        assert_eq!(scored[2].0, "answer");
        assert!((scored[2].1 - 0.8).abs() < 1e-6, "{scored:?}");
        // A question that is not a hit lifts nothing.
        let mut fused = fuse(vec![c("answer", Some(0.3), None)], KEYWORD_WEIGHT, None);
        lift_by_neighbours(&mut fused, &streams, LIFTS);
        assert_eq!(fused[0].score, 0.3);
    }

    #[test]
    fn a_text_ending_with_a_question_lifts_the_one_after_it() {
        // "That's sweet. Where are you going to go?" says something before it asks: it keeps its
        // score, and the text after it gains as after a text that only asks.
        let mut fused = fuse(
            vec![
                c("asked", Some(1.0), None),
                c("statement", Some(0.7), None),
                c("answer", Some(0.3), None),
            ],
            KEYWORD_WEIGHT,
            None,
        );
        lift_by_neighbours(&mut fused, &asked_then_answered("asked", false), LIFTS);
        let scored: Vec<(&str, f32)> = fused.iter().map(|f| (f.id.as_str(), f.score)).collect();
        // asked: 1.0 + 0.2 × 0.3 = 1.06; answer: 0.3 + 0.2 × 1.0 + 0.3 × 1.0 = 0.8; statement 0.7.
        assert_eq!(scored[0].0, "asked");
        assert!((scored[0].1 - 1.06).abs() < 1e-6, "{scored:?}");
        assert_eq!(scored[1].0, "answer");
        assert!((scored[1].1 - 0.8).abs() < 1e-6, "{scored:?}");
        assert_eq!(scored[2], ("statement", 0.7));
    }

    #[test]
    fn semantic_only_ranks_by_similarity() {
        let fused = fuse(
            vec![c("a", None, Some(0.1)), c("b", None, Some(0.9))],
            KEYWORD_WEIGHT,
            None,
        );
        assert_eq!(fused[0].id, "b");
        assert!((fused[0].score - 0.9).abs() < 1e-6);
    }
}
