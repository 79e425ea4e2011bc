//! A search's candidates placed among the texts around them in their streams, for
//! [`crate::search::fusion::lift_by_neighbours`]: the conversation search's, whose streams are
//! sessions.
//!
//! A search looks up the text just before and just after each candidate in its stream. An
//! index probe for one entry reads and tests its whole leaf page, so three probes per candidate
//! (the candidate, the one before, the one after) cost more than reading the texts between
//! candidates that lie close together, as a search's matches in a session often do. The search
//! reads, for each stream, the text before its first candidate, the texts from its first
//! candidate to its last in one range (at most [`SPAN_READ`] a candidate), and the text after
//! its last, and [`place`] finds each candidate's neighbours among them. Where a stream's range
//! was cut short, the candidates past the last text it reached are probed one by one instead.
//!
//! The memory search probes: its streams are an agent's threads, and one of them can hold a
//! user's whole history with the candidates spread thin through it, where the range reads ran
//! into their limit and cost more than they saved (see the README's benchmarks).

use std::collections::HashMap;
use std::hash::Hash;

use chrono::{DateTime, Utc};

use crate::search::fusion::Stream;

/// Most texts read between a stream's first and last candidate, per candidate in the stream;
/// the range read asks for one more, to tell whether there were more. A text of the range costs
/// about a tenth of what probing the two around one candidate does (2.2 against 26 µs, measured
/// on a session of 500 messages), so up to eight a candidate costs less than the probes it saves.
pub const SPAN_READ: i64 = 8;

/// Each candidate's [`Stream`], by its id.
pub type Streams<T> = HashMap<T, Stream<T>>;

/// A text's place in its stream: its time, then its id.
pub type At<T> = (DateTime<Utc>, T);

/// A candidate as the range read found it.
pub struct Candidate<'a, T, K> {
    pub id: T,
    pub stream: K,
    pub at: At<T>,
    /// It only asks.
    pub asks: bool,
    /// Its text, read only when the search asks when (see [`crate::search::when`]).
    pub text: Option<&'a str>,
}

impl<T: Copy, K> Candidate<'_, T, K> {
    /// Its [`Stream`], given the texts just before and just after it (the one before: its id
    /// and whether it ends with a question).
    pub fn stream(&self, previous: Option<(T, bool)>, next: Option<T>) -> Stream<T> {
        Stream {
            previous: previous.map(|p| p.0),
            follows_question: previous.is_some_and(|p| p.1),
            next,
            asks: self.asks,
            tells_time: self.text.is_some_and(crate::search::when::tells_time),
        }
    }
}

/// A text read around a stream's candidates.
pub struct Around<T, K> {
    pub stream: K,
    pub at: At<T>,
    pub ends_asking: bool,
    /// Read by the range between the stream's first and last candidate (not one of the two
    /// probes outside it).
    pub in_range: bool,
}

