//! The scenarios: a client acting as one user, the data a scenario prepares outside the measured
//! window, and the one request each scenario measures.

use super::*;

pub(crate) struct Client {
    pub(crate) http: reqwest::Client,
    pub(crate) base: String,
    pub(crate) token: String,
    pub(crate) id: usize,
    /// Keys or ids the scenario prepared for this client.
    pub(crate) prepared: Vec<String>,
    /// Tokens of the users a request may act as (`--users`); empty: always `token`.
    pub(crate) users: Arc<Vec<String>>,
    /// Words of search questions, most frequent first (`--vocab`).
    pub(crate) vocab: Arc<Vec<String>>,
    /// Unique per run, so message ids of one run never repeat those of an earlier one.
    pub(crate) run: u64,
    /// Sessions of the `append` scenario.
    pub(crate) sessions: u64,
    /// Requests go to a Motorhead (`--peer-motorhead`).
    pub(crate) motorhead: bool,
}

impl Client {
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// A well-mixed number for request `n` of this client and `salt`.
    pub(crate) fn random(&self, n: usize, salt: u64) -> u64 {
        splitmix64(((self.id as u64) << 40) ^ ((n as u64) << 8) ^ salt)
    }

    /// The token request `n` is sent with: a random user's with `--users`, else the client's.
    pub(crate) fn token_for(&self, n: usize) -> &str {
        if self.users.is_empty() {
            &self.token
        } else {
            &self.users[(self.random(n, 1) % self.users.len() as u64) as usize]
        }
    }

