//! HTTP load generator for `scripts/bench`: runs one scenario against a running mnemo with N
//! concurrent clients for a fixed time and prints one line of figures:
//!
//! `scenario=<name> clients=16 seconds=10 requests=... errors=... rps=... p50_ms=... p95_ms=... p99_ms=...`
//!
//! Each client acts as its own user (tokens minted with the HS secret from `MNEMO_JWT_SECRET`), so
//! rows do not contend the way a single hot user would. Scenarios prepare their data first, outside
//! the measured window. `chat-context` asks `/api/chat/context` with one new message, a question
//! on one of 48 topics, in a session of its own; each client's user has an earlier history of
//! five sessions of 40 messages (questions and replies on the same topics), so a question matches
//! some of what came before and not all of it.
//!
//! The search scenarios (for `scripts/bench-search`, over data it loads) are `search-keyword`,
//! `search-semantic` and `search-hybrid` (`POST /api/memories/search`) and `chat-search-keyword`,
//! `chat-search-semantic` and `chat-search-hybrid` (`POST /api/chat/search`). With `--users N`
//! every request acts as a random one of the users `u0`..`u{N-1}`, and with `--vocab FILE` (one
//! word a line, most frequent first) its question is 3 to 8 words drawn from that vocabulary with
//! a Zipf-like distribution (rank r with probability about 1/r), like the loaded texts.
//!
//! Task and notes scenarios: `task-events` appends ten events to a task
//! (`POST /api/tasks/{id}/events`), `task-query` asks "where was I?"
//! (`POST /api/tasks/{id}/query`), both on the task `bench/scale-load-tasks.sql` loaded when the
//! user has it (`scripts/bench --scale`: 99,967 messages and 100,000 events for the 100x user),
//! else on a task each client registers; `notes-read` reads the notes of the agent `bench` (the
//! loaded ones, at the size cap for the 100x user, when there are, else 1 KB each client writes);
//! `memory-page-deep` reads a page of 10 memories by cursor (`GET /api/memories?limit=10&cursor=`),
//! the last page of the loaded ones when there are (the 10,000th for the 100x user), else the
//! second.
//!
//! Conversation scenarios, all clients acting as one user (`--user`, default `bench-small`):
//! `append` archives one message of about 200 characters into a random one of `--sessions`
//! sessions, `append-one` into one session (every client appends to the same session), `window`
//! reads the last 10 messages of a random one of the first 100 sessions
//! (`GET /api/chat/sessions/{id}/messages?order=desc&limit=10`; prepared with 10 messages each),
//! and `context-one` asks `/api/chat/context` with one new message (a short question) in one
//! shared session.
//!
//! With `--server-pid` and `--pg-pid` every scenario also prints the CPU time per request of the
//! server process and of the whole PostgreSQL cluster (the postmaster, its children, and the
//! children it has reaped), read from `/proc`: `server_cpu_us_per_req=... pg_cpu_us_per_req=...`;
//! `model_cpu_us_per_req` is the part of the server's that its local embedder's threads
//! (`mnemo-embed-<n>`) spent, and `client_cpu_us_per_req` what this load generator spent.
//! `--cluster-ticks` prints the cluster's CPU time so far alone (`pg_ticks=...`, clock ticks),
//! the same count, so that the script can put pgbench's cost per transaction beside it.
//!
//! `noisy-neighbour` measures fair use between tenants: tenant `noisy` floods with `--clients`
//! clients (`--flood search`: keyword searches of two words by one user over `--corpus` stored
//! 1 KB memories, each word in about a third of them; `--flood write`: 100 KB memory writes, each
//! client its own user) while tenant `quiet` runs
//! `--victim-clients` clients that alternate `GET /api/me` and a read of a small memory. It prints
//! one line: the quiet tenant's p50/p99 (over all its requests, failed ones included) and its
//! answers by status, the flood's successful requests per second and its 429s, and with
//! `--server-pid` / `--pg-pid` the CPU time per request (all answered requests of both tenants) and
//! the cores busy on average, of the server process and of the PostgreSQL cluster (the postmaster,
//! its children, and the children it has reaped), read from `/proc`.
//!
//! `--embed-throughput N` measures the local embedder instead (the model folder from
//! `MNEMO_EMBEDDING_MODEL`, `MNEMO_EMBEDDING_THREADS` threads): 200 queries of 6 words one call
//! at a time, printed as `embed-query queries=... ms_per_query=...`, then N sentences of about 40
//! words in one call, printed as `embed texts=... threads=... texts_per_s=...`.

