//! Sentence embeddings for semantic search: one L2-normalised `f32` vector per text.
//!
//! [`Embedder`] hides where vectors come from, as chosen by `MNEMO_EMBEDDER`:
//! - `local`: a BERT sentence encoder (all-MiniLM-L6-v2, fetched by `scripts/model`) run
//!   in-process on a bounded pool of `MNEMO_EMBEDDING_THREADS` threads;
//! - `openai`: any OpenAI-compatible `/embeddings` endpoint;
//! - `none`: no embedder ([`Embedder::from_config`] gives `None`).
//!
//! Tests use [`Embedder::hashing`] (deterministic bag of words) and [`Embedder::failing`] (every
//! call fails, for degraded mode). [`Embedder::model_id`] names model and size, to be stored with
//! the vectors so that a change of model is noticed.

mod bert;
pub mod config;
mod local;
mod openai;
mod queries;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use sha2::{Digest, Sha256};

pub use config::{EmbedConfig, EmbedderKind};

/// Why texts could not be embedded.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// The embedder cannot answer now (endpoint down or overloaded after retries, timeout,
    /// embedding threads gone); trying again later may work.
    #[error("embedder unavailable: {0}")]
    Unavailable(String),
    /// The endpoint refused the request (bad key, unknown model, input too long...); the same
    /// request will fail again.
    #[error("embedding endpoint refused the request with HTTP {status}: {body}")]
    Rejected { status: u16, body: String },
    /// The endpoint answered something that is not the expected vectors.
    #[error("embedding endpoint answered unexpectedly: {0}")]
    Protocol(String),
    /// The local model failed on the input.
    #[error("embedding model failed: {0}")]
    Model(String),
}

/// One source of vectors. Implementations must return exactly one normalised vector of
/// [`Backend::dimensions`] values per text, in input order.
trait Backend: Send + Sync {
    fn dimensions(&self) -> usize;
    fn model_id(&self) -> &str;
    fn embed<'a>(&'a self, texts: &'a [String])
    -> BoxFuture<'a, Result<Vec<Vec<f32>>, EmbedError>>;
}

/// A loaded embedder; cheap to clone (the model is shared).
#[derive(Clone)]
pub struct Embedder {
    backend: Arc<dyn Backend>,
    queries: Arc<queries::Queries>,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("model_id", &self.model_id())
            .finish()
    }
}

impl Embedder {
    /// The embedder `config` asks for; `Ok(None)` when `MNEMO_EMBEDDER=none`.
    ///
    /// `local` loads the model now (about 90 MB read once). `openai` with
    /// `MNEMO_EMBEDDING_DIMENSIONS` set reaches nothing; without it, one probe request learns the
    /// vector size, so the endpoint must answer at startup (this blocks the calling thread for
    /// at most the retries of one request).
    pub fn from_config(config: &EmbedConfig) -> anyhow::Result<Option<Embedder>> {
        config.validate().map_err(anyhow::Error::msg)?;
        let backend: Arc<dyn Backend> = match config.embedder {
            EmbedderKind::None => return Ok(None),
            EmbedderKind::Local => {
                let folder = config.model.as_deref().unwrap_or_default();
                Arc::new(local::LocalBackend::load(
                    std::path::Path::new(folder),
                    config.threads,
                    config.batch,
                )?)
            }
            EmbedderKind::Openai => Arc::new(openai::OpenAiBackend::from_config(config)?),
        };
        Ok(Some(Embedder::with_backend(backend)))
    }

    /// Deterministic embedder for tests: a feature-hashed (SHA-256) bag of lowercased word tokens
    /// (alphanumeric runs), L2-normalised, `dims` dimensions. Texts sharing a word have cosine
    /// above 0 (every component is non-negative) and identical texts cosine 1. A text without
    /// words gets the same fixed vector as every other such text.
    pub fn hashing(dims: usize) -> Embedder {
        Embedder::with_backend(Arc::new(Hashing {
            dims: dims.max(1),
            model_id: format!("hashing:{}", dims.max(1)),
        }))
    }

    /// An embedder whose every call fails with [`EmbedError::Unavailable`], for tests of what
    /// happens when embeddings cannot be had.
    pub fn failing(dims: usize) -> Embedder {
        Embedder::with_backend(Arc::new(Failing {
            dims,
            model_id: format!("failing:{dims}"),
        }))
    }

    fn with_backend(backend: Arc<dyn Backend>) -> Embedder {
        Embedder {
            backend,
            queries: Arc::new(queries::Queries::new()),
        }
    }

