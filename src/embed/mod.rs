//! Sentence embeddings for semantic search (interim: the deterministic test embedders; the local
//! and OpenAI-compatible backends arrive with the embedder module proper).

use std::sync::Arc;

/// Why an embedding failed.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    #[error("the embedder is unavailable: {0}")]
    Unavailable(String),
}

trait Backend: Send + Sync {
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError>;
}

/// A configured embedder; cheap to clone.
#[derive(Clone)]
pub struct Embedder {
    backend: Arc<dyn Backend>,
    dims: usize,
    model_id: Arc<str>,
}

struct Hashing {
    dims: usize,
}

impl Backend for Hashing {
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|t| hash_embed(t, self.dims)).collect())
    }
}

struct Failing;

impl Backend for Failing {
    fn embed(&self, _texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Err(EmbedError::Unavailable("this embedder always fails".into()))
    }
}

fn hash_embed(text: &str, dims: usize) -> Vec<f32> {
    use sha2::{Digest, Sha256};
    let mut v = vec![0f32; dims];
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let digest = Sha256::digest(word.to_lowercase().as_bytes());
        let i = u32::from_le_bytes([digest[0], digest[1], digest[2], digest[3]]) as usize % dims;
        v[i] += 1.0;
    }
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}

impl Embedder {
    /// Deterministic embedder for tests: feature-hashed bag of lowercased words, normalized.
    pub fn hashing(dims: usize) -> Embedder {
        Embedder {
            backend: Arc::new(Hashing { dims }),
            dims,
            model_id: format!("hashing:{dims}").into(),
        }
    }

    /// An embedder whose every call fails (tests of degraded mode).
    pub fn failing(dims: usize) -> Embedder {
        Embedder {
            backend: Arc::new(Failing),
            dims,
            model_id: format!("hashing:{dims}").into(),
        }
    }

    pub fn dimensions(&self) -> usize {
        self.dims
    }

    pub fn model_id(&self) -> &str {
        &self.model_id
    }

    pub async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.backend.embed(texts)
    }
}
