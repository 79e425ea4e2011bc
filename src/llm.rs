//! Optional OpenAI-compatible chat-completions endpoint. Nothing on a write path calls it; every
//! feature that can use it has a deterministic fallback, so mnemo works and is tested with no model.

use std::fmt;
use std::time::Duration;

use clap::Args;
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::ToSchema;

#[derive(Clone, Args, Default)]
pub struct LlmConfig {
    /// Base URL of an OpenAI-compatible API (`.../v1`); unset: no model.
    #[arg(long = "llm-base-url", env = "MNEMO_LLM_BASE_URL")]
    pub base_url: Option<String>,
    /// Model name sent with each request.
    #[arg(long = "llm-model", env = "MNEMO_LLM_MODEL")]
    pub model: Option<String>,
    /// API key sent as a bearer token.
    #[arg(
        long = "llm-api-key",
        env = "MNEMO_LLM_API_KEY",
        hide_env_values = true
    )]
    pub api_key: Option<String>,
}

impl LlmConfig {
    /// True when a model is configured.
    pub fn enabled(&self) -> bool {
        self.base_url.is_some() && self.model.is_some()
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.base_url.is_some() != self.model.is_some() {
            return Err("set both MNEMO_LLM_BASE_URL and MNEMO_LLM_MODEL, or neither".into());
        }
        Ok(())
    }
}

impl fmt::Debug for LlmConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LlmConfig")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "***"))
            .finish()
    }
}

/// One message of an OpenAI-style conversation (`system`, `user`, `assistant` or `tool`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ChatMessage {
    pub role: String,
    /// Text of the message; `null` on an assistant message that only calls tools.
    #[serde(default)]
    pub content: Option<String>,
    /// Tools the assistant asks to call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// On a `tool` message: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    /// A message with `role` and text content.
    pub fn text(role: &str, content: impl Into<String>) -> Self {
        ChatMessage {
            role: role.into(),
            content: Some(content.into()),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    /// The result of the tool call `call_id`.
    pub fn tool_result(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage {
            role: "tool".into(),
            content: Some(content.into()),
            tool_calls: Vec::new(),
            tool_call_id: Some(call_id.into()),
        }
    }
}

/// A tool call requested by the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ToolCall {
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    pub function: FunctionCall,
}

fn function_kind() -> String {
    "function".into()
}

/// The function a tool call names, with its arguments as a JSON text (as the model wrote them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct FunctionCall {
    pub name: String,
    #[serde(default)]
    pub arguments: String,
}

/// A tool offered to the model: a function with a JSON Schema for its arguments.
#[derive(Debug, Clone, Serialize)]
pub struct Tool {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: ToolFunction,
}

/// Name, description and argument schema of an offered tool.
#[derive(Debug, Clone, Serialize)]
pub struct ToolFunction {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

impl Tool {
    pub fn function(name: &str, description: &str, parameters: Value) -> Self {
        Tool {
            kind: "function",
            function: ToolFunction {
                name: name.into(),
                description: description.into(),
                parameters,
            },
        }
    }
}

/// What the model answered: text, tool calls, or both.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AssistantReply {
    pub content: Option<String>,
    pub tool_calls: Vec<ToolCall>,
}

impl AssistantReply {
    /// The reply as a message to append to the conversation.
    pub fn to_message(&self) -> ChatMessage {
        ChatMessage {
            role: "assistant".into(),
            content: self.content.clone(),
            tool_calls: self.tool_calls.clone(),
            tool_call_id: None,
        }
    }
}

/// One piece of a streamed completion.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// More assistant text.
    Delta(String),
    /// The stream ended; the whole reply, tool calls assembled.
    Done(AssistantReply),
}

/// Why a completion failed.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error("cannot reach the model endpoint: {0}")]
    Transport(#[from] reqwest::Error),
    #[error("the model endpoint answered {status}: {body}")]
    Status { status: u16, body: String },
    #[error("the model endpoint answered something unexpected: {0}")]
    Protocol(String),
}

/// A small client for OpenAI-compatible `POST {base_url}/chat/completions`.
#[derive(Debug, Clone)]
pub struct LlmClient {
    http: reqwest::Client,
    url: String,
    model: String,
    api_key: Option<String>,
}

/// How long one completion may take, streaming included.
const COMPLETION_TIMEOUT: Duration = Duration::from_secs(120);

