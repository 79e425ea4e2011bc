//! The texts the scenarios send: deterministic, from a seed.

/// SplitMix64's finaliser: a well-mixed 64-bit hash of `x`.
pub(crate) fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A 1 KB text payload, varied per request so nothing is deduplicated.
pub(crate) fn kilobyte(seed: usize) -> String {
    let mut text = format!("bench output {seed}\n");
    while text.len() < 1024 {
        text.push_str("line of tool output with some words to index: build ok, tests passed\n");
    }
    text.truncate(1024);
    text
}

/// A chat message of about 200 characters, varied by `seed`.
pub(crate) fn chat_text(seed: usize) -> String {
    format!(
        "message {seed}: could you check why the nightly build failed again? The log says the \
         integration tests timed out after the database migration step, and I would like to know \
         whether we should retry it."
    )
}

/// A short chat question naming two of [`WORDS`] and a step, varied by `seed` (the context turn
/// recalls by it: a question every earlier message matches would measure the ranking of them all).
pub(crate) fn question_text(seed: u64) -> String {
    let w = |shift: u32| WORDS[((seed >> shift) % 8) as usize];
    format!(
        "what did we decide about the {} and the {} in step {}?",
        w(0),
        w(3),
        (seed >> 6) % 1000
    )
}

/// About 100 KB of text, varied per client and request so nothing is deduplicated.
pub(crate) fn hundred_kilobytes(client: usize, seed: usize) -> String {
    let mut text = String::with_capacity(100 * 1024 + 128);
    let mut line = 0usize;
    while text.len() < 100 * 1024 {
        text.push_str(&format!(
            "flood {client}-{seed} line {line}: compiling crate, warning unused variable, test ok\n"
        ));
        line += 1;
    }
    text
}

/// Words of the flooding searcher's corpus and questions: each memory holds three of them.
pub(crate) const WORDS: [&str; 8] = [
    "deploy",
    "timeout",
    "cache",
    "migration",
    "index",
    "rollback",
    "latency",
    "quota",
];

/// The `i`th memory of the flooding searcher's corpus: about 1 KB, a few varied words in each.
pub(crate) fn corpus_text(i: usize) -> String {
    let mut text = format!(
        "bench output {i}: {} {} {}\n",
        WORDS[i % 8],
        WORDS[(i / 8) % 8],
        WORDS[(i / 64) % 8]
    );
    while text.len() < 1024 {
        text.push_str("line of tool output with some words to index: build ok, tests passed\n");
    }
    text.truncate(1024);
    text
}
