//! Shared application state, cloned cheaply into every handler.

use std::ops::Deref;
use std::sync::Arc;

use crate::embed::Embedder;
use crate::search::indexer::IndexerStats;

use crate::auth::Verifier;
use crate::config::Config;
use crate::conversations::window::WindowCache;
use crate::llm::LlmClient;
use crate::metrics::Metrics;

/// What every handler shares, behind one reference count: a request clones and drops the state
/// several times on its way through the layers and extractors, and one atomic count per clone
/// costs less than one per field (`perf` had the field-by-field clone and drop at 3–4% of the
/// server's CPU on appends).
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

/// The state's parts; reached through [`AppState`]'s `Deref`.
#[derive(Clone)]
pub struct Shared {
    /// The database; requests reach it through [`Db::scoped`](crate::db::Db::scoped) only.
    pub db: crate::db::Db,
    pub config: Arc<Config>,
    pub verifier: Arc<Verifier>,
    pub metrics: Arc<Metrics>,
    /// Short-term chat windows per session, checked against the database's version on each read.
    pub window_cache: Arc<WindowCache>,
    /// Notes answers as last given, checked against the database on each read.
    pub notes_cache: Arc<crate::notes::cache::NotesCache>,
    /// A user's archives that arrive together, written in one transaction.
    pub session_appends: Arc<crate::conversations::appends::SessionAppends>,
    /// The configured chat model, if any.
    pub llm: Option<Arc<LlmClient>>,
    /// The embedder of semantic search, if any (`MNEMO_EMBEDDER`).
    pub embedder: Option<Embedder>,
    /// Per-tenant concurrency caps and rate limits.
    pub fair_use: Arc<crate::fair_use::FairUse>,
    /// What the background indexer has done, for `/metrics`.
    pub indexer: Arc<IndexerStats>,
    /// Slots of account exports streaming at once (`MNEMO_ACCOUNT_EXPORTS_AT_ONCE`).
    pub exports: Arc<tokio::sync::Semaphore>,
    /// Work a request starts and leaves running (summary refreshes, a streamed chat turn, an
    /// export's stream): shutdown waits for it, and tests [`settle`](Self::settle) on it.
    pub jobs: tokio_util::task::TaskTracker,
}

impl AppState {
    /// Builds the state from a validated config and a connected pool.
    pub async fn new(config: Config, db: crate::db::Db) -> Result<Self, String> {
        let verifier = Verifier::from_config(&config).await?;
        let embedder = Embedder::from_config(&config.embed).map_err(|e| e.to_string())?;
        let fair_use = Arc::new(crate::fair_use::FairUse::new(
            &config.fair_use,
            config.db_max_connections,
        ));
        let exports = Arc::new(tokio::sync::Semaphore::new(
            config.rights.account_exports_at_once,
        ));
        Ok(AppState(Arc::new(Shared {
            db: db.queueing_embeddings(embedder.is_some()),
            window_cache: Arc::new(WindowCache::new(config.conversations.window_cache_sessions)),
            notes_cache: Arc::new(crate::notes::cache::NotesCache::new(
                config.notes.cache_bytes,
            )),
            session_appends: Default::default(),
            llm: LlmClient::from_config(&config.llm).map(Arc::new),
            config: Arc::new(config),
            verifier: Arc::new(verifier),
            metrics: Arc::new(Metrics::default()),
            embedder,
            fair_use,
            indexer: Arc::new(IndexerStats::default()),
            exports,
            jobs: tokio_util::task::TaskTracker::new(),
        })))
    }

    /// Sets the embedder of semantic search (or none), and whether writes queue their text
    /// for it.
    ///
    /// Meant for start-up, before the state is shared: a state already cloned is copied
    /// first, and its clones keep what they had.
    pub fn set_embedder(&mut self, embedder: Option<Embedder>) {
        let shared = Arc::make_mut(&mut self.0);
        shared.db = shared.db.clone().queueing_embeddings(embedder.is_some());
        shared.embedder = embedder;
    }

    /// Forgets what this replica holds in memory of the erased users: every user of `tenant`,
    /// or only `user` (the chat windows and the notes answers).
    pub fn forget_erased(&self, tenant: &str, user: Option<&str>) {
        self.window_cache.remove_all(tenant, user);
        self.notes_cache.remove_all(tenant, user);
    }

    /// Waits until the background work requests have started so far, and whatever it starts in
    /// turn, has finished.
    pub async fn settle(&self) {
        self.jobs.close();
        self.jobs.wait().await;
        self.jobs.reopen();
    }
}

impl Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}
