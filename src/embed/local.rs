//! The in-process embedder: a BERT sentence encoder (all-MiniLM-L6-v2 from `scripts/model`) on
//! the CPU, with the sentence-transformers recipe: WordPiece tokens truncated at 256, mean
//! pooling over the real tokens, L2 normalisation.
//!
//! Inference runs on a dedicated pool of `MNEMO_EMBEDDING_THREADS` threads; every parallel step
//! of the model (matrix products, tokenisation) stays on that pool, so the HTTP server's threads
//! keep their cores however many texts are queued.

use std::path::Path;
use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use futures::future::BoxFuture;
use rayon::prelude::*;
use tokenizers::{Tokenizer, TruncationParams};

use super::bert::{Bert, BertConfig, mean_pool};
use super::{Backend, EmbedError, normalize};

/// Longest input in tokens, `[CLS]` and `[SEP]` included (sentence-transformers'
/// `max_seq_length` for this model); longer texts are cut.
pub const MAX_TOKENS: usize = 256;

struct Model {
    tokenizer: Tokenizer,
    bert: Bert,
    hidden: usize,
}

pub(super) struct LocalBackend {
    model: Arc<Model>,
    pool: Arc<rayon::ThreadPool>,
    batch: usize,
    model_id: String,
}

fn load_error(folder: &Path, what: &str, err: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("embedding model {}: {what}: {err}", folder.display())
}

impl LocalBackend {
    /// Loads the model in `folder` (model.safetensors, tokenizer.json, config.json).
    pub(super) fn load(folder: &Path, threads: usize, batch: usize) -> anyhow::Result<Self> {
        let config_text = std::fs::read_to_string(folder.join("config.json"))
            .map_err(|e| load_error(folder, "config.json", e))?;
        let config: BertConfig =
            serde_json::from_str(&config_text).map_err(|e| load_error(folder, "config.json", e))?;
        config
            .check()
            .map_err(|e| load_error(folder, "config.json", e))?;

        let mut tokenizer = Tokenizer::from_file(folder.join("tokenizer.json"))
            .map_err(|e| load_error(folder, "tokenizer.json", e))?;
        // tokenizer.json may carry its own padding and truncation; we pad per batch ourselves.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_TOKENS.min(config.max_position_embeddings),
                ..Default::default()
            }))
            .map_err(|e| load_error(folder, "tokenizer.json", e))?;

        let weights = std::fs::read(folder.join("model.safetensors"))
            .map_err(|e| load_error(folder, "model.safetensors", e))?;
        let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu)
            .map_err(|e| load_error(folder, "model.safetensors", e))?;
        let bert =
            Bert::load(&config, vb).map_err(|e| load_error(folder, "model.safetensors", e))?;

        // candle splits each matrix product over `RAYON_NUM_THREADS` threads, and without it
        // reads /proc/cpuinfo at every product to count the cores. Equal to the pool's size it
        // does neither: a short query's embedding measured 17% (one at a time) to 33% (16 at
        // once) less CPU, where long texts in bulk embed 13% slower (see the README).
        let threads = threads.max(1);
        let told = std::env::var("RAYON_NUM_THREADS").ok();
        if told.as_deref() != Some(threads.to_string().as_str()) {
            tracing::warn!(
                rayon_num_threads = told.as_deref().unwrap_or("unset"),
                embedding_threads = threads,
                "RAYON_NUM_THREADS differs from MNEMO_EMBEDDING_THREADS: the local model splits \
                 its matrix products for another number of threads (scripts/run sets it)"
            );
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("mnemo-embed-{i}"))
            .build()?;
        let name = folder
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "bert".into());
        Ok(LocalBackend {
            model: Arc::new(Model {
                tokenizer,
                bert,
                hidden: config.hidden_size,
            }),
            pool: Arc::new(pool),
            batch: batch.max(1),
            model_id: format!("local:{name}:{}", config.hidden_size),
        })
    }
}

impl Backend for LocalBackend {
    fn dimensions(&self) -> usize {
        self.model.hidden
    }

    fn model_id(&self) -> &str {
        &self.model_id
    }

    fn embed<'a>(
        &'a self,
        texts: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Vec<f32>>, EmbedError>> {
        let model = Arc::clone(&self.model);
        let texts = texts.to_vec();
        let batch = self.batch;
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.pool.spawn(move || {
            // The receiver is gone when the caller stopped waiting; nothing to do then.
            let _ = tx.send(model.embed(&texts, batch));
        });
        Box::pin(async move {
            rx.await.map_err(|_| {
                EmbedError::Unavailable("the embedding thread stopped before answering".into())
            })?
        })
    }
}

