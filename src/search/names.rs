//! Names a caller's texts are full of, left out of what a query's embedding means.
//!
//! A question names whom it is about: "Where did Omar pop the question?". Where a conversation
//! is stored turn by turn, every turn opens with its speaker's name, so each speaker's name is in
//! half the texts. The model reads the name as much of the question's meaning: every turn of
//! Omar's comes out near it, the small talk among them, ahead of the turn that answers ("I
//! proposed to Hana last night! At the top of the Space Needle"). A name that many texts hold
//! tells them apart no better by meaning than by words, where its weight is already its
//! frequency (see [`super::query::term_weights`]).
//!
//! So before a query is embedded, each of its names (a word that begins with a capital letter
//! and opens no sentence, other than the pronoun "I"; see [`names`]) held by at least [`FREQUENT_SHARE`] of the
//! caller's newest [`NAME_SAMPLE`] texts of a kind searched stands as "someone": "Where did
//! someone pop the question?". A rarer name (Hana, Portugal, the Space Needle) is what the
//! question is about and stays. The keyword side reads the query as written, so the named
//! speaker's turns still rank above the other's.
//!
//! A name held by fewer texts, yet by more than a few ([`HALF_SHARE`] of them), is both: in a
//! history holding many conversations a speaker's name is in a tenth of the texts, and it is
//! what tells the conversation asked about from the others, while within that conversation it
//! still pulls every turn of the speaker's nearer. Such a name is embedded both ways, as written
//! and as "someone", and the query's vector is the mean of the two (normalised), so the name
//! keeps half its pull. A name only a few texts hold (a dog, a city) stays as written.
//!
//! The shares are counted in a short transaction of their own before the query is embedded (no
//! connection waits on the model), and kept a minute per caller, kind and name (see
//! [`super::sizes`]): a caller's next searches naming the same people count nothing.

use std::collections::HashSet;
use std::ops::Range;

use crate::access::Caller;
use crate::db::Scoped;
use crate::search::query::Corpus;

/// A name held by at least this share of the newest texts stands as "someone" in the embedded
/// query. In the project's evaluation a speaker's name is in 49–56% of a conversation's turns,
/// and every other name its questions hold in 11% at most.
pub const FREQUENT_SHARE: f64 = 0.2;

/// A name held by at least this share of the newest texts, and by less than [`FREQUENT_SHARE`],
/// keeps half its weight in the embedded query (see [`EmbeddedQuery`]). On the project's
/// evaluation, with every conversation in one user's history (each speaker's name in 8–12% of
/// the texts), this gained 3–5 points of hybrid recall@10; below this share are the names of
/// the things a question is about, which measured best kept as written.
pub const HALF_SHARE: f64 = 0.02;

/// The newest texts of a kind a name's share is counted in: as many as a keyword search's term
/// sample, so that a history of a few thousand texts is counted whole. A history stored one
/// conversation after another has its newest texts from the last conversations only: sampled
/// smaller than the history (200 of 751 texts), the speakers of the others counted as rare and
/// the last one's as frequent, and hybrid recall@10 of the project's evaluation fell 3.7 points.
pub const NAME_SAMPLE: i64 = 5000;

/// Most distinct names of a query counted; the others stay as written.
pub const MOST_NAMES: usize = 8;

/// What a frequent name is replaced with. Measured against leaving the name out (the first
/// evaluation set, hybrid recall@10): 0.968 against 0.951, and 0.899 against 0.882 with
/// distractors.
const STAND_IN: &str = "someone";