mod cpu;
mod explain;
mod noisy;
mod peer;
mod scenarios;
mod texts;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use mnemo::config::Config;
use serde_json::{Value, json};

use cpu::*;
use explain::*;
use noisy::*;
use peer::*;
use scenarios::*;
use texts::*;

#[derive(Parser)]
#[command(about = "Load generator for scripts/bench")]
struct Args {
    /// Base URL of the running service.
    #[arg(long, default_value = "http://127.0.0.1:8089")]
    url: String,
    /// Scenario: me, memory-store, memory-retrieve, memory-page-deep, notes-read, archive-batch,
    /// chat-context, task-events, task-query, append, append-one, window, context-one, search-keyword, search-semantic, search-hybrid, chat-search-keyword, chat-search-semantic,
    /// chat-search-hybrid, noisy-neighbour.
    #[arg(long, required_unless_present_any = ["embed_throughput", "explain", "cluster_ticks"])]
    scenario: Option<String>,
    /// Concurrent clients.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Measured seconds.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// HS256 secret the service verifies with.
    #[arg(long, env = "MNEMO_JWT_SECRET", hide_env_values = true)]
    secret: String,
    /// Act, on each request, as a random one of the users u0..u{N-1} (0: each client is its own
    /// user bench-user-{run}-{client}, new for each run, so that no run measures the data earlier
    /// runs left behind).
    #[arg(long, default_value_t = 0)]
    users: usize,
    /// Tenant of the tokens.
    #[arg(long, default_value = "bench")]
    tenant: String,
    /// The one user every client acts as: in the conversation scenarios (append, append-one,
    /// window, context-one; default `bench-small`), and in every other scenario when given.
    #[arg(long)]
    user: Option<String>,
    /// Sessions the `append` scenario spreads over.
    #[arg(long, default_value_t = 1000)]
    sessions: u64,
    /// Vocabulary of the search questions: one word a line, most frequent first.
    #[arg(long)]
    vocab: Option<std::path::PathBuf>,
    /// Measure the local embedder on this many texts instead of running a scenario.
    #[arg(long)]
    embed_throughput: Option<usize>,
    /// Write the plans of the hot conversation statements, of a key read and of a notes read
    /// into this folder instead of running a scenario (as `--user`, default `bench-hist`; database from
    /// `DATABASE_URL`).
    #[arg(long)]
    explain: Option<std::path::PathBuf>,
    /// noisy-neighbour: what the flooding tenant sends, `search` or `write`.
    #[arg(long, default_value = "search")]
    flood: String,
    /// noisy-neighbour: clients of the quiet tenant.
    #[arg(long, default_value_t = 4)]
    victim_clients: usize,
    /// noisy-neighbour: memories the flooding searcher holds.
    #[arg(long, default_value_t = 3000)]
    corpus: usize,
    /// Pid of the mnemo server, for its CPU time.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Pid of the PostgreSQL postmaster, for the cluster's CPU time.
    #[arg(long)]
    pg_pid: Option<u32>,
    /// Clock ticks per second of `/proc/<pid>/stat` (`getconf CLK_TCK`).
    #[arg(long, default_value_t = 100)]
    clock_ticks: u64,
    /// Print the CPU time so far of the PostgreSQL cluster at `--pg-pid`, counted as a
    /// scenario counts it, as `pg_ticks=<clock ticks>`, instead of running a scenario:
    /// `scripts/bench` reads it before and after pgbench, for what the same SQL costs the cluster
    /// per transaction.
    #[arg(long, requires = "pg_pid")]
    cluster_ticks: bool,
    /// Drive a Motorhead at `--url` instead of mnemo, with the same load: `append` and
    /// `append-one` post one message (`POST /sessions/{id}/memory`), `window` reads a session of
    /// 10 messages (`GET /sessions/{id}/memory`). `--server-pid` is then Motorhead's and
    /// `--pg-pid` Redis's.
    #[arg(long)]
    peer_motorhead: bool,
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[rank.min(sorted.len() - 1)].as_secs_f64() * 1000.0
}

