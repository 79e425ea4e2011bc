//! The `mnemo` command line: `serve`, `migrate`, `token`, `openapi`.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use mnemo::config::{Config, redact_url};
use mnemo::{AppState, db};
use tracing_subscriber::EnvFilter;

/// jemalloc, which hands memory back to the system once a burst is over (glibc's allocator keeps
/// what a flood of connections took).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(name = "mnemo", version, about = "Memory service for LLM agents")]
struct Cli {
    #[command(flatten)]
    config: Config,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Apply pending migrations, then serve HTTP until SIGINT or SIGTERM.
    Serve,
    /// Apply pending migrations and exit.
    Migrate,
    /// Print a token signed with the configured key (development and operations).
    Token {
        /// The user the token speaks for (`sub`).
        #[arg(long)]
        sub: String,
        /// The tenant (written to the configured tenant claim).
        #[arg(long)]
        tenant: String,
        /// A scope to grant (`memory:read`, `memory:write`, `admin`); repeatable. None: read+write.
        #[arg(long = "scope")]
        scopes: Vec<String>,
        /// Lifetime such as `90s`, `15m`, `1h`, `7d`.
        #[arg(long, default_value = "1h", value_parser = parse_ttl)]
        ttl: Duration,
    },
    /// Print the OpenAPI document (the checked-in copy is `openapi/openapi.json`).
    Openapi,
    /// Drops every stored vector and embeds all memories and messages again with the configured
    /// embedder (after a model change), showing progress; then exits.
    Reindex,
}

fn parse_ttl(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration like 90s, 15m, 1h or 7d"))?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86_400,
        _ => return Err(format!("unknown unit `{unit}`; use s, m, h or d")),
    };
    if secs == 0 {
        return Err("the lifetime must be positive".into());
    }
    Ok(Duration::from_secs(secs))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("mnemo: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("mnemo: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), String> {
    let config = cli.config;
    match cli.command {
        Command::Openapi => {
            print!("{}", mnemo::openapi::json());
            Ok(())
        }
        Command::Token {
            sub,
            tenant,
            scopes,
            ttl,
        } => {
            config.validate()?;
            let token = mnemo::auth::mint(&config, &sub, &tenant, &scopes, ttl)?;
            println!("{token}");
            Ok(())
        }
        Command::Migrate => {
            config.validate()?;
            init_tracing();
            let url = config
                .database_url
                .as_deref()
                .ok_or("DATABASE_URL is not set")?;
            let db = db::connect(url, 2, None)
                .await
                .map_err(|e| format!("cannot connect to {}: {e}", redact_url(url)))?;
            db.migrate()
                .await
                .map_err(|e| format!("migration failed: {e}"))?;
            tracing::info!("migrations applied");
            Ok(())
        }
        Command::Serve => {
            config.validate_for_serving()?;
            init_tracing();
            let url = config.database_url.clone().unwrap_or_default();
            // Schema changes and backfills run without the statement timeout of requests.
            let admin = db::connect(&url, 2, None)
                .await
                .map_err(|e| format!("cannot connect to {}: {e}", redact_url(&url)))?;
            admin
                .migrate()
                .await
                .map_err(|e| format!("migration failed: {e}"))?;
            let timeout = Duration::from_secs(config.db_statement_timeout_secs);
            let db = db::connect(&url, config.db_max_connections, Some(timeout))
                .await
                .map_err(|e| format!("cannot connect to {}: {e}", redact_url(&url)))?;
            let listen = config.listen;
            // One readable line of what matters at start; every setting at debug level.
            let auth = if config.jwt_secret.is_some() {
                "HS256 secret"
            } else if config.jwt_public_key.is_some() {
                "public key"
            } else {
                "JWKS"
            };
            tracing::info!(
                database = %redact_url(&url),
                %listen,
                auth,
                embedder = ?config.embed.embedder,
                chat_model = config.llm.model.as_deref().unwrap_or("none"),
                cors_origins = config.cors_origins.len(),
                "starting"
            );
            tracing::debug!(config = ?config, "settings");
            let state = AppState::new(config, db).await?;
            mnemo::prepare_embeddings(&state, &admin).await?;
            admin.close().await;
            let indexer = mnemo::start_background_jobs(&state);
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
            let local = listener.local_addr().map_err(|e| e.to_string())?;
            tracing::info!(%local, "listening; Swagger UI at http://{local}/docs");
            mnemo::serve(listener, state, shutdown_signal())
                .await
                .map_err(|e| format!("server error: {e}"))?;
            indexer.cancel();
            tracing::info!("stopped");
            Ok(())
        }
        Command::Reindex => {
            config.validate_for_serving()?;
            init_tracing();
            let url = config.database_url.clone().unwrap_or_default();
            let db = db::connect(&url, 4, None)
                .await
                .map_err(|e| format!("cannot connect to {}: {e}", redact_url(&url)))?;
            db.migrate()
                .await
                .map_err(|e| format!("migration failed: {e}"))?;
            let state = AppState::new(config, db).await?;
            reindex(&state).await
        }
    }
}