impl Model {
    /// Runs on the embedding pool. Texts are sorted by length before batching so that each
    /// batch pads little; the answer is in input order.
    fn embed(&self, texts: &[String], batch: usize) -> Result<Vec<Vec<f32>>, EmbedError> {
        let inputs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let encodings = self
            .tokenizer
            .encode_batch(inputs, true)
            .map_err(|e| EmbedError::Model(format!("tokenizing: {e}")))?;
        let mut order: Vec<usize> = (0..encodings.len()).collect();
        order.sort_by_key(|&i| encodings[i].get_ids().len());

        // Batches run side by side on the pool's threads (one at a time on a 1-thread pool).
        let chunks: Vec<&[usize]> = order.chunks(batch).collect();
        let answers: Vec<Result<Vec<Vec<f32>>, EmbedError>> = chunks
            .par_iter()
            .map(|chunk| {
                let group: Vec<&tokenizers::Encoding> =
                    chunk.iter().map(|&i| &encodings[i]).collect();
                self.forward(&group)
                    .map_err(|e| EmbedError::Model(e.to_string()))
            })
            .collect();
        let mut out = vec![Vec::new(); texts.len()];
        for (chunk, answer) in chunks.iter().zip(answers) {
            for (&i, vector) in chunk.iter().zip(answer?) {
                out[i] = vector;
            }
        }
        Ok(out)
    }

    /// One padded batch through the encoder, mean-pooled and normalised.
    fn forward(&self, group: &[&tokenizers::Encoding]) -> candle_core::Result<Vec<Vec<f32>>> {
        self.pooled(group)?
            .into_iter()
            .map(|v| normalize(v).map_err(candle_core::Error::msg))
            .collect()
    }

