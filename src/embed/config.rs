//! Settings of the sentence embedder (`MNEMO_EMBEDDER` and `MNEMO_EMBEDDING_*`).

use std::fmt;
use std::path::Path;

use clap::{Args, ValueEnum};

/// Which embedder computes the vectors of semantic search.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum EmbedderKind {
    /// No embedder: semantic search is off.
    #[default]
    None,
    /// A BERT sentence encoder (all-MiniLM-L6-v2) run in-process on the CPU.
    Local,
    /// Any OpenAI-compatible `/embeddings` endpoint.
    Openai,
}

/// Files a local model folder must hold.
pub const LOCAL_MODEL_FILES: [&str; 3] = ["model.safetensors", "tokenizer.json", "config.json"];

#[derive(Clone, Args)]
pub struct EmbedConfig {
    /// Embedder of semantic search: `none`, `local` (in-process model) or `openai` (an
    /// OpenAI-compatible `/embeddings` endpoint).
    #[arg(long, env = "MNEMO_EMBEDDER", value_enum, default_value_t = EmbedderKind::None)]
    pub embedder: EmbedderKind,

    /// `local`: the model folder (holding model.safetensors, tokenizer.json and config.json) that
    /// `scripts/model` prints; `openai`: the model name sent with each request.
    #[arg(
        id = "embedding_model",
        value_name = "EMBEDDING_MODEL",
        long = "embedding-model",
        env = "MNEMO_EMBEDDING_MODEL"
    )]
    pub model: Option<String>,

    /// `openai`: base URL of the API (`.../v1`); requests go to `{base}/embeddings`.
    #[arg(
        id = "embedding_base_url",
        value_name = "EMBEDDING_BASE_URL",
        long = "embedding-base-url",
        env = "MNEMO_EMBEDDING_BASE_URL"
    )]
    pub base_url: Option<String>,

    /// `openai`: API key sent as a bearer token.
    #[arg(
        id = "embedding_api_key",
        value_name = "EMBEDDING_API_KEY",
        long = "embedding-api-key",
        env = "MNEMO_EMBEDDING_API_KEY",
        hide_env_values = true
    )]
    pub api_key: Option<String>,

    /// `openai`: vector size, also sent as `dimensions` in each request. Unset: learned from one
    /// probe request at startup (which then must succeed).
    #[arg(
        id = "embedding_dimensions",
        value_name = "EMBEDDING_DIMENSIONS",
        long = "embedding-dimensions",
        env = "MNEMO_EMBEDDING_DIMENSIONS"
    )]
    pub dimensions: Option<usize>,

    /// `local`: threads the model runs on (requests to the HTTP API keep the other cores).
    #[arg(
        id = "embedding_threads",
        value_name = "EMBEDDING_THREADS",
        long = "embedding-threads",
        env = "MNEMO_EMBEDDING_THREADS",
        default_value_t = 1
    )]
    pub threads: usize,

    /// Texts per model call (`local`: per forward pass; `openai`: per request).
    #[arg(
        id = "embedding_batch",
        value_name = "EMBEDDING_BATCH",
        long = "embedding-batch",
        env = "MNEMO_EMBEDDING_BATCH",
        default_value_t = 32
    )]
    pub batch: usize,

    /// `openai`: seconds one request may take before it is abandoned (and retried).
    #[arg(
        id = "embedding_timeout_secs",
        value_name = "EMBEDDING_TIMEOUT_SECS",
        long = "embedding-timeout-secs",
        env = "MNEMO_EMBEDDING_TIMEOUT_SECS",
        default_value_t = 30
    )]
    pub timeout_secs: u64,
}

impl Default for EmbedConfig {
    /// The command-line defaults (the environment ignored).
    fn default() -> Self {
        crate::config::command_line_defaults()
    }
}