/// `mnemo reindex`: requeues everything and runs the indexer in the foreground until the
/// outbox is empty, printing progress.
async fn reindex(state: &AppState) -> Result<(), String> {
    use mnemo::search::indexer::{self, IndexerStats, Pass};
    let embedder = state
        .embedder
        .clone()
        .ok_or("mnemo reindex needs an embedder: set MNEMO_EMBEDDER")?;
    indexer::prepare_schema(&state.db, &embedder).await?;
    let queued = indexer::requeue_all(&state.db)
        .await
        .map_err(|e| format!("requeueing failed: {e}"))?;
    eprintln!(
        "mnemo reindex: {queued} memories and messages queued for {}",
        embedder.model_id()
    );
    let stats = IndexerStats::default();
    let started = std::time::Instant::now();
    let mut texts = 0usize;
    let mut failures = 0u32;
    loop {
        match indexer::run_once(&state.db, &embedder, &stats).await {
            Pass::Done { chunks, .. } => {
                texts += chunks;
                let left = indexer::backlog(&state.db).await.unwrap_or(0);
                eprintln!(
                    "mnemo reindex: {texts} texts embedded, {left} rows left ({:.0} texts/s)",
                    texts as f64 / started.elapsed().as_secs_f64().max(0.001)
                );
            }
            Pass::Idle => {
                let left = indexer::backlog(&state.db).await.unwrap_or(0);
                if left == 0 {
                    eprintln!(
                        "mnemo reindex: done, {texts} texts in {:.1} s",
                        started.elapsed().as_secs_f64()
                    );
                    return Ok(());
                }
                // Rows waiting for a retry after a failure.
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Pass::Failed(err) => {
                failures += 1;
                if failures >= 5 {
                    return Err(format!("embedding keeps failing: {err}"));
                }
                eprintln!("mnemo reindex: a batch failed ({err}); retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

fn init_tracing() {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,tower_http=info"));
    let json = std::env::var("MNEMO_LOG_FORMAT").is_ok_and(|v| v == "json");
    // Colours only on a terminal: a log file or collector gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Resolves on SIGINT or SIGTERM; axum then stops accepting and lets requests finish.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(err) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %err, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(err) => {
                tracing::error!(error = %err, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutdown requested; finishing requests in flight");
}

#[cfg(test)]
mod tests {
    use super::parse_ttl;
    use std::time::Duration;

    #[test]
    fn ttl_units() {
        assert_eq!(parse_ttl("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_ttl("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_ttl("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_ttl("7d"), Ok(Duration::from_secs(604_800)));
        assert!(parse_ttl("1w").is_err());
        assert!(parse_ttl("0s").is_err());
        assert!(parse_ttl("h").is_err());
    }
}
