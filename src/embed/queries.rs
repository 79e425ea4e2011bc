//! Search queries on their way to the model: concurrent queries share one model call, and
//! recent ones are remembered.
//!
//! A search embeds its query before it touches the database, one short text per request. Sent one
//! by one, 16 concurrent searches queue 16 model calls behind each other on the embedding
//! threads; a batch of 16 short texts costs a fraction of that. So a query joins a queue, and one
//! drain task at a time takes everything queued (up to [`MAX_BATCH`]) into one call, answering
//! each waiter; queries arriving meanwhile form the next batch. The drain runs as its own task,
//! so a client that goes away mid-search never strands the others. Vectors of the last
//! [`CACHED`] distinct queries are kept (an agent asking again, a chat recalling for the same
//! message), so a repeated query costs no model call at all.

use std::sync::{Arc, Mutex};

use hashlink::LruCache;
use tokio::sync::oneshot;

use super::{Backend, EmbedError};

/// Queries embedded in one model call at most.
pub const MAX_BATCH: usize = 32;
/// Distinct recent queries whose vectors are kept.
pub const CACHED: usize = 1024;

type Reply = oneshot::Sender<Result<Arc<Vec<f32>>, EmbedError>>;

#[derive(Default)]
struct Queue {
    waiting: Vec<(String, Reply)>,
    draining: bool,
}

pub(super) struct Queries {
    queue: Mutex<Queue>,
    cache: Mutex<LruCache<String, Arc<Vec<f32>>>>,
}

impl Queries {
    pub(super) fn new() -> Queries {
        Queries {
            queue: Mutex::new(Queue::default()),
            cache: Mutex::new(LruCache::new(CACHED)),
        }
    }

    fn cached(&self, text: &str) -> Option<Arc<Vec<f32>>> {
        self.cache.lock().ok()?.get(text).cloned()
    }

