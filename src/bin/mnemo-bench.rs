//! HTTP load generator for `scripts/bench`: runs one scenario against a running mnemo with N
//! concurrent clients for a fixed time and prints one line of figures:
//!
//! `scenario=<name> clients=16 seconds=10 requests=... errors=... rps=... p50_ms=... p95_ms=... p99_ms=...`
//!
//! Each client acts as its own user (tokens minted with the HS secret from `MNEMO_JWT_SECRET`), so
//! rows do not contend the way a single hot user would. Scenarios prepare their data first, outside
//! the measured window.

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
    /// Scenario: me, memory-store, memory-retrieve, archive-batch, chat-context, task-events.
    #[arg(long)]
    scenario: String,
    /// Concurrent clients.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Measured seconds.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// HS256 secret the service verifies with.
    #[arg(long, env = "MNEMO_JWT_SECRET", hide_env_values = true)]
    secret: String,
}

struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
    id: usize,
    /// Keys or ids the scenario prepared for this client.
    prepared: Vec<String>,
}

impl Client {
    fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }
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
        other => return Err(format!("unknown scenario `{other}`")),
    };
    let response = request.bearer_auth(&client.token).send().await;
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

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let config = Config::for_secret(None, &args.secret);
    let mut clients = Vec::new();
    for id in 0..args.clients {
        let token = match mnemo::auth::mint(
            &config,
            &format!("bench-user-{id}"),
            "bench",
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
        };
        if let Err(e) = prepare(&args.scenario, &mut client).await {
            eprintln!("mnemo-bench: preparing {}: {e}", args.scenario);
            return ExitCode::FAILURE;
        }
        clients.push(Arc::new(client));
    }
    // Warm-up: a second of load that is not measured (connections, caches, prepared statements).
    let scenario: Arc<str> = Arc::from(args.scenario.as_str());
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
        args.scenario,
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