impl LlmClient {
    /// The client for `config`; `None` when no model is configured.
    pub fn from_config(config: &LlmConfig) -> Option<Self> {
        let (Some(base), Some(model)) = (&config.base_url, &config.model) else {
            return None;
        };
        let http = reqwest::Client::builder()
            .timeout(COMPLETION_TIMEOUT)
            .build()
            .ok()?;
        Some(LlmClient {
            http,
            url: format!("{}/chat/completions", base.trim_end_matches('/')),
            model: model.clone(),
            api_key: config.api_key.clone(),
        })
    }

    fn request(
        &self,
        messages: &[ChatMessage],
        tools: &[Tool],
        stream: bool,
    ) -> reqwest::RequestBuilder {
        let mut body = json!({"model": self.model, "messages": messages, "stream": stream});
        if !tools.is_empty() {
            body["tools"] = json!(tools);
        }
        let request = self.http.post(&self.url).json(&body);
        match &self.api_key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Result<reqwest::Response, LlmError> {
        let response = request.send().await?;
        let status = response.status();
        if !status.is_success() {
            let mut body = response.text().await.unwrap_or_default();
            body.truncate(500);
            return Err(LlmError::Status {
                status: status.as_u16(),
                body,
            });
        }
        Ok(response)
    }

    /// One non-streaming completion.
    pub async fn complete(
        &self,
        messages: &[ChatMessage],
        tools: &[Tool],
    ) -> Result<AssistantReply, LlmError> {
        let response = self.send(self.request(messages, tools, false)).await?;
        let body: Value = response.json().await?;
        let message = body
            .pointer("/choices/0/message")
            .ok_or_else(|| LlmError::Protocol("no `choices[0].message`".into()))?;
        let parsed: ChatMessage = serde_json::from_value(message.clone())
            .map_err(|e| LlmError::Protocol(format!("`choices[0].message`: {e}")))?;
        Ok(AssistantReply {
            content: parsed.content,
            tool_calls: parsed.tool_calls,
        })
    }

    /// One completion of a system and a user message, without tools: its trimmed text, or why
    /// there is none (an error, or an answer without text).
    pub async fn complete_text(&self, system: String, user: String) -> Result<String, String> {
        let reply = self
            .complete(
                &[
                    ChatMessage::text("system", system),
                    ChatMessage::text("user", user),
                ],
                &[],
            )
            .await
            .map_err(|e| e.to_string())?;
        reply
            .content
            .map(|text| text.trim().to_owned())
            .filter(|text| !text.is_empty())
            .ok_or_else(|| "the model answered without text".to_owned())
    }

    /// A streaming completion (`stream: true`, server-sent events): text deltas as they come, then
    /// [`StreamEvent::Done`] with the assembled reply.
    pub async fn stream(
        &self,
        messages: &[ChatMessage],
        tools: &[Tool],
    ) -> Result<impl Stream<Item = Result<StreamEvent, LlmError>> + Send + 'static, LlmError> {
        let response = self.send(self.request(messages, tools, true)).await?;
        let state = (response.bytes_stream(), StreamAccumulator::default(), false);
        Ok(futures::stream::unfold(
            state,
            |(mut body, mut acc, done)| async move {
                if done {
                    return None;
                }
                loop {
                    if let Some(event) = acc.next_event() {
                        let finished = matches!(event, StreamEvent::Done(_));
                        return Some((Ok(event), (body, acc, finished)));
                    }
                    match body.next().await {
                        Some(Ok(bytes)) => {
                            if let Err(e) = acc.push(&bytes) {
                                return Some((Err(e), (body, acc, true)));
                            }
                        }
                        Some(Err(e)) => return Some((Err(e.into()), (body, acc, true))),
                        // The body ended without `[DONE]`: finish with what arrived.
                        None => {
                            let reply = acc.finish();
                            return Some((Ok(StreamEvent::Done(reply)), (body, acc, true)));
                        }
                    }
                }
            },
        ))
    }
}

/// Assembles a streamed chat completion from its server-sent-event bytes. Pure: no I/O.
#[derive(Debug, Default)]
pub struct StreamAccumulator {
    buffer: Vec<u8>,
    content: String,
    calls: Vec<ToolCall>,
    pending: std::collections::VecDeque<StreamEvent>,
    finished: bool,
}