impl EmbedConfig {
    /// Checks what clap cannot: returns one line naming the setting that is wrong. For `local` it
    /// also checks that the model folder holds the files the model is loaded from.
    pub fn validate(&self) -> Result<(), String> {
        if self.threads == 0 {
            return Err("MNEMO_EMBEDDING_THREADS must be at least 1".into());
        }
        if self.batch == 0 {
            return Err("MNEMO_EMBEDDING_BATCH must be at least 1".into());
        }
        if self.timeout_secs == 0 {
            return Err("MNEMO_EMBEDDING_TIMEOUT_SECS must be at least 1".into());
        }
        if self.dimensions == Some(0) {
            return Err("MNEMO_EMBEDDING_DIMENSIONS must be at least 1 when set".into());
        }
        match self.embedder {
            EmbedderKind::None => Ok(()),
            EmbedderKind::Local => self.validate_local(),
            EmbedderKind::Openai => self.validate_openai(),
        }
    }

    fn validate_local(&self) -> Result<(), String> {
        let Some(folder) = self.model.as_deref().filter(|m| !m.trim().is_empty()) else {
            return Err(
                "MNEMO_EMBEDDER=local needs MNEMO_EMBEDDING_MODEL (the folder scripts/model prints)"
                    .into(),
            );
        };
        if self.dimensions.is_some() {
            return Err("MNEMO_EMBEDDING_DIMENSIONS is for MNEMO_EMBEDDER=openai; \
                 the local model's size comes from its config.json"
                .into());
        }
        let path = Path::new(folder);
        if !path.is_dir() {
            return Err(format!(
                "MNEMO_EMBEDDING_MODEL={folder} is not a folder (use the one scripts/model prints)"
            ));
        }
        let missing: Vec<&str> = LOCAL_MODEL_FILES
            .iter()
            .copied()
            .filter(|file| !path.join(file).is_file())
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "MNEMO_EMBEDDING_MODEL={folder} has no {} (use the folder scripts/model prints)",
                missing.join(", ")
            ));
        }
        Ok(())
    }

    fn validate_openai(&self) -> Result<(), String> {
        let Some(base) = self.base_url.as_deref() else {
            return Err(
                "MNEMO_EMBEDDER=openai needs MNEMO_EMBEDDING_BASE_URL (an OpenAI-compatible API, `.../v1`)"
                    .into(),
            );
        };
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(format!(
                "MNEMO_EMBEDDING_BASE_URL={base} must start with http:// or https://"
            ));
        }
        if self.model.as_deref().is_none_or(|m| m.trim().is_empty()) {
            return Err(
                "MNEMO_EMBEDDER=openai needs MNEMO_EMBEDDING_MODEL (the model name, e.g. text-embedding-3-small)"
                    .into(),
            );
        }
        Ok(())
    }
}