    /// One padded batch through the encoder, mean-pooled over the real tokens.
    fn pooled(&self, group: &[&tokenizers::Encoding]) -> candle_core::Result<Vec<Vec<f32>>> {
        let rows = group.len();
        let seq = group
            .iter()
            .map(|e| e.get_ids().len())
            .max()
            .unwrap_or(0)
            .max(1);
        let mut ids = vec![0u32; rows * seq];
        let mut types = vec![0u32; rows * seq];
        let mut mask = vec![0f32; rows * seq];
        for (row, encoding) in group.iter().enumerate() {
            let start = row * seq;
            for (j, ((&id, &kind), &attend)) in encoding
                .get_ids()
                .iter()
                .zip(encoding.get_type_ids())
                .zip(encoding.get_attention_mask())
                .enumerate()
            {
                ids[start + j] = id;
                types[start + j] = kind;
                mask[start + j] = attend as f32;
            }
        }
        let device = self.bert.device();
        let ids = Tensor::from_vec(ids, (rows, seq), device)?;
        let types = Tensor::from_vec(types, (rows, seq), device)?;
        let mask = Tensor::from_vec(mask, (rows, seq), device)?;
        let hidden = self.bert.forward(&ids, &types, &mask)?;
        mean_pool(&hidden, &mask)?.to_vec2::<f32>()
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use serde::Deserialize;

    use super::*;
    use crate::embed::{EmbedConfig, Embedder, EmbedderKind};

    #[derive(Deserialize)]
    struct Reference {
        max_tokens: usize,
        sentences: Vec<Sentence>,
    }

    #[derive(Deserialize)]
    struct Sentence {
        text: String,
        tokens: usize,
        pooled_norm: f64,
        sum: f64,
        first: Vec<f32>,
    }

    fn reference() -> Reference {
        let path =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/minilm-reference.json");
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    /// The model folder from `MNEMO_EMBEDDING_MODEL` (what `scripts/model` prints), if any.
    fn model_folder(test: &str) -> Option<String> {
        match std::env::var("MNEMO_EMBEDDING_MODEL") {
            Ok(folder) if !folder.is_empty() => Some(folder),
            _ => {
                eprintln!("{test}: skipped, MNEMO_EMBEDDING_MODEL is not set (see scripts/model)");
                None
            }
        }
    }

    fn embedder(folder: &str, batch: usize) -> Embedder {
        let config = EmbedConfig {
            embedder: EmbedderKind::Local,
            model: Some(folder.into()),
            batch,
            ..Default::default()
        };
        Embedder::from_config(&config).unwrap().unwrap()
    }

    /// The Rust encoder agrees with the float64 numpy reference within 1e-4 per dimension.
    #[tokio::test]
    async fn matches_the_reference_vectors() {
        let Some(folder) = model_folder("matches_the_reference_vectors") else {
            return;
        };
        let reference = reference();
        assert_eq!(reference.max_tokens, MAX_TOKENS);
        let local = LocalBackend::load(std::path::Path::new(&folder), 1, 32).unwrap();
        assert_eq!(local.dimensions(), 384);
        assert!(local.model_id().ends_with(":384"), "{}", local.model_id());
        let texts: Vec<String> = reference.sentences.iter().map(|s| s.text.clone()).collect();

        let encodings = local
            .model
            .tokenizer
            .encode_batch(texts.clone(), true)
            .unwrap();
        for (sentence, encoding) in reference.sentences.iter().zip(&encodings) {
            assert_eq!(
                encoding.get_ids().len(),
                sentence.tokens,
                "{}",
                sentence.text
            );
        }
        // Unnormalised pooled vectors, one padded batch, to check the norm too.
        let group: Vec<&tokenizers::Encoding> = encodings.iter().collect();
        let pooled = local.model.pooled(&group).unwrap();

        let vectors = Embedder::with_backend(Arc::new(local))
            .embed(&texts)
            .await
            .unwrap();
        for ((sentence, vector), raw) in reference.sentences.iter().zip(&vectors).zip(&pooled) {
            assert_eq!(vector.len(), 384);
            for (i, (got, want)) in vector.iter().zip(&sentence.first).enumerate() {
                assert!(
                    (got - want).abs() < 1e-4,
                    "{:?} dim {i}: {got} vs {want}",
                    sentence.text
                );
            }
            let sum: f64 = vector.iter().map(|x| f64::from(*x)).sum();
            assert!(
                (sum - sentence.sum).abs() < 1e-3,
                "{:?} sum {sum} vs {}",
                sentence.text,
                sentence.sum
            );
            let norm = raw
                .iter()
                .map(|x| f64::from(*x).powi(2))
                .sum::<f64>()
                .sqrt();
            assert!(
                (norm - sentence.pooled_norm).abs() < 1e-4 * sentence.pooled_norm,
                "{:?} pooled norm {norm} vs {}",
                sentence.text,
                sentence.pooled_norm
            );
        }
    }

    /// Batching and padding change nothing: one text per batch gives the same vectors.
    #[tokio::test]
    async fn batches_pad_without_changing_vectors() {
        let Some(folder) = model_folder("batches_pad_without_changing_vectors") else {
            return;
        };
        let texts: Vec<String> = reference().sentences.into_iter().map(|s| s.text).collect();
        let together = embedder(&folder, 32).embed(&texts).await.unwrap();
        let alone = embedder(&folder, 1).embed(&texts).await.unwrap();
        for (a, b) in together.iter().zip(&alone) {
            let cosine: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
            assert!(cosine > 0.99999, "{cosine}");
        }
        let similar: f32 = {
            let v = embedder(&folder, 32)
                .embed(&[
                    "How can I change my password?".to_owned(),
                    texts[2].clone(),
                    texts[0].clone(),
                ])
                .await
                .unwrap();
            let near: f32 = v[0].iter().zip(&v[1]).map(|(x, y)| x * y).sum();
            let far: f32 = v[0].iter().zip(&v[2]).map(|(x, y)| x * y).sum();
            assert!(near > far + 0.3, "{near} vs {far}");
            near
        };
        assert!(similar > 0.7, "{similar}");
    }

    /// Texts per second for 256 sentences of 40 words, on 1 and then 2 threads:
    /// `cargo test --release --lib embed::local::tests::throughput -- --ignored --nocapture`.
    #[tokio::test]
    #[ignore = "benchmark; run in a release build"]
    async fn throughput() {
        let Some(folder) = model_folder("throughput") else {
            return;
        };
        for threads in [1, 2] {
            let config = EmbedConfig {
                embedder: EmbedderKind::Local,
                model: Some(folder.clone()),
                threads,
                ..Default::default()
            };
            let embedder = Embedder::from_config(&config).unwrap().unwrap();
            let figure = crate::embed::throughput(&embedder, 256).await.unwrap();
            eprintln!(
                "local embedder, {threads} thread(s): {} texts of {} words in {:.2?}: {:.1} texts/s",
                figure.texts, figure.words_per_text, figure.elapsed, figure.texts_per_second
            );
        }
    }
}