    /// A search question of 3 to 8 words: vocabulary ranks drawn with probability about 1/rank
    /// (log-uniform), as the loaded texts were.
    pub(crate) fn question(&self, n: usize) -> String {
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

/// The task `bench/scale-load-tasks.sql` loads for a user of `scripts/bench --scale`, under the
/// same id for each (a task's key holds its user): 99,967 messages and 100,000 events for the
/// 100x user, 1,023 and 1,000 for the small one.
pub(crate) const LOADED_TASK: &str = "00000000-0000-7000-8000-5ca1e0000001";

/// The `created_before` that lists the loaded memories from the eleventh oldest down:
/// `bench/scale-load.sql` creates them one a second from 2026-01-01, the oldest first.
const ELEVENTH_LOADED_MEMORY_BEFORE: &str = "2026-01-01T00:00:11Z";

/// `GET path` as the client's user: the answer when 200, `None` when 404.
async fn get_json(client: &Client, path: &str) -> Result<Option<Value>, String> {
    let response = client
        .http
        .get(client.url(path))
        .bearer_auth(&client.token)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let text = response.text().await.map_err(|e| e.to_string())?;
    if status == reqwest::StatusCode::NOT_FOUND {
        return Ok(None);
    }
    if !status.is_success() {
        return Err(format!("setup read of {path} failed with {status}: {text}"));
    }
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// The loaded task of the client's user, if it has one.
async fn loaded_task(client: &Client) -> Result<Option<Value>, String> {
    get_json(client, &format!("/api/tasks/{LOADED_TASK}")).await
}

/// Registers a task for the client's user, with `plan` when given; returns its id.
async fn new_task(client: &Client, plan: Option<Value>) -> Result<String, String> {
    let mut body = json!({"name": format!("bench task {}", client.id)});
    if let Some(plan) = plan {
        body["plan"] = plan;
    }
    let response: Value = send_json(
        client.http.post(client.url("/api/tasks")),
        &client.token,
        &body,
    )
    .await?;
    Ok(response["id"]
        .as_str()
        .ok_or("register returned no id")?
        .to_owned())
}

/// Posts a progress message to a task (`task_update`).
async fn task_message(client: &Client, task: &str, message: &str) -> Result<Value, String> {
    send_json(
        client
            .http
            .post(client.url(&format!("/api/tasks/{task}/update"))),
        &client.token,
        &json!({"message": message}),
    )
    .await
}

/// The cursor `memory-page-deep` reads after. With the loaded memories (`--scale`), the position of
/// the eleventh oldest, so that the page read is their last: the 10,000th page of 10 of the 100x
/// user's 100,000, the 100th of the small user's 1,000, whatever the bench stored since (newer,
/// hence on earlier pages). The server's own cursor, from a listing filtered to the loaded
/// memories up to that one. Without them, the second page of the user's memories, after storing
/// 25 when it has fewer than 20.
async fn deep_cursor(client: &Client) -> Result<String, String> {
    let list = |path: String| async move {
        Ok::<_, String>(get_json(client, &path).await?.unwrap_or_default())
    };
    let loaded = list(format!(
        "/api/memories?limit=1&created_before={ELEVENTH_LOADED_MEMORY_BEFORE}"
    ))
    .await?;
    if let Some(cursor) = loaded["next_cursor"].as_str() {
        return Ok(cursor.to_owned());
    }
    let twenty = list("/api/memories?limit=20".to_owned()).await?;
    if twenty["items"].as_array().map_or(0, Vec::len) < 20 {
        for i in 0..25 {
            let body = json!({"content": kilobyte(i), "description": "bench page"});
            send_json(
                client.http.post(client.url("/api/memories")),
                &client.token,
                &body,
            )
            .await?;
        }
    }
    let first = list("/api/memories?limit=10".to_owned()).await?;
    first["next_cursor"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| "no second page of memories after storing 25".to_owned())
}

pub(crate) async fn prepare(scenario: &str, client: &mut Client) -> Result<(), String> {
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
        // About 1 KB of notes for the agent `bench` of each client's user, unless it has notes
        // for it already: those `bench/scale-load-tasks.sql` loaded (`--scale`), or those an
        // earlier client of the same user wrote.
        "notes-read" => {
            let current = get_json(client, "/api/agents/bench/notes")
                .await?
                .unwrap_or_default();
            if current["version"].as_i64().unwrap_or(0) > 0 {
                return Ok(());
            }
            let response = client
                .http
                .put(client.url("/api/agents/bench/notes"))
                .bearer_auth(&client.token)
                .json(&json!({"notes": format!("# Bench\n{}", kilobyte(client.id))}))
                .send()
                .await
                .map_err(|e| e.to_string())?;
            if !response.status().is_success() {
                return Err(format!("notes setup failed with {}", response.status()));
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
                archive(client, &format!("s{session}"), messages).await?;
            }
        }
        // An earlier history for each client's user: five sessions of 40 messages, a user's
        // question and the assistant's reply in turn, on varied topics.
        "chat-context" => {
            for session in 0..5u64 {
                let messages: Vec<Value> = (0..40u64)
                    .map(|i| {
                        let seed = ((client.id as u64) << 32) ^ (session << 16) ^ i;
                        json!({"id": format!("h{i}"),
                               "text": conversation_text(seed, i % 2 == 0),
                               "sender": if i % 2 == 0 { "user" } else { "ai" },
                               "timestamp": format!("2026-11-{:02}T10:{:02}:00Z", 10 + session, i)})
                    })
                    .collect();
                archive(client, &format!("hist-{session}"), messages).await?;
            }
        }
        // The loaded task when the user has it (`--scale`: every client appends to it), else a
        // new task of the client's own.
        "task-events" => {
            let id = match loaded_task(client).await? {
                Some(_) => LOADED_TASK.to_owned(),
                None => new_task(client, None).await?,
            };
            client.prepared.push(id);
        }
        // The loaded task when the user has it. Its message count is one short of a checkpoint
        // of the digest state, so the first client posts one message, whose write folds every
        // message into the state as the service does on every 64th (a second or so for 100,000);
        // the clients are prepared one after another before any request is measured, so every
        // question then reads the state and the messages since. Without the loaded task, a task
        // of the client's own with a plan of four steps and five progress messages.
        "task-query" => match loaded_task(client).await? {
            Some(task) => {
                let messages = task["counts"]["messages"].as_i64().unwrap_or(0);
                let checkpoint = i64::from(mnemo::tasks::store::DIGEST_CHECKPOINT);
                if client.id == 0 && messages % checkpoint == checkpoint - 1 {
                    task_message(
                        client,
                        LOADED_TASK,
                        "Step 6 in progress: shifted 50% of traffic to v1.99.968, web-3 healthy on port 8443",
                    )
                    .await?;
                }
                client.prepared.push(LOADED_TASK.to_owned());
            }
            None => {
                let plan = json!([
                    "Build image",
                    "Push image to registry",
                    "SSH into server",
                    "Run container"
                ]);
                let id = new_task(client, Some(plan)).await?;
                for message in [
                    "Step 1 done, built ghcr.io/acme/app:v2",
                    "pushing the image, registry answered 502 once, retrying",
                    "Step 2 done, pushed ghcr.io/acme/app:v2",
                    "connected to deploy@10.0.0.7 on port 2222",
                    "pulling the image on the server",
                ] {
                    task_message(client, &id, message).await?;
                }
                client.prepared.push(id);
            }
        },
        "memory-page-deep" => {
            let cursor = deep_cursor(client).await?;
            client.prepared.push(cursor);
        }
        _ => {}
    }
    Ok(())
}

/// Archives `messages` into `session` as the client's user.
async fn archive(client: &Client, session: &str, messages: Vec<Value>) -> Result<Value, String> {
    send_json(
        client
            .http
            .post(client.url("/api/chat/session/archive_messages")),
        &client.token,
        &json!({"session_id": session, "messages_batch": messages}),
    )
    .await
}

pub(crate) async fn send_json(
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

/// One measured request; returns its HTTP status (0: no answer).
pub(crate) async fn one(scenario: &str, client: &Client, n: usize) -> Result<u16, String> {
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
        "notes-read" => client.http.get(client.url("/api/agents/bench/notes")),
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
            client
                .http
                .post(client.url("/api/chat/context"))
                .json(&json!({
                "session_id": session, "agent_id": "bench",
                "new_messages": [{"id": format!("c{n}"),
                                  "text": conversation_text(client.random(n, 7), true),
                                  "sender": "user", "timestamp": "2026-11-21T12:00:00Z"}]}))
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
        "task-query" => {
            let task = &client.prepared[0];
            client
                .http
                .post(client.url(&format!("/api/tasks/{task}/query")))
                .json(&json!({"query": "where was I?"}))
        }
        "memory-page-deep" => {
            let cursor = &client.prepared[0];
            client
                .http
                .get(client.url(&format!("/api/memories?limit=10&cursor={cursor}")))
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
pub(crate) async fn status_of(response: Result<reqwest::Response, reqwest::Error>) -> u16 {
    match response {
        Ok(r) => {
            let status = r.status().as_u16();
            if r.bytes().await.is_ok() { status } else { 0 }
        }
        Err(_) => 0,
    }
}