    /// The vector of one search query. Concurrent queries are embedded together in one model
    /// call, and the vectors of recent queries are reused (see `queries.rs`).
    pub async fn embed_query(&self, text: &str) -> Result<Arc<Vec<f32>>, EmbedError> {
        self.queries.embed(&self.backend, text).await
    }

    /// Size of every vector.
    pub fn dimensions(&self) -> usize {
        self.backend.dimensions()
    }

    /// Model and size, e.g. `local:all-MiniLM-L6-v2:384`, `openai:text-embedding-3-small:1536`,
    /// `hashing:64`; store it with the vectors so a change of model is detected.
    pub fn model_id(&self) -> &str {
        self.backend.model_id()
    }

    /// One L2-normalised vector per text, in input order. The local model computes on its own
    /// bounded thread pool, never on the async runtime's threads.
    pub async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let vectors = self.backend.embed(texts).await?;
        if vectors.len() != texts.len() {
            return Err(EmbedError::Protocol(format!(
                "{} vectors for {} texts",
                vectors.len(),
                texts.len()
            )));
        }
        Ok(vectors)
    }
}

/// Scales `v` to unit length; refuses vectors that are zero or not finite.
pub(crate) fn normalize(mut v: Vec<f32>) -> Result<Vec<f32>, String> {
    let norm = v
        .iter()
        .map(|x| f64::from(*x) * f64::from(*x))
        .sum::<f64>()
        .sqrt();
    if !norm.is_finite() || norm == 0.0 {
        return Err(format!("cannot normalise a vector of norm {norm}"));
    }
    for x in &mut v {
        *x = (f64::from(*x) / norm) as f32;
    }
    Ok(v)
}

struct Hashing {
    dims: usize,
    model_id: String,
}

impl Hashing {
    fn vector(&self, text: &str) -> Vec<f32> {
        let mut v = vec![0f32; self.dims];
        let mut words = 0;
        for word in text
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
        {
            let digest = Sha256::digest(word.to_lowercase().as_bytes());
            let bucket = u32::from_le_bytes([digest[0], digest[1], digest[2], digest[3]]) as usize;
            v[bucket % self.dims] += 1.0;
            words += 1;
        }
        if words == 0 {
            v[0] = 1.0;
        }
        normalize(v).unwrap_or_default()
    }
}

impl Backend for Hashing {
    fn dimensions(&self) -> usize {
        self.dims
    }

    fn model_id(&self) -> &str {
        &self.model_id
    }

    fn embed<'a>(
        &'a self,
        texts: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Vec<f32>>, EmbedError>> {
        let vectors = texts.iter().map(|t| self.vector(t)).collect();
        Box::pin(async move { Ok(vectors) })
    }
}

struct Failing {
    dims: usize,
    model_id: String,
}

impl Backend for Failing {
    fn dimensions(&self) -> usize {
        self.dims
    }

    fn model_id(&self) -> &str {
        &self.model_id
    }

    fn embed<'a>(
        &'a self,
        _texts: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Vec<f32>>, EmbedError>> {
        Box::pin(async {
            Err(EmbedError::Unavailable(
                "the failing test embedder never embeds".into(),
            ))
        })
    }
}

/// What [`throughput`] measured.
#[derive(Debug, Clone)]
pub struct Throughput {
    pub texts: usize,
    pub words_per_text: usize,
    pub elapsed: Duration,
    pub texts_per_second: f64,
}