/// Where the names of `query` are: each word (split at whitespace, not an `-excluded` one) that
/// begins with a capital letter, without the punctuation around it or a possessive `'s`, except
/// a word that opens a sentence (the first, or one after a word ending in `.`, `!` or `?`), a
/// title ("Dr", "Mrs") and the pronoun "I" with its contractions ("I'm", "I've"). A chat's message is often several
/// sentences ("Thanks! Remind me when Ruth graduates?"), and its sentences' first words and its
/// "I'm" are no names, however many texts hold them.
pub fn names(query: &str) -> Vec<Range<usize>> {
    let mut found = Vec::new();
    let mut opens_sentence = true;
    for (start, word) in words(query) {
        let opening = std::mem::replace(&mut opens_sentence, ends_sentence(word));
        if opening || word.starts_with('-') || is_pronoun_i(word) {
            continue;
        }
        let lead = word.len()
            - word
                .trim_start_matches(|c: char| !c.is_alphanumeric())
                .len();
        let core = word[lead..].trim_end_matches(|c: char| !c.is_alphanumeric());
        let core = core
            .strip_suffix("'s")
            .or_else(|| core.strip_suffix("\u{2019}s"))
            .unwrap_or(core);
        if core.chars().next().is_some_and(char::is_uppercase) && !TITLES.contains(&core) {
            found.push(start + lead..start + lead + core.len());
        }
    }
    found
}

/// Titles and the like, written before a name and abbreviated: no names themselves, and no
/// sentence ends after them.
const TITLES: [&str; 9] = ["Mr", "Mrs", "Ms", "Dr", "Prof", "St", "Mt", "Jr", "Sr"];

/// Whether `word` ends a sentence: its last character, closing quotes and brackets aside, is
/// `.`, `!` or `?` (or `…`), and it is no title or initial before a name ("Dr.", "J.").
fn ends_sentence(word: &str) -> bool {
    let word = word.trim_end_matches(['"', '\'', '\u{2019}', '\u{201d}', ')', ']']);
    if !word.ends_with(['.', '!', '?', '\u{2026}']) {
        return false;
    }
    let bare = word.trim_start_matches(['"', '\'', '\u{201c}', '(', '[']);
    let abbreviation = bare.strip_suffix('.').is_some_and(|b| {
        b.chars().count() == 1 && b.starts_with(char::is_uppercase) || TITLES.contains(&b)
    });
    !abbreviation
}

/// The pronoun "I", alone or in a contraction ("I'm", "I’ve"), opening quotes and brackets aside.
fn is_pronoun_i(word: &str) -> bool {
    let word = word.trim_start_matches(['"', '\'', '\u{201c}', '(', '[']);
    word == "I"
        || word.strip_prefix('I').is_some_and(|rest| {
            rest.starts_with(['\'', '\u{2019}']) || !rest.starts_with(char::is_alphanumeric)
        })
}

/// The words of `text` split at whitespace, each with its byte offset.
fn words(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.split_whitespace()
        .map(move |w| (w.as_ptr() as usize - text.as_ptr() as usize, w))
}

/// `query` with each name at `names` whose word `frequent` holds replaced by [`STAND_IN`].
pub fn standing_in(query: &str, names: &[Range<usize>], frequent: &HashSet<&str>) -> String {
    let mut out = String::with_capacity(query.len());
    let mut at = 0;
    for name in names {
        if frequent.contains(&query[name.clone()]) {
            out.push_str(&query[at..name.start]);
            out.push_str(STAND_IN);
            at = name.end;
        }
    }
    out.push_str(&query[at..]);
    out
}

/// What the model embeds for a query.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbeddedQuery {
    /// The query with its frequent names standing as "someone".
    pub text: String,
    /// The same with the names of a middling share standing in too, when it has such names:
    /// the query's vector is then the normalised mean of the two texts' vectors.
    pub halved: Option<String>,
}

impl EmbeddedQuery {
    /// `query` with the names at `names` that `frequent` holds standing as "someone", and the
    /// ones `middling` holds standing in for half the vector.
    fn of(
        query: &str,
        names: &[Range<usize>],
        frequent: &HashSet<&str>,
        middling: &HashSet<&str>,
    ) -> EmbeddedQuery {
        let text = standing_in(query, names, frequent);
        let halved = middling.iter().any(|w| !frequent.contains(w)).then(|| {
            let both: HashSet<&str> = frequent.union(middling).copied().collect();
            standing_in(query, names, &both)
        });
        EmbeddedQuery { text, halved }
    }
}