/// Each candidate's [`Stream`] among the texts read around it, and the candidates that lie past
/// where a stream's range read was cut short (more than [`SPAN_READ`] texts a candidate), whose
/// neighbours are left to be probed one by one. A stream's texts are the neighbours its search counts
/// (a session's user and assistant messages); a candidate need not be one of them.
pub fn place<'a, T, K>(
    candidates: Vec<Candidate<'a, T, K>>,
    around: Vec<Around<T, K>>,
) -> (Streams<T>, Vec<Candidate<'a, T, K>>)
where
    T: Copy + Ord + Hash,
    K: Hash + Eq + Clone,
{
    struct Texts<T> {
        candidates: i64,
        in_range: i64,
        /// The last text the range read reached.
        reach: Option<At<T>>,
        texts: Vec<(At<T>, bool)>,
    }
    let mut streams: HashMap<K, Texts<T>> = HashMap::new();
    for c in &candidates {
        streams
            .entry(c.stream.clone())
            .or_insert_with(|| Texts {
                candidates: 0,
                in_range: 0,
                reach: None,
                texts: Vec::new(),
            })
            .candidates += 1;
    }
    for text in &around {
        if let Some(stream) = streams.get_mut(&text.stream) {
            if text.in_range {
                stream.in_range += 1;
                stream.reach = stream.reach.max(Some(text.at));
            }
            stream.texts.push((text.at, text.ends_asking));
        }
    }
    for stream in streams.values_mut() {
        stream.texts.sort_unstable_by_key(|t| t.0);
    }
    let mut out = HashMap::with_capacity(candidates.len());
    let mut far_apart = Vec::new();
    for c in candidates {
        let Some(stream) = streams.get(&c.stream) else {
            continue;
        };
        // A range cut short still holds every text from the stream's first candidate to the
        // last it reached: a candidate before that has both its neighbours among them.
        let cut = stream.candidates > 1 && stream.in_range > stream.candidates * SPAN_READ;
        if cut && stream.reach.is_none_or(|reach| c.at >= reach) {
            far_apart.push(c);
            continue;
        }
        let texts = &stream.texts;
        let before = texts.partition_point(|t| t.0 < c.at);
        let after = texts.partition_point(|t| t.0 <= c.at);
        let previous = before.checked_sub(1).and_then(|i| texts.get(i));
        let placed = c.stream(
            previous.map(|p| (p.0.1, p.1)),
            texts.get(after).map(|t| t.0.1),
        );
        out.insert(c.id, placed);
    }
    (out, far_apart)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(minute: i64, id: i64) -> At<i64> {
        (Utc.timestamp_opt(minute * 60, 0).unwrap(), id)
    }

    fn around(
        stream: &'static str,
        minute: i64,
        id: i64,
        ends_asking: bool,
    ) -> Around<i64, &'static str> {
        Around {
            stream,
            at: at(minute, id),
            ends_asking,
            in_range: true,
        }
    }

    fn candidate(
        stream: &'static str,
        minute: i64,
        id: i64,
    ) -> Candidate<'static, i64, &'static str> {
        Candidate {
            id,
            stream,
            at: at(minute, id),
            asks: false,
            text: None,
        }
    }

    #[test]
    fn neighbours_are_the_texts_just_before_and_after_in_time_then_id() {
        // Stream a: texts at minutes 1 (id 5), 2 (ids 3 and 4, one time), 3 (id 1); the
        // candidates are 4 and 1, and id 2 (a text the stream does not count) at minute 2.
        let texts = vec![
            around("a", 1, 5, true),
            around("a", 2, 3, false),
            around("a", 2, 4, true),
            around("a", 3, 1, false),
        ];
        let (placed, far) = place(
            vec![
                candidate("a", 2, 4),
                candidate("a", 3, 1),
                candidate("a", 2, 2),
            ],
            texts,
        );
        assert!(far.is_empty());
        assert_eq!(placed[&4].previous, Some(3));
        assert!(!placed[&4].follows_question);
        assert_eq!(placed[&4].next, Some(1));
        assert_eq!(placed[&1].previous, Some(4));
        assert!(placed[&1].follows_question);
        assert_eq!(placed[&1].next, None);
        assert_eq!(
            placed[&2].previous,
            Some(5),
            "before minute 2 id 2: minute 1"
        );
        assert!(placed[&2].follows_question);
        assert_eq!(placed[&2].next, Some(3));
    }

    #[test]
    fn a_range_cut_short_leaves_its_stream_to_the_probes() {
        // Two candidates in a, one more text in its range than SPAN_READ for each of them.
        let last = 2 * SPAN_READ;
        let texts = (0..=last).map(|i| around("a", i, 10 + i, false)).collect();
        let (placed, far) = place(
            vec![
                candidate("a", 0, 10),
                candidate("a", last, 10 + last),
                candidate("b", 99, 99),
            ],
            texts,
        );
        let far: Vec<i64> = far.iter().map(|c| c.id).collect();
        assert_eq!(far, vec![10 + last], "the last text the range reached");
        assert_eq!(
            placed.len(),
            2,
            "10, before the cut, and b's lone candidate"
        );
        assert_eq!(placed[&10].next, Some(11));
        assert_eq!(placed[&99].previous, None);
    }

    #[test]
    fn a_cut_range_places_what_it_reached_and_no_further() {
        // Stream a: the text before the first candidate (minute 0), a range read cut short (one
        // more text than SPAN_READ for each of the four candidates, minutes 1 to `reached`),
        // and the text after the last candidate. Candidates at minutes 1, 3 (a tool message the
        // stream does not count, at the time of a text), `reached` (the last text the range
        // read) and past it.
        let reached = 4 * SPAN_READ + 1;
        let mut texts: Vec<_> = (1..=reached)
            .map(|i| around("a", i, 10 + i, i == 2))
            .collect();
        for (minute, id) in [(0, 1), (reached + 10, 999)] {
            texts.push(Around {
                in_range: false,
                ..around("a", minute, id, false)
            });
        }
        let (placed, far) = place(
            vec![
                candidate("a", 1, 11),
                candidate("a", 3, 500),
                candidate("a", reached, 10 + reached),
                candidate("a", reached + 3, 600),
            ],
            texts,
        );
        let mut far: Vec<i64> = far.iter().map(|c| c.id).collect();
        far.sort_unstable();
        assert_eq!(
            far,
            vec![10 + reached, 600],
            "the one at the cut and the one past it"
        );
        assert_eq!(placed[&11].previous, Some(1));
        assert_eq!(placed[&11].next, Some(12));
        assert!(!placed[&11].follows_question);
        // Minute 3 holds text 13 too; the tool message 500 sorts after it (same time, higher id).
        assert_eq!(placed[&500].previous, Some(13));
        assert_eq!(placed[&500].next, Some(14));
        assert!(!placed[&500].follows_question);
    }
}
