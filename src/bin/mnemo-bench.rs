//! HTTP load generator for `scripts/bench`: runs one scenario against a running mnemo with N
//! concurrent clients for a fixed time and prints one line of figures:
//!
//! `scenario=<name> clients=16 seconds=10 requests=... errors=... rps=... p50_ms=... p95_ms=... p99_ms=...`
//!
//! Each client acts as its own user (tokens minted with the HS secret from `MNEMO_JWT_SECRET`), so
//! rows do not contend the way a single hot user would. Scenarios prepare their data first, outside
//! the measured window.
//!
//! The search scenarios (for `scripts/bench-search`, over data it loads) are `search-keyword`,
//! `search-semantic` and `search-hybrid` (`POST /api/memories/search`) and `chat-search-keyword`,
//! `chat-search-semantic` and `chat-search-hybrid` (`POST /api/chat/search`). With `--users N`
//! every request acts as a random one of the users `u0`..`u{N-1}`, and with `--vocab FILE` (one
//! word a line, most frequent first) its question is 3 to 8 words drawn from that vocabulary with
//! a Zipf-like distribution (rank r with probability about 1/r), like the loaded texts.
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
//! children it has reaped), read from `/proc`: `server_cpu_us_per_req=... pg_cpu_us_per_req=...`.
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
//! `MNEMO_EMBEDDING_MODEL`, `MNEMO_EMBEDDING_THREADS` threads): N sentences of about 40 words in
//! one call, printed as `embed texts=... threads=... texts_per_s=...`.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use mnemo::config::Config;
use serde_json::{Value, json};

#[derive(Parser)]
#[command(about = "Load generator for scripts/bench")]
struct Args {
    /// Base URL of the running service.
    #[arg(long, default_value = "http://127.0.0.1:8089")]
    url: String,
    /// Scenario: me, memory-store, memory-retrieve, archive-batch, chat-context, task-events,
    /// append, append-one, window, context-one, search-keyword, search-semantic, search-hybrid, chat-search-keyword, chat-search-semantic,
    /// chat-search-hybrid, noisy-neighbour.
    #[arg(long, required_unless_present_any = ["embed_throughput", "explain"])]
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
    /// Write the plans of the hot conversation statements into this folder instead of running a
    /// scenario (as `--user`, default `bench-hist`; database from `DATABASE_URL`).
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
    /// Drive a Motorhead at `--url` instead of mnemo, with the same load: `append` and
    /// `append-one` post one message (`POST /sessions/{id}/memory`), `window` reads a session of
    /// 10 messages (`GET /sessions/{id}/memory`). `--server-pid` is then Motorhead's and
    /// `--pg-pid` Redis's.
    #[arg(long)]
    peer_motorhead: bool,
}

struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
    id: usize,
    /// Keys or ids the scenario prepared for this client.
    prepared: Vec<String>,
    /// Tokens of the users a request may act as (`--users`); empty: always `token`.
    users: Arc<Vec<String>>,
    /// Words of search questions, most frequent first (`--vocab`).
    vocab: Arc<Vec<String>>,
    /// Unique per run, so message ids of one run never repeat those of an earlier one.
    run: u64,
    /// Sessions of the `append` scenario.
    sessions: u64,
    /// Requests go to a Motorhead (`--peer-motorhead`).
    motorhead: bool,
}

impl Client {
    fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// A well-mixed number for request `n` of this client and `salt`.
    fn random(&self, n: usize, salt: u64) -> u64 {
        splitmix64(((self.id as u64) << 40) ^ ((n as u64) << 8) ^ salt)
    }

    /// The token request `n` is sent with: a random user's with `--users`, else the client's.
    fn token_for(&self, n: usize) -> &str {
        if self.users.is_empty() {
            &self.token
        } else {
            &self.users[(self.random(n, 1) % self.users.len() as u64) as usize]
        }
    }

