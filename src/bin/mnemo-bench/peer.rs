//! The Motorhead counterparts of the conversation scenarios (`--peer-motorhead`).

use super::*;

/// Sessions of 10 messages each client of the Motorhead `window` scenario reads.
pub(crate) const PEER_WINDOW_SESSIONS: usize = 10;

/// The Motorhead session `k` of `client`'s `window` scenario.
pub(crate) fn peer_window_session(client: &Client, k: usize) -> String {
    format!("w{}-{}-{k}", client.run, client.id)
}

/// Motorhead's window scenario reads sessions of 10 messages, as mnemo's reads its newest 10
/// (Motorhead answers a session's whole window).
pub(crate) async fn prepare_motorhead(scenario: &str, client: &mut Client) -> Result<(), String> {
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
pub(crate) fn motorhead_request(
    scenario: &str,
    client: &Client,
    n: usize,
) -> reqwest::RequestBuilder {
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