impl StreamAccumulator {
    /// Feeds bytes as they arrive (events may be split anywhere).
    pub fn push(&mut self, bytes: &[u8]) -> Result<(), LlmError> {
        self.buffer.extend_from_slice(bytes);
        while let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.buffer.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim();
            let Some(data) = line.strip_prefix("data:") else {
                continue;
            };
            let data = data.trim();
            if data == "[DONE]" {
                if !self.finished {
                    let reply = self.finish();
                    self.pending.push_back(StreamEvent::Done(reply));
                }
                continue;
            }
            let chunk: Value = serde_json::from_str(data)
                .map_err(|e| LlmError::Protocol(format!("stream chunk is not JSON: {e}")))?;
            self.apply(&chunk);
        }
        Ok(())
    }

    fn apply(&mut self, chunk: &Value) {
        let Some(delta) = chunk.pointer("/choices/0/delta") else {
            return;
        };
        if let Some(text) = delta.get("content").and_then(Value::as_str)
            && !text.is_empty()
        {
            self.content.push_str(text);
            self.pending.push_back(StreamEvent::Delta(text.to_owned()));
        }
        for call in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = call
                .get("index")
                .and_then(Value::as_u64)
                .and_then(|i| usize::try_from(i).ok())
                .unwrap_or(self.calls.len());
            while self.calls.len() <= index {
                self.calls.push(ToolCall {
                    id: String::new(),
                    kind: function_kind(),
                    function: FunctionCall {
                        name: String::new(),
                        arguments: String::new(),
                    },
                });
            }
            let slot = &mut self.calls[index];
            if let Some(id) = call.get("id").and_then(Value::as_str) {
                slot.id.push_str(id);
            }
            if let Some(name) = call.pointer("/function/name").and_then(Value::as_str) {
                slot.function.name.push_str(name);
            }
            if let Some(args) = call.pointer("/function/arguments").and_then(Value::as_str) {
                slot.function.arguments.push_str(args);
            }
        }
    }

    /// The next event ready to hand out.
    pub fn next_event(&mut self) -> Option<StreamEvent> {
        self.pending.pop_front()
    }

    /// The reply assembled so far; marks the stream finished.
    pub fn finish(&mut self) -> AssistantReply {
        self.finished = true;
        AssistantReply {
            content: (!self.content.is_empty()).then(|| self.content.clone()),
            tool_calls: self.calls.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_assembles_text_and_split_tool_calls() {
        let mut acc = StreamAccumulator::default();
        let events = concat!(
            "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",",
            "\"function\":{\"name\":\"store_memory\",\"arguments\":\"{\\\"a\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,",
            "\"function\":{\"arguments\":\"\\\":1}\"}}]}}]}\n\n",
            "data: [DONE]\n\n"
        );
        // Split at an awkward place to prove buffering across chunks.
        let (a, b) = events.as_bytes().split_at(37);
        acc.push(a).unwrap();
        acc.push(b).unwrap();
        let mut got = Vec::new();
        while let Some(event) = acc.next_event() {
            got.push(event);
        }
        assert_eq!(got[0], StreamEvent::Delta("Hel".into()));
        assert_eq!(got[1], StreamEvent::Delta("lo".into()));
        let StreamEvent::Done(reply) = &got[2] else {
            panic!("expected done: {got:?}")
        };
        assert_eq!(reply.content.as_deref(), Some("Hello"));
        assert_eq!(reply.tool_calls.len(), 1);
        assert_eq!(reply.tool_calls[0].id, "c1");
        assert_eq!(reply.tool_calls[0].function.name, "store_memory");
        assert_eq!(reply.tool_calls[0].function.arguments, "{\"a\":1}");
    }

    #[test]
    fn bad_chunk_is_a_protocol_error() {
        let mut acc = StreamAccumulator::default();
        assert!(matches!(
            acc.push(b"data: {nope\n"),
            Err(LlmError::Protocol(_))
        ));
    }

    #[test]
    fn client_only_with_url_and_model() {
        assert!(LlmClient::from_config(&LlmConfig::default()).is_none());
        let config = LlmConfig {
            base_url: Some("http://127.0.0.1:1/v1/".into()),
            model: Some("m".into()),
            api_key: None,
        };
        let client = LlmClient::from_config(&config).unwrap();
        assert_eq!(client.url, "http://127.0.0.1:1/v1/chat/completions");
    }
}