    /// A search question of 3 to 8 words: vocabulary ranks drawn with probability about 1/rank
    /// (log-uniform), as the loaded texts were.
    fn question(&self, n: usize) -> String {
        if self.vocab.is_empty() {
            return format!("bench output {n} build tests");
        }
        let words = 3 + (self.random(n, 2) % 6) as usize;
        let size = self.vocab.len() as f64;
        (0..words)
            .map(|w| {
                let u = (self.random(n, 16 + w as u64) >> 11) as f64 / (1u64 << 53) as f64;
                let rank = ((u * size.ln()).exp().floor() as usize).clamp(1, self.vocab.len());
                self.vocab[rank - 1].as_str()
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// SplitMix64's finaliser: a well-mixed 64-bit hash of `x`.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A 1 KB text payload, varied per request so nothing is deduplicated.
fn kilobyte(seed: usize) -> String {
    let mut text = format!("bench output {seed}\n");
    while text.len() < 1024 {
        text.push_str("line of tool output with some words to index: build ok, tests passed\n");
    }
    text.truncate(1024);
    text
}

async fn prepare(scenario: &str, client: &mut Client) -> Result<(), String> {
    if client.motorhead {
        return prepare_motorhead(scenario, client).await;
    }
    match scenario {
        "memory-retrieve" => {
            for i in 0..50 {
                let body = json!({"content": kilobyte(i), "description": "bench"});
                let response: Value = send_json(
                    client.http.post(client.url("/api/memories")),
                    &client.token,
                    &body,
                )
                .await?;
                let key = response["memory_key"]
                    .as_str()
                    .ok_or("store returned no memory_key")?;
                client.prepared.push(key.to_owned());
            }
        }
        // Ten messages in each of the first 100 sessions, sent by the first client (repeats of an
        // earlier run are duplicates and change nothing).
        "window" if client.id == 0 => {
            for session in 0..100 {
                let messages: Vec<Value> = (0..10)
                    .map(|i| {
                        json!({"id": format!("w{i}"), "text": chat_text(i), "timestamp": "2026-11-21T12:00:00Z",
                               "sender": if i % 2 == 0 { "user" } else { "ai" }})
                    })
                    .collect();
                send_json(
                    client
                        .http
                        .post(client.url("/api/chat/session/archive_messages")),
                    &client.token,
                    &json!({"session_id": format!("s{session}"), "messages_batch": messages}),
                )
                .await?;
            }
        }
        "task-events" => {
            let body = json!({"name": format!("bench task {}", client.id)});
            let response: Value = send_json(
                client.http.post(client.url("/api/tasks")),
                &client.token,
                &body,
            )
            .await?;
            let id = response["id"].as_str().ok_or("register returned no id")?;
            client.prepared.push(id.to_owned());
        }
        _ => {}
    }
    Ok(())
}

async fn send_json(
    request: reqwest::RequestBuilder,
    token: &str,
    body: &Value,
) -> Result<Value, String> {
    let response = request
        .bearer_auth(token)
        .json(body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let text = response.text().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("setup request failed with {status}: {text}"));
    }
    serde_json::from_str(&text).map_err(|e| e.to_string())
}

/// A chat message of about 200 characters, varied by `seed`.
fn chat_text(seed: usize) -> String {
    format!(
        "message {seed}: could you check why the nightly build failed again? The log says the \
         integration tests timed out after the database migration step, and I would like to know \
         whether we should retry it."
    )
}

/// A short chat question naming two of [`WORDS`] and a step, varied by `seed` (the context turn
/// recalls by it: a question every earlier message matches would measure the ranking of them all).
fn question_text(seed: u64) -> String {
    let w = |shift: u32| WORDS[((seed >> shift) % 8) as usize];
    format!(
        "what did we decide about the {} and the {} in step {}?",
        w(0),
        w(3),
        (seed >> 6) % 1000
    )
}

/// About 100 KB of text, varied per client and request so nothing is deduplicated.
fn hundred_kilobytes(client: usize, seed: usize) -> String {
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
const WORDS: [&str; 8] = [
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
fn corpus_text(i: usize) -> String {
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

/// Sessions of 10 messages each client of the Motorhead `window` scenario reads.
const PEER_WINDOW_SESSIONS: usize = 10;

/// The Motorhead session `k` of `client`'s `window` scenario.
fn peer_window_session(client: &Client, k: usize) -> String {
    format!("w{}-{}-{k}", client.run, client.id)
}

/// Motorhead's window scenario reads sessions of 10 messages, as mnemo's reads its newest 10
/// (Motorhead answers a session's whole window).
async fn prepare_motorhead(scenario: &str, client: &mut Client) -> Result<(), String> {
    match scenario {
        "append" | "append-one" => Ok(()),
        "window" => {
            for k in 0..PEER_WINDOW_SESSIONS {
                let messages: Vec<Value> = (0..10)
                    .map(|i| {
                        json!({"role": if i % 2 == 0 { "Human" } else { "AI" },
                               "content": chat_text(i)})
                    })
                    .collect();
                let url = client.url(&format!(
                    "/sessions/{}/memory",
                    peer_window_session(client, k)
                ));
                let response = client
                    .http
                    .post(url)
                    .json(&json!({"messages": messages}))
                    .send()
                    .await
                    .map_err(|e| e.to_string())?;
                if !response.status().is_success() {
                    return Err(format!("Motorhead answered {}", response.status()));
                }
            }
            Ok(())
        }
        other => Err(format!(
            "`{other}` has no Motorhead counterpart; use append, append-one or window"
        )),
    }
}

/// One measured request to Motorhead.
fn motorhead_request(scenario: &str, client: &Client, n: usize) -> reqwest::RequestBuilder {
    match scenario {
        "window" => {
            let k = client.random(n, 5) as usize % PEER_WINDOW_SESSIONS;
            let url = client.url(&format!(
                "/sessions/{}/memory",
                peer_window_session(client, k)
            ));
            client.http.get(url)
        }
        // append, append-one (prepare refused the rest)
        _ => {
            let session = if scenario == "append" {
                client.random(n, 4) % client.sessions.max(1)
            } else {
                0
            };
            client
                .http
                .post(client.url(&format!("/sessions/s{session}/memory")))
                .json(&json!({"messages": [{
                    "role": if n.is_multiple_of(2) { "Human" } else { "AI" },
                    "content": chat_text(n)}]}))
        }
    }
}

/// One measured request; returns its HTTP status (0: no answer).
async fn one(scenario: &str, client: &Client, n: usize) -> Result<u16, String> {
    if client.motorhead {
        return Ok(status_of(motorhead_request(scenario, client, n).send().await).await);
    }
    let request = match scenario {
        "me" => client.http.get(client.url("/api/me")),
        "memory-store" => client
            .http
            .post(client.url("/api/memories"))
            .json(&json!({"content": kilobyte(n), "description": "bench output"})),
        "memory-retrieve" => {
            let key = &client.prepared[n % client.prepared.len()];
            client.http.get(client.url(&format!("/api/memories/{key}")))
        }
        "archive-batch" => {
            let session = format!("bench-{}-{}", client.id, n);
            let messages: Vec<Value> = (0..20)
                .map(|i| {
                    json!({"id": format!("m{i}"), "text": format!("message {i} of the bench conversation"),
                           "sender": if i % 2 == 0 { "user" } else { "ai" },
                           "timestamp": "2026-11-21T12:00:00Z"})
                })
                .collect();
            client
                .http
                .post(client.url("/api/chat/session/archive_messages"))
                .json(&json!({"session_id": session, "messages_batch": messages}))
        }
        "append" | "append-one" => {
            let session = if scenario == "append" {
                client.random(n, 4) % client.sessions.max(1)
            } else {
                0
            };
            client
                .http
                .post(client.url("/api/chat/session/archive_messages"))
                .json(
                    &json!({"session_id": format!("s{session}"), "messages_batch": [{
                    "id": format!("a{}-{}-{n}", client.run, client.id), "text": chat_text(n),
                    "sender": if n.is_multiple_of(2) { "user" } else { "ai" },
                    "timestamp": "2026-11-21T12:00:00Z"}]}),
                )
        }
        "window" => {
            let session = client.random(n, 5) % 100;
            client.http.get(client.url(&format!(
                "/api/chat/sessions/s{session}/messages?order=desc&limit=10"
            )))
        }
        "context-one" => client.http.post(client.url("/api/chat/context")).json(
            &json!({"session_id": "ctx", "agent_id": "bench",
                "new_messages": [{"id": format!("c{}-{}-{n}", client.run, client.id),
                                  "text": question_text(client.random(n, 6)), "sender": "user",
                                  "timestamp": "2026-11-21T12:00:00Z"}]}),
        ),
        "chat-context" => {
            let session = format!("bench-ctx-{}", client.id);
            client.http.post(client.url("/api/chat/context")).json(&json!({
                "session_id": session, "agent_id": "bench",
                "new_messages": [{"id": format!("c{n}"), "text": "what did we decide?", "sender": "user",
                                  "timestamp": "2026-11-21T12:00:00Z"}]}))
        }
        "task-events" => {
            let task = &client.prepared[0];
            let events: Vec<Value> = (0..10)
                .map(|i| {
                    json!({"stage": 1, "sub_task_id": "sub-1", "tool_name": "cli", "status": "COMPLETED",
                           "step_narrative": format!("step {i} of the batch"),
                           "input_payload": {"cmd": "docker build ."}, "result_data": {"exit": 0},
                           "duration_ms": 12})
                })
                .collect();
            client
                .http
                .post(client.url(&format!("/api/tasks/{task}/events")))
                .json(&json!({"events": events}))
        }
        "search-keyword" | "search-semantic" | "search-hybrid" => client
            .http
            .post(client.url("/api/memories/search"))
            .json(&json!({"query": client.question(n), "limit": 10,
                          "mode": scenario.trim_start_matches("search-")})),
        "chat-search-keyword" | "chat-search-semantic" | "chat-search-hybrid" => client
            .http
            .post(client.url("/api/chat/search"))
            .json(&json!({"query": client.question(n), "limit": 10,
                          "mode": scenario.trim_start_matches("chat-search-")})),
        "noisy-search" => {
            // Two of the corpus words: each is in about a third of the memories.
            let r = client.random(n, 3) as usize;
            let query = format!("{} {}", WORDS[r % 8], WORDS[(r / 8) % 8]);
            client
                .http
                .post(client.url("/api/memories/search"))
                .json(&json!({"query": query, "limit": 10, "mode": "keyword"}))
        }
        "noisy-write" => client
            .http
            .post(client.url("/api/memories"))
            .json(&json!({"content": hundred_kilobytes(client.id, n), "description": "flood"})),
        "noisy-victim" if n.is_multiple_of(2) => client.http.get(client.url("/api/me")),
        "noisy-victim" => {
            let key = &client.prepared[0];
            client.http.get(client.url(&format!("/api/memories/{key}")))
        }
        other => return Err(format!("unknown scenario `{other}`")),
    };
    let response = request.bearer_auth(client.token_for(n)).send().await;
    Ok(status_of(response).await)
}

/// The status of an answer read to its end (0: no answer, or a body cut short).
async fn status_of(response: Result<reqwest::Response, reqwest::Error>) -> u16 {
    match response {
        Ok(r) => {
            let status = r.status().as_u16();
            if r.bytes().await.is_ok() { status } else { 0 }
        }
        Err(_) => 0,
    }
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
        "scenario={} clients={} seconds={} requests={} errors={} rps={:.0} p50_ms={:.2} p95_ms={:.2} p99_ms={:.2} server_cpu_us_per_req={} pg_cpu_us_per_req={}",
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

/// The flooding tenant of `noisy-neighbour`, and the quiet one.
const NOISY: &str = "noisy";
const QUIET: &str = "quiet";

/// One answer: how long it took and its status (0: no answer).
type Answer = (Duration, u16);

fn mint(config: &Config, user: &str, tenant: &str) -> Result<String, String> {
    mnemo::auth::mint(config, user, tenant, &[], Duration::from_secs(3600))
        .map_err(|e| e.to_string())
}

/// PUTs `content` under `key` (created, or unchanged when it is already there).
async fn put_memory(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    key: &str,
    content: String,
) -> Result<(), String> {
    let response = http
        .put(format!("{base}/api/memories/{key}"))
        .bearer_auth(token)
        .json(&json!({"content": content, "description": "bench"}))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    if !status.is_success() {
        let text = response.text().await.unwrap_or_default();
        return Err(format!("PUT {key} answered {status}: {text}"));
    }
    Ok(())
}

/// Runs every client of both tenants until `window` has passed; answers of the flood, then of the
/// quiet tenant.
async fn load_both(
    flood: &[Arc<Client>],
    flood_scenario: &'static str,
    quiet: &[Arc<Client>],
    window: Duration,
) -> Result<(Vec<Answer>, Vec<Answer>), String> {
    let deadline = Instant::now() + window;
    let spawn = |clients: &[Arc<Client>], scenario: &'static str| {
        clients
            .iter()
            .map(|client| {
                let client = client.clone();
                tokio::spawn(async move {
                    let mut answers = Vec::new();
                    let mut n = 0usize;
                    while Instant::now() < deadline {
                        let t = Instant::now();
                        let status = one(scenario, &client, n).await?;
                        answers.push((t.elapsed(), status));
                        n += 1;
                    }
                    Ok::<_, String>(answers)
                })
            })
            .collect::<Vec<_>>()
    };
    let flood_tasks = spawn(flood, flood_scenario);
    let quiet_tasks = spawn(quiet, "noisy-victim");
    let mut flood_answers = Vec::new();
    for task in flood_tasks {
        flood_answers.extend(task.await.map_err(|e| e.to_string())??);
    }
    let mut quiet_answers = Vec::new();
    for task in quiet_tasks {
        quiet_answers.extend(task.await.map_err(|e| e.to_string())??);
    }
    Ok((flood_answers, quiet_answers))
}

/// Counts of the answers that were not 2xx, as `429:12,503:3` (`0` when there are none).
fn failures(answers: &[Answer]) -> String {
    let mut counts = std::collections::BTreeMap::new();
    for (_, status) in answers {
        if !(200..300).contains(status) {
            *counts.entry(*status).or_insert(0usize) += 1;
        }
    }
    if counts.is_empty() {
        return "0".into();
    }
    counts
        .iter()
        .map(|(status, count)| format!("{status}:{count}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The parent pid and utime, stime, cutime, cstime (clock ticks) of `/proc/<pid>/stat`.
fn proc_stat(pid: u32) -> Option<(u32, [u64; 4])> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses; the fields after it do not.
    let fields: Vec<&str> = text[text.rfind(')')? + 1..].split_whitespace().collect();
    let ppid = fields.get(1)?.parse().ok()?;
    let mut times = [0u64; 4];
    for (i, time) in times.iter_mut().enumerate() {
        *time = fields.get(11 + i)?.parse().ok()?;
    }
    Some((ppid, times))
}

/// CPU ticks so far of the server process, and of the PostgreSQL cluster: the postmaster with the
/// children it has reaped, plus its live children.
fn cpu_ticks(server: Option<u32>, postmaster: Option<u32>) -> (Option<u64>, Option<u64>) {
    let server = server.and_then(proc_stat).map(|(_, t)| t[0] + t[1]);
    let cluster = postmaster.and_then(|pm| {
        let (_, own) = proc_stat(pm)?;
        let mut total: u64 = own.iter().sum();
        for entry in std::fs::read_dir("/proc").ok()?.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if let Some((ppid, t)) = proc_stat(pid)
                && ppid == pm
            {
                total += t[0] + t[1];
            }
        }
        Some(total)
    });
    (server, cluster)
}

/// `noisy-neighbour`: one tenant floods, another does light requests; prints one line.
async fn noisy_neighbour(args: &Args, config: &Config) -> Result<(), String> {
    let flood_scenario = match args.flood.as_str() {
        "search" => "noisy-search",
        "write" => "noisy-write",
        other => return Err(format!("unknown --flood `{other}`; use search or write")),
    };
    let base = args.url.trim_end_matches('/').to_owned();
    let http = reqwest::Client::new();
    let client = |id: usize, token: String, prepared: Vec<String>| {
        Arc::new(Client {
            http: reqwest::Client::new(),
            base: base.clone(),
            token,
            id,
            prepared,
            users: Arc::new(Vec::new()),
            vocab: Arc::new(Vec::new()),
            run: 0,
            sessions: 1,
            motorhead: false,
        })
    };

    // The searcher's corpus, under fixed keys: a second run finds it unchanged and writes nothing.
    let searcher = mint(config, "searcher", NOISY)?;
    if args.flood == "search" {
        let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let (http, base, token, next) =
                (http.clone(), base.clone(), searcher.clone(), next.clone());
            let corpus = args.corpus;
            tasks.push(tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= corpus {
                        return Ok::<_, String>(());
                    }
                    put_memory(&http, &base, &token, &format!("corpus-{i}"), corpus_text(i))
                        .await?;
                }
            }));
        }
        for task in tasks {
            task.await.map_err(|e| e.to_string())??;
        }
    }
    let mut flood = Vec::new();
    for id in 0..args.clients {
        let token = match args.flood.as_str() {
            "search" => searcher.clone(),
            _ => mint(config, &format!("writer-{id}"), NOISY)?,
        };
        flood.push(client(id, token, Vec::new()));
    }
    let mut quiet = Vec::new();
    for id in 0..args.victim_clients {
        let token = mint(config, &format!("quiet-{id}"), QUIET)?;
        let note = "a small memory of the quiet tenant: the build passed".to_owned();
        put_memory(&http, &base, &token, "note", note).await?;
        quiet.push(client(id, token, vec!["note".to_owned()]));
    }

    // Warm-up, not measured.
    load_both(&flood, flood_scenario, &quiet, Duration::from_secs(1)).await?;
    let cpu_before = cpu_ticks(args.server_pid, args.pg_pid);
    let started = Instant::now();
    let (flood_answers, quiet_answers) = load_both(
        &flood,
        flood_scenario,
        &quiet,
        Duration::from_secs(args.seconds),
    )
    .await?;
    let elapsed = started.elapsed().as_secs_f64();
    let cpu_after = cpu_ticks(args.server_pid, args.pg_pid);

    let mut quiet_latencies: Vec<Duration> = quiet_answers.iter().map(|(d, _)| *d).collect();
    quiet_latencies.sort_unstable();
    let ok = |answers: &[Answer]| {
        answers
            .iter()
            .filter(|(_, s)| (200..300).contains(s))
            .count()
    };
    let flood_ok = ok(&flood_answers);
    let requests = flood_answers.len() + quiet_answers.len();
    let seconds_used = |before: Option<u64>, after: Option<u64>| {
        Some(after?.saturating_sub(before?) as f64 / args.clock_ticks.max(1) as f64)
    };
    let server_cpu = seconds_used(cpu_before.0, cpu_after.0);
    let pg_cpu = seconds_used(cpu_before.1, cpu_after.1);
    let per_request = |cpu: Option<f64>| match cpu {
        Some(cpu) if requests > 0 => format!("{:.0}", cpu * 1e6 / requests as f64),
        _ => "n/a".into(),
    };
    let cores = |cpu: Option<f64>| cpu.map_or("n/a".into(), |cpu| format!("{:.2}", cpu / elapsed));
    println!(
        "scenario=noisy-neighbour flood={} clients={} victim_clients={} seconds={} \
         quiet_requests={} quiet_ok={} quiet_p50_ms={:.2} quiet_p99_ms={:.2} quiet_errors={} \
         flood_requests={} flood_ok={} flood_rps={:.0} flood_errors={} \
         server_cpu_us_per_req={} pg_cpu_us_per_req={} server_cores={} pg_cores={}",
        args.flood,
        args.clients,
        args.victim_clients,
        args.seconds,
        quiet_answers.len(),
        ok(&quiet_answers),
        percentile(&quiet_latencies, 50.0),
        percentile(&quiet_latencies, 99.0),
        failures(&quiet_answers),
        flood_answers.len(),
        flood_ok,
        flood_ok as f64 / elapsed,
        failures(&flood_answers),
        per_request(server_cpu),
        per_request(pg_cpu),
        cores(server_cpu),
        cores(pg_cpu),
    );
    Ok(())
}

/// `--explain DIR`: writes `DIR/<statement>.txt`, the plan PostgreSQL runs for each hot statement
/// of the conversation paths, with actual row counts (`EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF,
/// BUFFERS OFF, SUMMARY OFF)`), as `--user` of `--tenant` through the scoped transaction a request
/// uses (row-level security included). Writes are rolled back. Session `s7` is read and written.
async fn explain(dir: &std::path::Path, tenant: &str, user: &str) -> Result<(), String> {
    use mnemo::conversations::model::Order;
    use mnemo::conversations::store;
    let url = std::env::var("DATABASE_URL").map_err(|_| "DATABASE_URL is not set".to_owned())?;
    let db = mnemo::db::connect(&url, 2, None)
        .await
        .map_err(|e| e.to_string())?;
    let principal = mnemo::auth::Principal {
        tenant_id: tenant.to_owned(),
        user_id: user.to_owned(),
        scopes: Vec::new(),
    };
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    const HOW: &str = "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, BUFFERS OFF, SUMMARY OFF) ";
    let session = "s7";
    let at = chrono::DateTime::parse_from_rfc3339("2026-11-21T12:00:00Z")
        .map_err(|e| e.to_string())?
        .with_timezone(&chrono::Utc);
    let version: Option<i64> = {
        let mut tx = db.scoped(&principal).await.map_err(|e| e.to_string())?;
        let v = sqlx::query_scalar!(
            "SELECT version FROM agent_sessions WHERE session_id = $1",
            session
        )
        .fetch_optional(&mut tx)
        .await
        .map_err(|e| e.to_string())?;
        tx.end_read_only();
        v
    };
    let deep = chrono::DateTime::parse_from_rfc3339("2026-01-01T08:00:00Z")
        .map_err(|e| e.to_string())?
        .with_timezone(&chrono::Utc);
    let text = chat_text(1);
    let mut written = Vec::new();
    for name in [
        "archive-one-message",
        "window",
        "window-unchanged",
        "messages-newest-page",
        "messages-deep-page",
        "sessions-list",
    ] {
        let mut tx = db.scoped(&principal).await.map_err(|e| e.to_string())?;
        let no_days: Option<i32> = None;
        let messages_sql = |order| format!("{HOW}{}", store::messages_sql(order));
        let sessions_sql = format!("{HOW}{}", store::sessions_sql());
        let archive_sql = format!("{HOW}{}", store::ARCHIVE_SQL);
        let window_sql = format!("{HOW}{}", store::WINDOW_SQL);
        // Runtime: each is EXPLAIN over the conversation store's own statement text.
        let query = match name {
            "archive-one-message" => {
                sqlx::query_scalar::<_, String>(&archive_sql)
                    .bind(session)
                    .bind("assistant")
                    .bind(vec!["explain-1"])
                    .bind(vec!["user"])
                    .bind(vec![text.as_str()])
                    .bind(vec![at])
                    .bind(vec![None::<Value>])
                    .bind(vec![None::<&str>])
                    .bind(uuid::Uuid::now_v7())
                    .bind(Some(at))
                    .bind(Some(at))
                    .bind(1i32)
                    .bind(false)
                    .bind(vec![None::<chrono::DateTime<chrono::Utc>>])
                    .bind(Vec::<&str>::new())
                    .bind(Vec::<Option<chrono::DateTime<chrono::Utc>>>::new())
                    .fetch_all(&mut tx)
                    .await
            }
            "window" | "window-unchanged" => {
                sqlx::query_scalar::<_, String>(&window_sql)
                    .bind(session)
                    .bind(10i64)
                    .bind(no_days)
                    .bind(if name == "window" { None } else { version })
                    .fetch_all(&mut tx)
                    .await
            }
            "messages-newest-page" => {
                sqlx::query_scalar::<_, String>(&messages_sql(Order::Desc))
                    .bind(no_days)
                    .bind(session)
                    .bind(None::<chrono::DateTime<chrono::Utc>>)
                    .bind(None::<i64>)
                    .bind(11i64)
                    .fetch_all(&mut tx)
                    .await
            }
            // A cursor in the middle of the session's history.
            "messages-deep-page" => {
                sqlx::query_scalar::<_, String>(&messages_sql(Order::Asc))
                    .bind(no_days)
                    .bind(session)
                    .bind(Some(deep))
                    .bind(Some(0i64))
                    .bind(101i64)
                    .fetch_all(&mut tx)
                    .await
            }
            _ => {
                sqlx::query_scalar::<_, String>(&sessions_sql)
                    .bind(no_days)
                    .bind(None::<&str>)
                    .bind(None::<chrono::DateTime<chrono::Utc>>)
                    .bind(None::<&str>)
                    .bind(51i64)
                    .fetch_all(&mut tx)
                    .await
            }
        };
        let lines = query.map_err(|e| format!("{name}: {e}"))?;
        // The plan a request runs once PostgreSQL settles on a generic plan for the prepared
        // statement (after five executions), which knows no parameter value: where it differs
        // from the plan above, a cost that grows with the data can hide.
        let statement = match name {
            "archive-one-message" => Some(store::ARCHIVE_SQL.to_owned()),
            "window" => Some(store::WINDOW_SQL.to_owned()),
            "messages-newest-page" => Some(store::messages_sql(Order::Desc)),
            "messages-deep-page" => Some(store::messages_sql(Order::Asc)),
            "sessions-list" => Some(store::sessions_sql()),
            _ => None,
        };
        let generic = match statement {
            // Runtime, and over the simple protocol: a statement with parameters and no values
            // for them is what `GENERIC_PLAN` plans; a prepared one would ask for the values.
            Some(sql) => {
                let explain = format!("EXPLAIN (GENERIC_PLAN, COSTS OFF) {sql}");
                let rows = sqlx::raw_sql(&explain)
                    .fetch_all(&mut tx)
                    .await
                    .map_err(|e| format!("{name} (generic): {e}"))?;
                let lines: Result<Vec<String>, _> =
                    rows.iter().map(|r| sqlx::Row::try_get(r, 0)).collect();
                Some(lines.map_err(|e| format!("{name} (generic): {e}"))?)
            }
            None => None,
        };
        tx.rollback().await.map_err(|e| e.to_string())?;
        let path = dir.join(format!("{name}.txt"));
        std::fs::write(&path, lines.join("\n") + "\n").map_err(|e| e.to_string())?;
        written.push(path.display().to_string());
        if let Some(generic) = generic {
            let path = dir.join(format!("{name}.generic.txt"));
            std::fs::write(&path, generic.join("\n") + "\n").map_err(|e| e.to_string())?;
            written.push(path.display().to_string());
        }
    }
    println!("explain user={user} wrote {}", written.join(" "));
    Ok(())
}