/// What to embed for `query`: its names held by [`FREQUENT_SHARE`] of the caller's newest texts
/// of any of `corpora` stand as "someone", and those held by [`HALF_SHARE`] of them keep half
/// their weight (see [`EmbeddedQuery`]). Shares kept from the last minute are used; the others
/// are counted in one short transaction and kept.
pub async fn embedded_text(
    caller: &Caller,
    corpora: &[&Corpus],
    query: &str,
) -> Result<EmbeddedQuery, sqlx::Error> {
    let names = names(query);
    if names.is_empty() || corpora.is_empty() {
        return Ok(EmbeddedQuery {
            text: query.to_owned(),
            halved: None,
        });
    }
    // The first few distinct names, in the query's order: each is counted in every text of the
    // sample, so a query of a hundred capitalised words must not count them all.
    let mut distinct: Vec<&str> = Vec::new();
    for name in &names {
        let word = &query[name.clone()];
        if !distinct.contains(&word) && distinct.len() < MOST_NAMES {
            distinct.push(word);
        }
    }
    // Each name's share in each corpus: kept from the last minute, else counted below.
    let mut shares: Vec<(&str, f64)> = Vec::new();
    let mut missing: Vec<(&Corpus, Vec<&str>)> = Vec::new();
    for corpus in corpora {
        let mut unknown = Vec::new();
        for &word in &distinct {
            match caller.name_share(corpus.kind, word) {
                Some(share) => shares.push((word, share)),
                None => unknown.push(word),
            }
        }
        if !unknown.is_empty() {
            missing.push((corpus, unknown));
        }
    }
    if !missing.is_empty() {
        let mut tx = caller.begin().await?;
        for (corpus, words) in missing {
            let counted = count_shares(&mut tx, corpus, &words).await?;
            shares.extend(words.into_iter().zip(counted));
        }
        tx.end_read_only();
    }
    let mut frequent = HashSet::new();
    let mut middling = HashSet::new();
    for (word, share) in shares {
        if share >= FREQUENT_SHARE {
            frequent.insert(word);
        } else if share >= HALF_SHARE {
            middling.insert(word);
        }
    }
    Ok(EmbeddedQuery::of(query, &names, &frequent, &middling))
}

