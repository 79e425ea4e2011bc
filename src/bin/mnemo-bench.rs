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
    /// search-keyword, search-semantic, search-hybrid, chat-search-keyword, chat-search-semantic,
    /// chat-search-hybrid.
    #[arg(long, required_unless_present = "embed_throughput")]
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
    /// user bench-user-{client}).
    #[arg(long, default_value_t = 0)]
    users: usize,
    /// Tenant of the tokens.
    #[arg(long, default_value = "bench")]
    tenant: String,
    /// Vocabulary of the search questions: one word a line, most frequent first.
    #[arg(long)]
    vocab: Option<std::path::PathBuf>,
    /// Measure the local embedder on this many texts instead of running a scenario.
    #[arg(long)]
    embed_throughput: Option<usize>,
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

/// One measured request; returns whether it succeeded.
async fn one(scenario: &str, client: &Client, n: usize) -> Result<bool, String> {
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
        other => return Err(format!("unknown scenario `{other}`")),
    };
    let response = request.bearer_auth(client.token_for(n)).send().await;
    Ok(match response {
        Ok(r) => {
            let ok = r.status().is_success();
            let _ = r.bytes().await;
            ok
        }
        Err(_) => false,
    })
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
    let scenario_name = args.scenario.clone().unwrap_or_default();
    let config = Config::for_secret(None, &args.secret);
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
    let mut clients = Vec::new();
    for id in 0..args.clients {
        let token = match mnemo::auth::mint(
            &config,
            &format!("bench-user-{id}"),
            &args.tenant,
            &[],
            Duration::from_secs(3600),
        ) {
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
    let mut sorted = latencies;
    sorted.sort_unstable();
    println!(
        "scenario={} clients={} seconds={} requests={} errors={} rps={:.0} p50_ms={:.2} p95_ms={:.2} p99_ms={:.2}",
        scenario_name,
        args.clients,
        args.seconds,
        sorted.len(),
        errors,
        sorted.len() as f64 / elapsed,
        percentile(&sorted, 50.0),
        percentile(&sorted, 95.0),
        percentile(&sorted, 99.0),
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
                    Ok(true) => latencies.push(t.elapsed()),
                    Ok(false) => errors += 1,
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