/// `count` distinct sentences of about `words` words each, made from a fixed vocabulary (the
/// same for every run, so figures compare).
pub fn sample_texts(count: usize, words: usize) -> Vec<String> {
    const VOCABULARY: [&str; 48] = [
        "the",
        "agent",
        "remembers",
        "that",
        "user",
        "prefers",
        "short",
        "answers",
        "about",
        "database",
        "migrations",
        "and",
        "wants",
        "weekly",
        "reports",
        "on",
        "Monday",
        "morning",
        "project",
        "deadline",
        "moved",
        "to",
        "next",
        "quarter",
        "because",
        "vendor",
        "delayed",
        "shipment",
        "of",
        "servers",
        "meeting",
        "notes",
        "mention",
        "budget",
        "approval",
        "for",
        "hiring",
        "two",
        "engineers",
        "in",
        "Berlin",
        "office",
        "customer",
        "asked",
        "refund",
        "after",
        "failed",
        "upgrade",
    ];
    (0..count)
        .map(|i| {
            (0..words)
                .map(|j| VOCABULARY[(splitmix64(((i as u64) << 16) | j as u64) % 48) as usize])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// A well-mixed 64-bit hash of `x` (SplitMix64's finaliser).
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Embeds `count` sentences of about 40 words in one call (after a small warm-up call) and
/// reports texts per second: the figure for the benchmark.
pub async fn throughput(embedder: &Embedder, count: usize) -> Result<Throughput, EmbedError> {
    const WORDS: usize = 40;
    let texts = sample_texts(count, WORDS);
    embedder.embed(&texts[..texts.len().min(4)]).await?;
    let started = Instant::now();
    embedder.embed(&texts).await?;
    let elapsed = started.elapsed();
    Ok(Throughput {
        texts: count,
        words_per_text: WORDS,
        elapsed,
        texts_per_second: count as f64 / elapsed.as_secs_f64().max(1e-9),
    })
}

/// What [`query_latency`] measured.
#[derive(Debug, Clone)]
pub struct QueryLatency {
    pub queries: usize,
    pub words_per_query: usize,
    pub elapsed: Duration,
}

/// Embeds `count` distinct queries of 6 words one call at a time, as a search embeds one
/// question (after a warm-up call): the figure for a query a person waits for.
pub async fn query_latency(embedder: &Embedder, count: usize) -> Result<QueryLatency, EmbedError> {
    const WORDS: usize = 6;
    let texts = sample_texts(count + 1, WORDS);
    embedder.embed(&texts[count..]).await?;
    let started = Instant::now();
    for text in &texts[..count] {
        embedder.embed(std::slice::from_ref(text)).await?;
    }
    Ok(QueryLatency {
        queries: count,
        words_per_query: WORDS,
        elapsed: started.elapsed(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    fn strings(texts: &[&str]) -> Vec<String> {
        texts.iter().map(|t| t.to_string()).collect()
    }

    #[tokio::test]
    async fn hashing_is_deterministic_and_normalised() {
        let embedder = Embedder::hashing(64);
        assert_eq!(embedder.dimensions(), 64);
        assert_eq!(embedder.model_id(), "hashing:64");
        let texts = strings(&[
            "The cat sat on the mat",
            "the CAT sat on the mat!",
            "A dog barked at the cat",
            "quantum chromodynamics lecture",
            "",
        ]);
        let a = embedder.embed(&texts).await.unwrap();
        let b = embedder.clone().embed(&texts).await.unwrap();
        assert_eq!(a, b);
        assert_eq!(a.len(), texts.len());
        for v in &a {
            assert_eq!(v.len(), 64);
            assert!((cosine(v, v) - 1.0).abs() < 1e-5);
        }
        // Same words, different case and punctuation: the same vector.
        assert!((cosine(&a[0], &a[1]) - 1.0).abs() < 1e-6);
        // Sharing "the" and "cat": similar; more similar to itself than to another text.
        let shared = cosine(&a[0], &a[2]);
        assert!(shared > 0.0 && shared < 0.99, "{shared}");
    }

    #[tokio::test]
    async fn hashing_keeps_input_order() {
        let embedder = Embedder::hashing(32);
        let texts = strings(&["alpha", "beta", "gamma"]);
        let together = embedder.embed(&texts).await.unwrap();
        for (i, text) in texts.iter().enumerate() {
            let alone = embedder.embed(std::slice::from_ref(text)).await.unwrap();
            assert_eq!(alone[0], together[i]);
        }
        assert!(embedder.embed(&[]).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn failing_is_unavailable() {
        let embedder = Embedder::failing(8);
        assert_eq!(embedder.dimensions(), 8);
        assert_eq!(embedder.model_id(), "failing:8");
        let err = embedder.embed(&strings(&["x"])).await.unwrap_err();
        assert!(matches!(err, EmbedError::Unavailable(_)), "{err}");
    }

    #[test]
    fn none_gives_no_embedder() {
        assert!(
            Embedder::from_config(&EmbedConfig::default())
                .unwrap()
                .is_none()
        );
        let bad = EmbedConfig {
            embedder: EmbedderKind::Local,
            ..Default::default()
        };
        let err = Embedder::from_config(&bad).unwrap_err().to_string();
        assert!(err.contains("MNEMO_EMBEDDING_MODEL"), "{err}");
    }

    #[test]
    fn normalize_refuses_zero_and_nan() {
        assert!(normalize(vec![0.0, 0.0]).is_err());
        assert!(normalize(vec![f32::NAN, 1.0]).is_err());
        assert_eq!(normalize(vec![3.0, 4.0]).unwrap(), vec![0.6, 0.8]);
    }

    #[test]
    fn sample_texts_are_distinct_and_long() {
        let texts = sample_texts(256, 40);
        assert_eq!(texts.len(), 256);
        let distinct: std::collections::HashSet<_> = texts.iter().collect();
        assert_eq!(distinct.len(), 256);
        assert!(texts.iter().all(|t| t.split(' ').count() == 40));
    }
}