/// The share of the caller's newest [`NAME_SAMPLE`] texts of `corpus` holding each of `words`
/// (all the lexemes of the word), in their order; each is kept for a minute.
async fn count_shares(
    conn: &mut Scoped,
    corpus: &Corpus,
    words: &[&str],
) -> Result<Vec<f64>, sqlx::Error> {
    // Runtime: the sample's statement is the kind's own (see `Corpus::recent`).
    let sql = format!(
        "WITH recent AS MATERIALIZED ({recent} LIMIT $2), sample AS MATERIALIZED (
             SELECT greatest(count(*), 1)::float8 AS n FROM recent
         )
         SELECT CASE WHEN l.q IS NULL THEN 0::float8
                     ELSE (SELECT count(*) FROM recent r WHERE r.tsv @@ l.q)::float8 / s.n
                END AS share
         FROM unnest($1::text[]) WITH ORDINALITY AS u(word, o)
         -- The word's lexemes, all of them: none for a stopword (\"The\"), and a lexeme with a
         -- backslash cannot be quoted, so it is left out.
         CROSS JOIN LATERAL (
             SELECT string_agg(quote_literal(x.lexeme), ' & ')::tsquery AS q
             FROM unnest(tsvector_to_array(
                      to_tsvector('english', mnemo_memory_search_text(u.word)))) AS x(lexeme)
             WHERE position(E'\\\\' in x.lexeme) = 0
         ) l
         CROSS JOIN sample s
         ORDER BY u.o",
        recent = corpus.recent,
    );
    let shares: Vec<f64> = sqlx::query_scalar(&sql)
        .bind(words)
        .bind(NAME_SAMPLE)
        .fetch_all(&mut *conn)
        .await?;
    for (word, share) in words.iter().zip(&shares) {
        conn.keep_name_share(corpus.kind, word, *share);
    }
    Ok(shares)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(query: &str) -> Vec<&str> {
        names(query).into_iter().map(|r| &query[r]).collect()
    }

    #[test]
    fn the_names_of_a_query_are_its_capitalised_words_after_the_first() {
        assert_eq!(named("Where did Omar pop the question?"), ["Omar"]);
        assert_eq!(named("What is Omar's job, and Hana’s?"), ["Omar", "Hana"]);
        assert_eq!(
            named("Who looked after the dog while Maya was in Portugal?"),
            ["Maya", "Portugal"]
        );
        assert_eq!(
            named("\"Space Needle\" -Seattle (Omar)"),
            ["Needle", "Omar"]
        );
        assert_eq!(named("Omar proposed"), Vec::<&str>::new());
        assert_eq!(named("when did  ömer  go"), Vec::<&str>::new());
        assert_eq!(named("when did Ömer go"), ["Ömer"]);
        assert_eq!(named(""), Vec::<&str>::new());
        assert_eq!(named("what about ... ?"), Vec::<&str>::new());
        // A sentence's first word and the pronoun I are no names.
        assert_eq!(
            named("Thanks! Remind me when Ruth graduates. Yesterday I asked Omar."),
            ["Ruth", "Omar"]
        );
        assert_eq!(named("Can you tell what I'm allergic to, Sam?"), ["Sam"]);
        assert_eq!(named("did I’ve or I'd or I, or (I) meet Ida"), ["Ida"]);
        assert_eq!(named("\"Really?\" Nadia asked"), Vec::<&str>::new());
        assert_eq!(named("Was it (Oct. 3) Ines"), ["Oct", "Ines"]);
        // A title or an initial ends no sentence, and a title is no name.
        assert_eq!(
            named("When did Dr. Okafor meet J. K. Rowling?"),
            ["Okafor", "J", "K", "Rowling"]
        );
    }

    #[test]
    fn only_the_frequent_names_stand_as_someone() {
        let query = "Where did Omar propose to Hana, and was Omar's ring new?";
        let frequent = HashSet::from(["Omar"]);
        assert_eq!(
            standing_in(query, &names(query), &frequent),
            "Where did someone propose to Hana, and was someone's ring new?"
        );
        assert_eq!(standing_in(query, &names(query), &HashSet::new()), query);
        // Case matters: a lower-case word is not the name.
        let query = "Did Omar meet omar?";
        assert_eq!(
            standing_in(query, &names(query), &frequent),
            "Did someone meet omar?"
        );
    }

    #[test]
    fn names_of_a_middling_share_stand_in_for_half_the_vector() {
        let query = "Did Omar meet Hana in Porto?";
        let at = names(query);
        let of = |frequent: &[&'static str], middling: &[&'static str]| {
            let frequent: HashSet<&str> = frequent.iter().copied().collect();
            let middling: HashSet<&str> = middling.iter().copied().collect();
            EmbeddedQuery::of(query, &at, &frequent, &middling)
        };
        assert_eq!(
            of(&["Omar"], &["Hana"]),
            EmbeddedQuery {
                text: "Did someone meet Hana in Porto?".into(),
                halved: Some("Did someone meet someone in Porto?".into()),
            }
        );
        // Only frequent and rare names: one text.
        assert_eq!(
            of(&["Omar"], &[]),
            EmbeddedQuery {
                text: "Did someone meet Hana in Porto?".into(),
                halved: None,
            }
        );
        assert_eq!(
            of(&[], &["Omar", "Hana"]),
            EmbeddedQuery {
                text: query.into(),
                halved: Some("Did someone meet someone in Porto?".into()),
            }
        );
    }
}
