//! Embeddings from any OpenAI-compatible endpoint: `POST {base}/embeddings` with
//! `{"model", "input": [...], "dimensions"?}` and a bearer key, in batches of
//! `MNEMO_EMBEDDING_BATCH` texts. Each request may take `MNEMO_EMBEDDING_TIMEOUT_SECS` and is
//! retried up to 3 times, with growing pauses, on 429, 5xx and transport errors. Answers are
//! checked (one vector per text, of the expected size, finite) and normalised.

use std::time::Duration;

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::json;

use super::{Backend, EmbedConfig, EmbedError, normalize};

/// Retries after the first attempt.
const MAX_RETRIES: u32 = 3;
/// Pause before the first retry; doubled for each next one.
const RETRY_BASE: Duration = Duration::from_millis(250);
/// Longest pause a `Retry-After` header may ask for.
const RETRY_AFTER_CAP: Duration = Duration::from_secs(10);
/// Text of the startup request that learns the vector size.
const PROBE_TEXT: &str = "dimension probe";

pub(super) struct OpenAiBackend {
    http: reqwest::Client,
    url: String,
    model: String,
    api_key: Option<String>,
    /// Sent as `dimensions` when configured.
    requested_dimensions: Option<usize>,
    /// Size every answer must have; 0 while unknown (only during the probe).
    dims: usize,
    batch: usize,
    model_id: String,
    retry_base: Duration,
}

#[derive(Deserialize)]
struct EmbeddingsResponse {
    data: Vec<EmbeddingItem>,
}

#[derive(Deserialize)]
struct EmbeddingItem {
    embedding: Vec<f32>,
    #[serde(default)]
    index: Option<usize>,
}

/// How one attempt failed: worth another try or not.
enum Failure {
    Retry(EmbedError, Option<Duration>),
    Fatal(EmbedError),
}

impl OpenAiBackend {
    /// Without `MNEMO_EMBEDDING_DIMENSIONS` this makes one request (on a thread of its own, so
    /// it may be called inside or outside an async runtime) to learn the vector size.
    pub(super) fn from_config(config: &EmbedConfig) -> anyhow::Result<Self> {
        let base = config.base_url.as_deref().unwrap_or_default();
        let model = config.model.clone().unwrap_or_default();
        let mut backend = OpenAiBackend {
            http: Self::client(config)?,
            url: format!("{}/embeddings", base.trim_end_matches('/')),
            model,
            api_key: config.api_key.clone(),
            requested_dimensions: config.dimensions,
            dims: config.dimensions.unwrap_or(0),
            batch: config.batch.max(1),
            model_id: String::new(),
            retry_base: RETRY_BASE,
        };
        if backend.dims == 0 {
            backend.dims = backend.probe(config)?;
        }
        backend.model_id = format!("openai:{}:{}", backend.model, backend.dims);
        Ok(backend)
    }

    fn client(config: &EmbedConfig) -> anyhow::Result<reqwest::Client> {
        Ok(reqwest::Client::builder()
            .timeout(Duration::from_secs(config.timeout_secs))
            .build()?)
    }

    /// Embeds one text to learn the vector size. It runs on a runtime of its own, with a client
    /// of its own (pooled connections belong to the runtime that opened them).
    fn probe(&self, config: &EmbedConfig) -> anyhow::Result<usize> {
        let prober = OpenAiBackend {
            http: Self::client(config)?,
            url: self.url.clone(),
            model: self.model.clone(),
            api_key: self.api_key.clone(),
            requested_dimensions: None,
            dims: 0,
            batch: 1,
            model_id: String::new(),
            retry_base: self.retry_base,
        };
        let answer = std::thread::scope(|scope| {
            scope
                .spawn(|| -> anyhow::Result<Vec<Vec<f32>>> {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()?;
                    Ok(runtime.block_on(prober.embed_batch(&[PROBE_TEXT.to_owned()]))?)
                })
                .join()
        })
        .map_err(|_| anyhow::anyhow!("the embedding dimension probe thread failed"))?
        .map_err(|e| {
            anyhow::anyhow!(
                "learning the vector size from {} failed (set MNEMO_EMBEDDING_DIMENSIONS to \
                 start without asking): {e}",
                self.url
            )
        })?;
        answer
            .first()
            .map(Vec::len)
            .filter(|n| *n > 0)
            .ok_or_else(|| anyhow::anyhow!("{} answered the probe with no vector", self.url))
    }

