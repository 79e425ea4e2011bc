//! Token counting with the cl100k_base BPE (the GPT-3.5/4 tokenizer), for token totals and the
//! capture threshold. Building the BPE takes a noticeable fraction of a second, so it is built once
//! per process and shared.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;

use tiktoken_rs::CoreBPE;

static CL100K: OnceLock<Option<CoreBPE>> = OnceLock::new();

fn bpe() -> Option<&'static CoreBPE> {
    CL100K
        .get_or_init(|| match tiktoken_rs::cl100k_base() {
            Ok(bpe) => Some(bpe),
            Err(err) => {
                tracing::error!(error = %err, "cannot build the cl100k_base tokenizer; estimating tokens");
                None
            }
        })
        .as_ref()
}

/// Rough count used only when the tokenizer is unavailable or gives up on a pathological piece:
/// about four bytes per token for English text and logs.
fn estimate(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

/// Number of cl100k_base tokens in `text` (ordinary text: special-token strings count as text).
///
/// Call it off the async executor for large inputs: it is CPU-bound.
pub fn count(text: &str) -> u64 {
    let Some(bpe) = bpe() else {
        return estimate(text);
    };
    // The tokenizer's regex engine can give up on pathological input and the crate then panics;
    // an estimate for that piece beats failing the whole store.
    catch_unwind(AssertUnwindSafe(|| bpe.encode_ordinary(text).len() as u64))
        .unwrap_or_else(|_| estimate(text))
}

/// Token count of content stored in `pieces` (the chunks, split after a newline): the sum of the
/// pieces' counts. It can differ from counting the whole text at once by about one token per piece
/// boundary; for content of one piece (16 KiB and less) it is exact. Large inputs are counted on
/// several threads (the tokenizer runs at a few MB/s per core).
pub fn count_pieces(pieces: &[&str]) -> u64 {
    if pieces.len() < 16 {
        return pieces.iter().map(|p| count(p)).sum();
    }
    // Asked only here: the answer reads the cgroup's files on every call.
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(8);
    if threads <= 1 {
        return pieces.iter().map(|p| count(p)).sum();
    }
    let per = pieces.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let running: Vec<_> = pieces
            .chunks(per)
            .map(|group| {
                (
                    group,
                    scope.spawn(move || group.iter().map(|p| count(p)).sum::<u64>()),
                )
            })
            .collect();
        running
            .into_iter()
            .map(|(group, handle)| {
                handle
                    .join()
                    .unwrap_or_else(|_| group.iter().map(|p| estimate(p)).sum())
            })
            .sum()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_like_cl100k() {
        // Reference values from OpenAI's tiktoken for cl100k_base.
        assert_eq!(count("hello world"), 2);
        assert_eq!(count(""), 0);
        assert_eq!(count("tiktoken is great!"), 6);
    }

    #[test]
    fn pieces_sum() {
        assert_eq!(count_pieces(&["hello world\n", "hello world\n"]), 6);
        let many = vec!["hello world\n"; 40];
        assert_eq!(count_pieces(&many), 120, "the threaded sum agrees");
    }
}