impl fmt::Debug for EmbedConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbedConfig")
            .field("embedder", &self.embedder)
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "***"))
            .field("dimensions", &self.dimensions)
            .field("threads", &self.threads)
            .field("batch", &self.batch)
            .field("timeout_secs", &self.timeout_secs)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(folder: &str) -> EmbedConfig {
        EmbedConfig {
            embedder: EmbedderKind::Local,
            model: Some(folder.into()),
            ..Default::default()
        }
    }

    fn openai() -> EmbedConfig {
        EmbedConfig {
            embedder: EmbedderKind::Openai,
            model: Some("text-embedding-3-small".into()),
            base_url: Some("http://127.0.0.1:1/v1".into()),
            api_key: Some("sk-very-secret".into()),
            ..Default::default()
        }
    }

    #[test]
    fn defaults_are_valid() {
        assert_eq!(EmbedConfig::default().validate(), Ok(()));
    }

    #[test]
    fn kinds_parse_from_the_command_line() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            embed: EmbedConfig,
        }
        let parsed = <Cli as clap::Parser>::try_parse_from([
            "mnemo",
            "--embedder",
            "openai",
            "--embedding-dimensions",
            "256",
        ])
        .expect("parses")
        .embed;
        assert_eq!(parsed.embedder, EmbedderKind::Openai);
        assert_eq!(parsed.dimensions, Some(256));
        assert!(<Cli as clap::Parser>::try_parse_from(["mnemo", "--embedder", "magic"]).is_err());
    }

    /// Inside the full configuration the embedding settings stay apart from the LLM ones that
    /// share field names (`model`, `base_url`, `api_key`).
    #[test]
    fn settings_do_not_collide_with_the_llm_ones() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            config: crate::config::Config,
        }
        let config = <Cli as clap::Parser>::try_parse_from([
            "mnemo",
            "--embedder",
            "openai",
            "--embedding-model",
            "embedder-model",
            "--embedding-base-url",
            "http://127.0.0.1:9/v1",
            "--llm-model",
            "chat-model",
            "--llm-base-url",
            "http://127.0.0.1:8/v1",
        ])
        .expect("parses")
        .config;
        assert_eq!(config.embed.model.as_deref(), Some("embedder-model"));
        assert_eq!(
            config.embed.base_url.as_deref(),
            Some("http://127.0.0.1:9/v1")
        );
        assert_eq!(config.llm.model.as_deref(), Some("chat-model"));
        assert_eq!(
            config.llm.base_url.as_deref(),
            Some("http://127.0.0.1:8/v1")
        );
    }

    #[test]
    fn debug_hides_the_api_key() {
        let shown = format!("{:?}", openai());
        assert!(!shown.contains("sk-very-secret"), "{shown}");
        assert!(shown.contains("***"), "{shown}");
    }

    #[test]
    fn local_needs_a_model_folder() {
        let config = EmbedConfig {
            embedder: EmbedderKind::Local,
            ..Default::default()
        };
        assert_eq!(
            config.validate().unwrap_err(),
            "MNEMO_EMBEDDER=local needs MNEMO_EMBEDDING_MODEL (the folder scripts/model prints)"
        );
        let err = local("/nonexistent/model/folder").validate().unwrap_err();
        assert!(err.contains("is not a folder"), "{err}");
    }

    #[test]
    fn local_names_the_missing_files() {
        let dir = std::env::temp_dir().join(format!("mnemo-embed-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp folder");
        std::fs::write(dir.join("config.json"), "{}").expect("write");
        let folder = dir.to_string_lossy().into_owned();
        let err = local(&folder).validate().unwrap_err();
        assert_eq!(
            err,
            format!(
                "MNEMO_EMBEDDING_MODEL={folder} has no model.safetensors, tokenizer.json \
                 (use the folder scripts/model prints)"
            )
        );
        assert!(!err.contains('\n'));
        std::fs::write(dir.join("model.safetensors"), "x").expect("write");
        std::fs::write(dir.join("tokenizer.json"), "{}").expect("write");
        assert_eq!(local(&folder).validate(), Ok(()));
        let mut sized = local(&folder);
        sized.dimensions = Some(384);
        assert!(
            sized
                .validate()
                .unwrap_err()
                .starts_with("MNEMO_EMBEDDING_DIMENSIONS")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn openai_needs_a_base_url_and_a_model() {
        assert_eq!(openai().validate(), Ok(()));
        let mut config = openai();
        config.base_url = None;
        assert!(
            config
                .validate()
                .unwrap_err()
                .contains("needs MNEMO_EMBEDDING_BASE_URL")
        );
        config.base_url = Some("api.example.com/v1".into());
        assert!(config.validate().unwrap_err().contains("http://"));
        let mut config = openai();
        config.model = None;
        assert!(
            config
                .validate()
                .unwrap_err()
                .contains("needs MNEMO_EMBEDDING_MODEL")
        );
    }

    #[test]
    fn sizes_must_be_positive() {
        for (edit, setting) in [
            (
                (|c: &mut EmbedConfig| c.threads = 0) as fn(&mut EmbedConfig),
                "MNEMO_EMBEDDING_THREADS",
            ),
            (|c| c.batch = 0, "MNEMO_EMBEDDING_BATCH"),
            (|c| c.timeout_secs = 0, "MNEMO_EMBEDDING_TIMEOUT_SECS"),
            (|c| c.dimensions = Some(0), "MNEMO_EMBEDDING_DIMENSIONS"),
        ] {
            let mut config = openai();
            edit(&mut config);
            let err = config.validate().unwrap_err();
            assert!(err.starts_with(setting), "{err}");
        }
    }
}