    async fn embed_all(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(self.batch) {
            out.extend(self.embed_batch(chunk).await?);
        }
        Ok(out)
    }

    /// One batch, with retries.
    async fn embed_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut attempt = 0;
        loop {
            match self.attempt(texts).await {
                Ok(vectors) => return Ok(vectors),
                Err(Failure::Retry(err, retry_after)) if attempt < MAX_RETRIES => {
                    let pause = retry_after
                        .map(|d| d.min(RETRY_AFTER_CAP))
                        .unwrap_or(self.retry_base * 2u32.pow(attempt));
                    tracing::warn!(error = %err, attempt = attempt + 1, pause_ms = pause.as_millis() as u64,
                        "embedding request failed; retrying");
                    tokio::time::sleep(pause).await;
                    attempt += 1;
                }
                Err(Failure::Retry(err, _)) | Err(Failure::Fatal(err)) => return Err(err),
            }
        }
    }

    async fn attempt(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, Failure> {
        let mut body = json!({"model": self.model, "input": texts});
        if let Some(dimensions) = self.requested_dimensions {
            body["dimensions"] = json!(dimensions);
        }
        let mut request = self.http.post(&self.url).json(&body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.map_err(|e| {
            Failure::Retry(EmbedError::Unavailable(format!("{}: {e}", self.url)), None)
        })?;
        let status = response.status();
        if !status.is_success() {
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            let text = response.text().await.unwrap_or_default();
            let body: String = text.chars().take(500).collect();
            return Err(
                if status == reqwest::StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
                    Failure::Retry(
                        EmbedError::Unavailable(format!("{} answered {status}: {body}", self.url)),
                        retry_after,
                    )
                } else {
                    Failure::Fatal(EmbedError::Rejected {
                        status: status.as_u16(),
                        body,
                    })
                },
            );
        }
        let bytes = response.bytes().await.map_err(|e| {
            Failure::Retry(
                EmbedError::Unavailable(format!("{}: reading the answer: {e}", self.url)),
                None,
            )
        })?;
        let parsed: EmbeddingsResponse = serde_json::from_slice(&bytes).map_err(|e| {
            Failure::Fatal(EmbedError::Protocol(format!(
                "not an embeddings answer: {e}"
            )))
        })?;
        self.check(parsed, texts.len()).map_err(Failure::Fatal)
    }

    /// Puts the vectors in input order (by `index` when every item has one), checks count and
    /// size, and normalises.
    fn check(&self, answer: EmbeddingsResponse, count: usize) -> Result<Vec<Vec<f32>>, EmbedError> {
        if answer.data.len() != count {
            return Err(EmbedError::Protocol(format!(
                "{} vectors for {count} texts",
                answer.data.len()
            )));
        }
        let mut slots: Vec<Option<Vec<f32>>> = vec![None; count];
        let indexed = answer.data.iter().all(|item| item.index.is_some());
        for (position, item) in answer.data.into_iter().enumerate() {
            let at = if indexed {
                item.index.unwrap_or(position)
            } else {
                position
            };
            let slot = slots.get_mut(at).ok_or_else(|| {
                EmbedError::Protocol(format!("index {at} out of range for {count} texts"))
            })?;
            if slot.is_some() {
                return Err(EmbedError::Protocol(format!("index {at} answered twice")));
            }
            if self.dims != 0 && item.embedding.len() != self.dims {
                return Err(EmbedError::Protocol(format!(
                    "a vector of {} values where {} were expected (model {})",
                    item.embedding.len(),
                    self.dims,
                    self.model
                )));
            }
            *slot = Some(normalize(item.embedding).map_err(EmbedError::Protocol)?);
        }
        Ok(slots.into_iter().flatten().collect())
    }
}

impl Backend for OpenAiBackend {
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
        Box::pin(self.embed_all(texts))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::Json;
    use axum::extract::State;
    use axum::http::{HeaderMap, StatusCode};
    use axum::response::{IntoResponse, Response};
    use serde_json::Value;