    /// The vector of `text`, from the cache or from the next batch.
    pub(super) async fn embed(
        self: &Arc<Self>,
        backend: &Arc<dyn Backend>,
        text: &str,
    ) -> Result<Arc<Vec<f32>>, EmbedError> {
        if let Some(hit) = self.cached(text) {
            return Ok(hit);
        }
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut queue = self
                .queue
                .lock()
                .map_err(|_| EmbedError::Unavailable("the query queue is poisoned".into()))?;
            queue.waiting.push((text.to_owned(), tx));
            !std::mem::replace(&mut queue.draining, true)
        };
        if start {
            tokio::spawn(Arc::clone(self).drain(Arc::clone(backend)));
        }
        rx.await
            .map_err(|_| EmbedError::Unavailable("the query batch was dropped".into()))?
    }

    /// Embeds queued queries batch after batch until the queue is empty.
    async fn drain(self: Arc<Self>, backend: Arc<dyn Backend>) {
        loop {
            let batch: Vec<(String, Reply)> = {
                let Ok(mut queue) = self.queue.lock() else {
                    return;
                };
                if queue.waiting.is_empty() {
                    queue.draining = false;
                    return;
                }
                let n = queue.waiting.len().min(MAX_BATCH);
                queue.waiting.drain(..n).collect()
            };
            // The same text twice in one batch is embedded once.
            let mut texts: Vec<String> = Vec::with_capacity(batch.len());
            for (text, _) in &batch {
                if !texts.contains(text) {
                    texts.push(text.clone());
                }
            }
            let answer = backend.embed(&texts).await.and_then(|vectors| {
                if vectors.len() == texts.len() {
                    Ok(vectors)
                } else {
                    Err(EmbedError::Protocol(format!(
                        "{} vectors for {} texts",
                        vectors.len(),
                        texts.len()
                    )))
                }
            });
            match answer {
                Ok(vectors) => {
                    let vectors: Vec<Arc<Vec<f32>>> = vectors.into_iter().map(Arc::new).collect();
                    if let Ok(mut cache) = self.cache.lock() {
                        for (text, vector) in texts.iter().zip(&vectors) {
                            cache.insert(text.clone(), Arc::clone(vector));
                        }
                    }
                    for (text, reply) in batch {
                        if let Some(i) = texts.iter().position(|t| *t == text) {
                            let _ = reply.send(Ok(Arc::clone(&vectors[i])));
                        }
                    }
                }
                Err(err) => {
                    let why = err.to_string();
                    for (_, reply) in batch {
                        let _ = reply.send(Err(EmbedError::Unavailable(why.clone())));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::Duration;

    use futures::future::BoxFuture;

    use super::*;
    use crate::embed::Embedder;

    /// Hashing vectors, slowly, counting calls and texts; fails while `fail` is set.
    struct Counting {
        inner: Embedder,
        calls: AtomicUsize,
        texts: AtomicUsize,
        fail: AtomicBool,
    }

    impl Backend for Counting {
        fn dimensions(&self) -> usize {
            self.inner.dimensions()
        }
        fn model_id(&self) -> &str {
            self.inner.model_id()
        }
        fn embed<'a>(
            &'a self,
            texts: &'a [String],
        ) -> BoxFuture<'a, Result<Vec<Vec<f32>>, EmbedError>> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.texts.fetch_add(texts.len(), Ordering::SeqCst);
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                if self.fail.load(Ordering::SeqCst) {
                    return Err(EmbedError::Unavailable("down".into()));
                }
                self.inner.embed(texts).await
            })
        }
    }

    fn counting() -> (Arc<Counting>, Arc<dyn Backend>) {
        let backend = Arc::new(Counting {
            inner: Embedder::hashing(16),
            calls: AtomicUsize::new(0),
            texts: AtomicUsize::new(0),
            fail: AtomicBool::new(false),
        });
        let dynamic: Arc<dyn Backend> = backend.clone();
        (backend, dynamic)
    }

    #[tokio::test]
    async fn concurrent_queries_share_model_calls_and_get_their_own_vectors() {
        let (counting, backend) = counting();
        let queries = Arc::new(Queries::new());
        let texts: Vec<String> = (0..20).map(|i| format!("query number {i}")).collect();
        let answers =
            futures::future::join_all(texts.iter().map(|t| queries.embed(&backend, t))).await;
        let expected = Embedder::hashing(16).embed(&texts).await.unwrap();
        for (answer, want) in answers.into_iter().zip(expected) {
            assert_eq!(*answer.unwrap(), want);
        }
        let calls = counting.calls.load(Ordering::SeqCst);
        assert!(calls <= 2, "20 concurrent queries took {calls} model calls");
        assert_eq!(counting.texts.load(Ordering::SeqCst), 20);
        // Asked again: from the cache, no model call.
        let again = queries.embed(&backend, &texts[3]).await.unwrap();
        assert_eq!(counting.calls.load(Ordering::SeqCst), calls);
        assert_eq!(
            *again,
            Embedder::hashing(16).embed(&texts[3..4]).await.unwrap()[0]
        );
    }

    #[tokio::test]
    async fn a_failed_batch_fails_its_queries_and_the_next_ones_still_run() {
        let (counting, backend) = counting();
        let queries = Arc::new(Queries::new());
        counting.fail.store(true, Ordering::SeqCst);
        let failed =
            futures::future::join_all(["a", "b", "c"].map(|t| queries.embed(&backend, t))).await;
        assert!(
            failed
                .iter()
                .all(|r| matches!(r, Err(EmbedError::Unavailable(_))))
        );
        counting.fail.store(false, Ordering::SeqCst);
        // Nothing of the failure was cached, and the queue drains again.
        let ok = queries.embed(&backend, "a").await.unwrap();
        assert_eq!(ok.len(), 16);
    }

    #[tokio::test]
    async fn a_caller_that_goes_away_does_not_strand_the_others() {
        let (_counting, backend) = counting();
        let queries = Arc::new(Queries::new());
        // The first caller starts the drain, then gives up before its answer.
        let gone = tokio::time::timeout(Duration::from_millis(5), queries.embed(&backend, "x"));
        assert!(gone.await.is_err());
        let answer = tokio::time::timeout(Duration::from_secs(5), queries.embed(&backend, "y"))
            .await
            .expect("answered");
        assert!(answer.is_ok());
    }
}