/// `--embed-throughput`: loads the local model the way the server does and prints texts/s.
async fn embed_throughput(count: usize) -> ExitCode {
    let threads = std::env::var("MNEMO_EMBEDDING_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(1);
    let config = mnemo::embed::EmbedConfig {
        embedder: mnemo::embed::EmbedderKind::Local,
        model: std::env::var("MNEMO_EMBEDDING_MODEL").ok(),
        threads,
        ..Default::default()
    };
    let embedder = match mnemo::embed::Embedder::from_config(&config) {
        Ok(Some(embedder)) => embedder,
        Ok(None) => return ExitCode::FAILURE,
        Err(e) => {
            eprintln!("mnemo-bench: loading the embedder: {e}");
            return ExitCode::FAILURE;
        }
    };
    match mnemo::embed::query_latency(&embedder, 200).await {
        Ok(q) => println!(
            "embed-query model={} queries={} words_per_query={} threads={} ms_per_query={:.2}",
            embedder.model_id(),
            q.queries,
            q.words_per_query,
            threads,
            q.elapsed.as_secs_f64() * 1000.0 / q.queries as f64
        ),
        Err(e) => {
            eprintln!("mnemo-bench: embedding queries: {e}");
            return ExitCode::FAILURE;
        }
    }
    match mnemo::embed::throughput(&embedder, count.max(1)).await {
        Ok(t) => {
            println!(
                "embed model={} texts={} words_per_text={} threads={} seconds={:.2} texts_per_s={:.1}",
                embedder.model_id(),
                t.texts,
                t.words_per_text,
                threads,
                t.elapsed.as_secs_f64(),
                t.texts_per_second
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("mnemo-bench: embedding: {e}");
            ExitCode::FAILURE
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    if args.cluster_ticks {
        return match cpu_ticks(None, args.pg_pid).1 {
            Some(ticks) => {
                println!("pg_ticks={ticks}");
                ExitCode::SUCCESS
            }
            None => {
                eprintln!("mnemo-bench: no process at --pg-pid to read the cluster's CPU time of");
                ExitCode::FAILURE
            }
        };
    }
    if let Some(count) = args.embed_throughput {
        return embed_throughput(count).await;
    }
    if let Some(dir) = &args.explain {
        let user = args.user.as_deref().unwrap_or("bench-hist");
        return match explain(dir, &args.tenant, user).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("mnemo-bench: explain: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let scenario_name = args.scenario.clone().unwrap_or_default();
    let config = Config::for_secret(None, &args.secret);
    if scenario_name == "noisy-neighbour" {
        return match noisy_neighbour(&args, &config).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("mnemo-bench: noisy-neighbour: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let mut users = Vec::with_capacity(args.users);
    for u in 0..args.users {
        match mnemo::auth::mint(
            &config,
            &format!("u{u}"),
            &args.tenant,
            &[],
            Duration::from_secs(3600),
        ) {
            Ok(token) => users.push(token),
            Err(e) => {
                eprintln!("mnemo-bench: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let users = Arc::new(users);
    let vocab: Vec<String> = match &args.vocab {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(text) => text
                .lines()
                .map(str::trim)
                .filter(|w| !w.is_empty())
                .map(str::to_owned)
                .collect(),
            Err(e) => {
                eprintln!("mnemo-bench: reading {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
        },
        None => Vec::new(),
    };
    let vocab = Arc::new(vocab);
    let conversation = matches!(
        scenario_name.as_str(),
        "append" | "append-one" | "window" | "context-one"
    );
    let shared_user = match &args.user {
        Some(user) => Some(user.clone()),
        None if conversation => Some("bench-small".to_owned()),
        None => None,
    };
    let run_id = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    let mut clients = Vec::new();
    for id in 0..args.clients {
        let user = shared_user
            .clone()
            .unwrap_or_else(|| format!("bench-user-{run_id}-{id}"));
        let token =
            match mnemo::auth::mint(&config, &user, &args.tenant, &[], Duration::from_secs(3600)) {
                Ok(token) => token,
                Err(e) => {
                    eprintln!("mnemo-bench: {e}");
                    return ExitCode::FAILURE;
                }
            };
        let mut client = Client {
            http: reqwest::Client::new(),
            base: args.url.trim_end_matches('/').to_owned(),
            token,
            id,
            prepared: Vec::new(),
            users: users.clone(),
            vocab: vocab.clone(),
            run: run_id,
            sessions: args.sessions,
            motorhead: args.peer_motorhead,
        };
        if let Err(e) = prepare(&scenario_name, &mut client).await {
            eprintln!("mnemo-bench: preparing {scenario_name}: {e}");
            return ExitCode::FAILURE;
        }
        clients.push(Arc::new(client));
    }
    // Warm-up: a second of load that is not measured (connections, caches, prepared statements).
    let scenario: Arc<str> = Arc::from(scenario_name.as_str());
    let _ = run(&clients, &scenario, Duration::from_secs(1)).await;
    let cpu_before = cpu_ticks(args.server_pid, args.pg_pid);
    let model_before = thread_ticks(args.server_pid, "mnemo-embed");
    let client_before = own_ticks();
    let started = Instant::now();
    let (latencies, errors) =
        match run(&clients, &scenario, Duration::from_secs(args.seconds)).await {
            Ok(result) => result,
            Err(e) => {
                eprintln!("mnemo-bench: {e}");
                return ExitCode::FAILURE;
            }
        };
    let elapsed = started.elapsed().as_secs_f64();
    let cpu_after = cpu_ticks(args.server_pid, args.pg_pid);
    let model_after = thread_ticks(args.server_pid, "mnemo-embed");
    let client_after = own_ticks();
    let mut sorted = latencies;
    sorted.sort_unstable();
    let answered = sorted.len() + errors;
    let per_request = |before: Option<u64>, after: Option<u64>| match (before, after) {
        (Some(b), Some(a)) if answered > 0 => format!(
            "{:.0}",
            a.saturating_sub(b) as f64 * 1e6 / args.clock_ticks.max(1) as f64 / answered as f64
        ),
        _ => "n/a".into(),
    };
    println!(
        "scenario={} clients={} seconds={} requests={} errors={} rps={:.0} p50_ms={:.2} p95_ms={:.2} p99_ms={:.2} server_cpu_us_per_req={} pg_cpu_us_per_req={} model_cpu_us_per_req={} client_cpu_us_per_req={}",
        scenario_name,
        args.clients,
        args.seconds,
        sorted.len(),
        errors,
        sorted.len() as f64 / elapsed,
        percentile(&sorted, 50.0),
        percentile(&sorted, 95.0),
        percentile(&sorted, 99.0),
        per_request(cpu_before.0, cpu_after.0),
        per_request(cpu_before.1, cpu_after.1),
        per_request(model_before, model_after),
        per_request(client_before, client_after),
    );
    if errors > 0 && sorted.is_empty() {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

async fn run(
    clients: &[Arc<Client>],
    scenario: &Arc<str>,
    window: Duration,
) -> Result<(Vec<Duration>, usize), String> {
    let deadline = Instant::now() + window;
    let mut tasks = Vec::new();
    for client in clients {
        let client = client.clone();
        let scenario = scenario.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut errors = 0usize;
            let mut n = 0usize;
            while Instant::now() < deadline {
                let t = Instant::now();
                match one(&scenario, &client, n).await {
                    Ok(status) if (200..300).contains(&status) => latencies.push(t.elapsed()),
                    Ok(_) => errors += 1,
                    Err(e) => return Err(e),
                }
                n += 1;
            }
            Ok((latencies, errors))
        }));
    }
    let mut all = Vec::new();
    let mut errors = 0;
    for task in tasks {
        let (latencies, e) = task.await.map_err(|e| e.to_string())??;
        all.extend(latencies);
        errors += e;
    }
    Ok((all, errors))
}