    use super::*;
    use crate::embed::{Embedder, EmbedderKind};

    /// How the test endpoint behaves.
    #[derive(Default)]
    struct Endpoint {
        calls: AtomicUsize,
        /// Answer 500 to this many first calls.
        fail_first: usize,
        /// Answer with this status (and no vectors) to every call.
        status: Option<StatusCode>,
        /// Size of the vectors; `dimensions` in the request wins when present.
        dims: usize,
        /// Give one vector fewer than asked.
        short: bool,
        /// Answer items in reverse order (with their `index`).
        reversed: bool,
        /// Largest batch seen.
        largest_batch: AtomicUsize,
    }

    /// Vector for a text: its length, its word count, then ones; not normalised.
    fn fake_vector(text: &str, dims: usize) -> Vec<f32> {
        let mut v = vec![1.0; dims];
        v[0] = text.len() as f32;
        if dims > 1 {
            v[1] = text.split_whitespace().count() as f32;
        }
        v
    }

    async fn embeddings(
        State(endpoint): State<Arc<Endpoint>>,
        headers: HeaderMap,
        Json(body): Json<Value>,
    ) -> Response {
        let call = endpoint.calls.fetch_add(1, Ordering::SeqCst);
        if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some("Bearer test-key") {
            return (StatusCode::UNAUTHORIZED, "bad key").into_response();
        }
        if let Some(status) = endpoint.status {
            return (status, "no").into_response();
        }
        if call < endpoint.fail_first {
            return (StatusCode::INTERNAL_SERVER_ERROR, "try again").into_response();
        }
        let inputs: Vec<String> = serde_json::from_value(body["input"].clone()).unwrap();
        endpoint
            .largest_batch
            .fetch_max(inputs.len(), Ordering::SeqCst);
        let dims = body["dimensions"]
            .as_u64()
            .map_or(endpoint.dims, |d| d as usize);
        let mut data: Vec<Value> = inputs
            .iter()
            .enumerate()
            .map(|(i, text)| json!({"object": "embedding", "index": i, "embedding": fake_vector(text, dims)}))
            .collect();
        if endpoint.short {
            data.pop();
        }
        if endpoint.reversed {
            data.reverse();
        }
        Json(json!({"object": "list", "data": data, "model": body["model"]})).into_response()
    }

    async fn serve(endpoint: Endpoint) -> (String, Arc<Endpoint>) {
        let endpoint = Arc::new(endpoint);
        let app = axum::Router::new()
            .route("/v1/embeddings", axum::routing::post(embeddings))
            .with_state(Arc::clone(&endpoint));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (format!("http://{addr}/v1/"), endpoint)
    }

    fn config(base_url: &str, dimensions: Option<usize>) -> EmbedConfig {
        EmbedConfig {
            embedder: EmbedderKind::Openai,
            model: Some("test-model".into()),
            base_url: Some(base_url.into()),
            api_key: Some("test-key".into()),
            dimensions,
            batch: 2,
            timeout_secs: 5,
            ..Default::default()
        }
    }

    fn backend(base_url: &str, dimensions: Option<usize>) -> OpenAiBackend {
        let mut backend = OpenAiBackend::from_config(&config(base_url, dimensions)).unwrap();
        backend.retry_base = Duration::from_millis(5);
        backend
    }

