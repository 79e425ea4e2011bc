//! Optional OpenAI-compatible chat-completions endpoint. Nothing on a write path calls it; every
//! feature that can use it has a deterministic fallback, so mnemo works and is tested with no model.

use std::fmt;

use clap::Args;

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