    fn texts(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("text number {i} {}", "x".repeat(i)))
            .collect()
    }

    #[tokio::test]
    async fn batches_keep_order_and_normalise() {
        let (url, endpoint) = serve(Endpoint {
            dims: 4,
            reversed: true,
            ..Default::default()
        })
        .await;
        let embedder = Embedder::with_backend(Arc::new(backend(&url, Some(4))));
        assert_eq!(embedder.dimensions(), 4);
        assert_eq!(embedder.model_id(), "openai:test-model:4");
        let input = texts(5);
        let vectors = embedder.embed(&input).await.unwrap();
        assert_eq!(endpoint.calls.load(Ordering::SeqCst), 3);
        assert_eq!(endpoint.largest_batch.load(Ordering::SeqCst), 2);
        assert_eq!(vectors.len(), 5);
        for (text, vector) in input.iter().zip(&vectors) {
            let expected = normalize(fake_vector(text, 4)).unwrap();
            assert_eq!(vector, &expected, "{text}");
        }
    }

    #[tokio::test]
    async fn a_500_is_retried() {
        let (url, endpoint) = serve(Endpoint {
            dims: 3,
            fail_first: 1,
            ..Default::default()
        })
        .await;
        let vectors = backend(&url, Some(3)).embed_all(&texts(1)).await.unwrap();
        assert_eq!(vectors.len(), 1);
        assert_eq!(endpoint.calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn retries_stop_after_three() {
        let (url, endpoint) = serve(Endpoint {
            dims: 3,
            status: Some(StatusCode::SERVICE_UNAVAILABLE),
            ..Default::default()
        })
        .await;
        let err = backend(&url, Some(3))
            .embed_all(&texts(1))
            .await
            .unwrap_err();
        assert!(matches!(err, EmbedError::Unavailable(_)), "{err}");
        assert_eq!(endpoint.calls.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn a_refusal_is_not_retried() {
        let (url, endpoint) = serve(Endpoint {
            dims: 3,
            status: Some(StatusCode::BAD_REQUEST),
            ..Default::default()
        })
        .await;
        let err = backend(&url, Some(3))
            .embed_all(&texts(1))
            .await
            .unwrap_err();
        assert!(
            matches!(err, EmbedError::Rejected { status: 400, .. }),
            "{err}"
        );
        assert_eq!(endpoint.calls.load(Ordering::SeqCst), 1);

        let (url, _) = serve(Endpoint {
            dims: 3,
            ..Default::default()
        })
        .await;
        let mut wrong_key = backend(&url, Some(3));
        wrong_key.api_key = Some("other".into());
        let err = wrong_key.embed_all(&texts(1)).await.unwrap_err();
        assert!(
            matches!(err, EmbedError::Rejected { status: 401, .. }),
            "{err}"
        );
    }

    #[tokio::test]
    async fn wrong_answers_are_refused() {
        // The endpoint ignores nothing: asking 3 dimensions of a model configured for 5.
        let (url, _) = serve(Endpoint {
            dims: 5,
            ..Default::default()
        })
        .await;
        let mut mismatched = backend(&url, Some(5));
        mismatched.requested_dimensions = Some(3);
        let err = mismatched.embed_all(&texts(1)).await.unwrap_err();
        assert!(
            matches!(&err, EmbedError::Protocol(m) if m.contains("3 values where 5")),
            "{err}"
        );

        let (url, _) = serve(Endpoint {
            dims: 3,
            short: true,
            ..Default::default()
        })
        .await;
        let err = backend(&url, Some(3))
            .embed_all(&texts(2))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, EmbedError::Protocol(m) if m.contains("1 vectors for 2")),
            "{err}"
        );
    }

    #[tokio::test]
    async fn an_unreachable_endpoint_is_unavailable() {
        // Bind and drop a listener: nothing listens on that port now.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let err = backend(&format!("http://{addr}/v1"), Some(3))
            .embed_all(&texts(1))
            .await
            .unwrap_err();
        assert!(matches!(err, EmbedError::Unavailable(_)), "{err}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_size_is_probed_when_not_configured() {
        let (url, endpoint) = serve(Endpoint {
            dims: 7,
            fail_first: 1,
            ..Default::default()
        })
        .await;
        let config = config(&url, None);
        let embedder = tokio::task::spawn_blocking(move || Embedder::from_config(&config))
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(embedder.dimensions(), 7);
        assert_eq!(embedder.model_id(), "openai:test-model:7");
        // The probe was retried once after the 500.
        assert_eq!(endpoint.calls.load(Ordering::SeqCst), 2);
        let vectors = embedder.embed(&texts(3)).await.unwrap();
        assert!(vectors.iter().all(|v| v.len() == 7));

        // Nothing to ask: startup fails with a line naming the setting.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let mut config = self::config(&format!("http://{addr}/v1"), None);
        config.timeout_secs = 1;
        let err = tokio::task::spawn_blocking(move || Embedder::from_config(&config))
            .await
            .unwrap()
            .unwrap_err()
            .to_string();
        assert!(err.contains("MNEMO_EMBEDDING_DIMENSIONS"), "{err}");
    }
}
