//! One validated configuration, read from flags and `MNEMO_*` environment variables.
//!
//! Secrets (the JWT secret, the LLM API key, the password inside `DATABASE_URL`) never appear in
//! `Debug` output, so logging the config is safe.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

/// Settings shared by every subcommand.
#[derive(Clone, Args)]
pub struct Config {
    /// PostgreSQL connection string.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: Option<String>,

    /// Address `mnemo serve` listens on.
    #[arg(long, env = "MNEMO_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Largest number of pooled database connections.
    #[arg(long, env = "MNEMO_DB_MAX_CONNECTIONS", default_value_t = 32)]
    pub db_max_connections: u32,

    /// Open client connections at once; more are closed on arrival.
    #[arg(long, env = "MNEMO_MAX_CONNECTIONS", default_value_t = 10_000)]
    pub max_connections: usize,

    /// Open client connections from one address at once; more are closed on arrival.
    #[arg(long, env = "MNEMO_MAX_CONNECTIONS_PER_IP", default_value_t = 256)]
    pub max_connections_per_ip: usize,

    /// Seconds a client has to send a request's head; slower clients are disconnected.
    #[arg(long, env = "MNEMO_HEADER_READ_TIMEOUT_SECS", default_value_t = 10)]
    pub header_read_timeout_secs: u64,

    /// Seconds a database statement of a request may run before PostgreSQL cancels it (0: no
    /// limit). Schema changes at start are not bounded.
    #[arg(long, env = "MNEMO_DB_STATEMENT_TIMEOUT_SECS", default_value_t = 30)]
    pub db_statement_timeout_secs: u64,

    /// HS256 shared secret (at least 32 bytes).
    #[arg(long, env = "MNEMO_JWT_SECRET", hide_env_values = true)]
    pub jwt_secret: Option<String>,

    /// PEM file with the RSA, EC or Ed25519 public key that verifies tokens.
    #[arg(long, env = "MNEMO_JWT_PUBLIC_KEY")]
    pub jwt_public_key: Option<PathBuf>,

    /// JWKS document: a file path or an http(s) URL (cached, refreshed on an unknown `kid`).
    #[arg(long, env = "MNEMO_JWT_JWKS")]
    pub jwt_jwks: Option<String>,

    /// Fewest seconds between two JWKS fetches caused by tokens with an unknown `kid` (so forged
    /// tokens cannot make mnemo hammer the key server).
    #[arg(long, env = "MNEMO_JWT_JWKS_MIN_REFRESH_SECS", default_value_t = 30)]
    pub jwt_jwks_min_refresh_secs: u64,

    /// PEM private key used only by `mnemo token` when tokens are asymmetric.
    #[arg(long, env = "MNEMO_JWT_PRIVATE_KEY")]
    pub jwt_private_key: Option<PathBuf>,

    /// Required `iss` claim, when set.
    #[arg(long, env = "MNEMO_JWT_ISSUER")]
    pub jwt_issuer: Option<String>,

    /// Required `aud` claim, when set.
    #[arg(long, env = "MNEMO_JWT_AUDIENCE")]
    pub jwt_audience: Option<String>,

    /// Claim holding the tenant id; a dotted path reaches into objects (`app_metadata.tenant`).
    #[arg(long, env = "MNEMO_TENANT_CLAIM", default_value = "tenant_id")]
    pub tenant_claim: String,

    /// Tenant given to tokens that carry no tenant claim (Supabase-style tokens). Unset: such
    /// tokens are rejected.
    #[arg(long, env = "MNEMO_DEFAULT_TENANT")]
    pub default_tenant: Option<String>,

    /// Comma-separated origins allowed by CORS (`*` for any).
    #[arg(long, env = "MNEMO_CORS_ORIGINS", value_delimiter = ',')]
    pub cors_origins: Vec<String>,

    /// The service's external base URL (`https://mnemo.example.com`), named in the OAuth
    /// protected-resource metadata MCP clients read. Unset: taken from each request's `Host`.
    #[arg(long, env = "MNEMO_PUBLIC_URL")]
    pub public_url: Option<String>,

    /// Seconds a request may take before it is answered 408.
    #[arg(long, env = "MNEMO_REQUEST_TIMEOUT_SECS", default_value_t = 30)]
    pub request_timeout_secs: u64,

    /// Default largest request body, in bytes, for routes that set no limit of their own.
    #[arg(long, env = "MNEMO_MAX_BODY_BYTES", default_value_t = 1024 * 1024)]
    pub max_body_bytes: usize,

    /// Largest detail-memory content, in bytes.
    #[arg(long, env = "MNEMO_MEMORY_MAX_BYTES", default_value_t = 32 * 1024 * 1024)]
    pub memory_max_bytes: usize,

    /// Weight of the keyword score in a hybrid search's fused score (0 to 1); the cosine
    /// similarity has the rest.
    #[arg(long, env = "MNEMO_SEARCH_KEYWORD_WEIGHT", default_value_t = crate::search::fusion::KEYWORD_WEIGHT)]
    pub search_keyword_weight: f32,

    /// Share of its crowding (its mean similarity to its closest fellow candidates) that a
    /// candidate's similarity loses in the ranking of a semantic or hybrid search (0 to 1).
    #[arg(long, env = "MNEMO_SEARCH_CROWD_WEIGHT", default_value_t = crate::search::similarity::CROWD_WEIGHT)]
    pub search_crowd_weight: f32,

    /// Hours the first successful response to a request with an `Idempotency-Key` is kept for
    /// replays; a key older than this is free again.
    #[arg(long, env = "MNEMO_IDEMPOTENCY_TTL_HOURS", default_value_t = 24)]
    pub idempotency_ttl_hours: u32,

    #[command(flatten)]
    pub fair_use: crate::fair_use::FairUseConfig,
    #[command(flatten)]
    pub llm: crate::llm::LlmConfig,
    #[command(flatten)]
    pub memories: crate::memories::MemoriesConfig,
    #[command(flatten)]
    pub notes: crate::notes::NotesConfig,
    #[command(flatten)]
    pub conversations: crate::conversations::ConversationsConfig,
    #[command(flatten)]
    pub tasks: crate::tasks::TasksConfig,
    #[command(flatten)]
    pub embed: crate::embed::EmbedConfig,
    #[command(flatten)]
    pub rights: crate::rights::RightsConfig,
}

impl Config {
    /// Checks what clap cannot: returns one line naming the setting that is wrong.
    pub fn validate(&self) -> Result<(), String> {
        let key_sources = [
            self.jwt_secret.is_some(),
            self.jwt_public_key.is_some(),
            self.jwt_jwks.is_some(),
        ]
        .iter()
        .filter(|set| **set)
        .count();
        if key_sources > 1 {
            return Err(
                "set only one of MNEMO_JWT_SECRET, MNEMO_JWT_PUBLIC_KEY and MNEMO_JWT_JWKS".into(),
            );
        }
        if let Some(secret) = &self.jwt_secret
            && secret.len() < 32
        {
            return Err(format!(
                "MNEMO_JWT_SECRET is {} bytes; HS256 needs at least 32",
                secret.len()
            ));
        }
        if self.tenant_claim.trim().is_empty() {
            return Err("MNEMO_TENANT_CLAIM must not be empty".into());
        }
        if let Some(tenant) = &self.default_tenant
            && tenant.trim().is_empty()
        {
            return Err("MNEMO_DEFAULT_TENANT must not be empty when set".into());
        }
        if let Some(url) = &self.public_url {
            let parsed = reqwest::Url::parse(url)
                .map_err(|e| format!("MNEMO_PUBLIC_URL is not a URL ({e}): {url}"))?;
            if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
                return Err(format!(
                    "MNEMO_PUBLIC_URL must be an http(s) URL with a host: {url}"
                ));
            }
        }
        if self.request_timeout_secs == 0 {
            return Err("MNEMO_REQUEST_TIMEOUT_SECS must be at least 1".into());
        }
        if self.db_max_connections == 0 {
            return Err("MNEMO_DB_MAX_CONNECTIONS must be at least 1".into());
        }
        self.fair_use.validate()?;
        if self.max_connections == 0 || self.max_connections_per_ip == 0 {
            return Err(
                "MNEMO_MAX_CONNECTIONS and MNEMO_MAX_CONNECTIONS_PER_IP must be at least 1".into(),
            );
        }
        if self.header_read_timeout_secs == 0 {
            return Err("MNEMO_HEADER_READ_TIMEOUT_SECS must be at least 1".into());
        }
        if !(0.0..=1.0).contains(&self.search_keyword_weight) {
            return Err("MNEMO_SEARCH_KEYWORD_WEIGHT must be between 0 and 1".into());
        }
        if !(0.0..=1.0).contains(&self.search_crowd_weight) {
            return Err("MNEMO_SEARCH_CROWD_WEIGHT must be between 0 and 1".into());
        }
        if self.memory_max_bytes == 0 {
            return Err("MNEMO_MEMORY_MAX_BYTES must be at least 1".into());
        }
        if !(1..=crate::idempotency::MAX_TTL_HOURS).contains(&self.idempotency_ttl_hours) {
            return Err(format!(
                "MNEMO_IDEMPOTENCY_TTL_HOURS must be between 1 and {}",
                crate::idempotency::MAX_TTL_HOURS
            ));
        }
        self.llm.validate()?;
        self.memories.validate()?;
        self.notes.validate()?;
        self.conversations.validate()?;
        self.tasks.validate()?;
        self.embed.validate()?;
        self.rights.validate()?;
        Ok(())
    }

    /// Validation for commands that verify tokens: a key must be configured.
    pub fn validate_for_serving(&self) -> Result<(), String> {
        self.validate()?;
        if self.database_url.is_none() {
            return Err("DATABASE_URL is not set".into());
        }
        if self.jwt_secret.is_none() && self.jwt_public_key.is_none() && self.jwt_jwks.is_none() {
            return Err(
                "no token key: set MNEMO_JWT_SECRET, MNEMO_JWT_PUBLIC_KEY or MNEMO_JWT_JWKS".into(),
            );
        }
        Ok(())
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_secs(self.request_timeout_secs)
    }

    /// A configuration for tests and embedding: HS256 with the given secret, a free port on
    /// localhost, a pool of 16, the command-line defaults elsewhere (the environment ignored).
    pub fn for_secret(database_url: Option<String>, secret: &str) -> Self {
        Config {
            database_url,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            db_max_connections: 16,
            jwt_secret: Some(secret.to_owned()),
            ..command_line_defaults()
        }
    }
}

/// The values a settings group takes from its `#[arg(default_value…)]` attributes alone, as if
/// the command line and the environment set nothing. Every `impl Default` of a settings group
/// answers this, so a default is written once, where `--help` shows it.
#[expect(
    clippy::panic,
    reason = "the defaults are constants of the attributes: a group whose defaults do not parse is \
              a bug the unit tests meet first (`Config::for_secret` parses every group's defaults)"
)]
pub fn command_line_defaults<T: Args + clap::FromArgMatches>() -> T {
    let command = T::augment_args(clap::Command::new("mnemo").no_binary_name(true))
        .mut_args(|arg| arg.env(None::<&str>));
    let matches = command
        .try_get_matches_from(std::iter::empty::<String>())
        .unwrap_or_else(|err| panic!("the settings' defaults must parse: {err}"));
    T::from_arg_matches(&matches)
        .unwrap_or_else(|err| panic!("the settings' defaults must parse: {err}"))
}

/// `postgres://user:secret@host/db` becomes `postgres://user:***@host/db`.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.find(':') {
                Some(colon) => format!(
                    "{}{}:***{}",
                    &url[..scheme + 3],
                    &userinfo[..colon],
                    &url[at..]
                ),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field(
                "database_url",
                &self.database_url.as_deref().map(redact_url),
            )
            .field("listen", &self.listen)
            .field("db_max_connections", &self.db_max_connections)
            .field("jwt_secret", &self.jwt_secret.as_ref().map(|_| "***"))
            .field("jwt_public_key", &self.jwt_public_key)
            .field("jwt_jwks", &self.jwt_jwks)
            .field("jwt_jwks_min_refresh_secs", &self.jwt_jwks_min_refresh_secs)
            .field("jwt_private_key", &self.jwt_private_key)
            .field("jwt_issuer", &self.jwt_issuer)
            .field("jwt_audience", &self.jwt_audience)
            .field("tenant_claim", &self.tenant_claim)
            .field("default_tenant", &self.default_tenant)
            .field("cors_origins", &self.cors_origins)
            .field("public_url", &self.public_url)
            .field("request_timeout_secs", &self.request_timeout_secs)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("memory_max_bytes", &self.memory_max_bytes)
            .field("search_keyword_weight", &self.search_keyword_weight)
            .field("search_crowd_weight", &self.search_crowd_weight)
            .field("db_statement_timeout_secs", &self.db_statement_timeout_secs)
            .field("max_connections", &self.max_connections)
            .field("max_connections_per_ip", &self.max_connections_per_ip)
            .field("header_read_timeout_secs", &self.header_read_timeout_secs)
            .field("idempotency_ttl_hours", &self.idempotency_ttl_hours)
            .field("fair_use", &self.fair_use)
            .field("llm", &self.llm)
            .field("memories", &self.memories)
            .field("notes", &self.notes)
            .field("conversations", &self.conversations)
            .field("tasks", &self.tasks)
            .field("embed", &self.embed)
            .field("rights", &self.rights)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_secrets() {
        let mut config = Config::for_secret(
            Some("postgres://app:hunter2@db/mnemo".into()),
            "a-very-long-secret-of-at-least-32-bytes",
        );
        config.jwt_audience = Some("mnemo".into());
        let shown = format!("{config:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(!shown.contains("a-very-long-secret"), "{shown}");
        assert!(shown.contains("postgres://app:***@db/mnemo"), "{shown}");
    }

    /// Defaults come from the `#[arg]` attributes only: a variable set in the environment (here
    /// `PATH`, set in every process) does not leak into them.
    #[test]
    fn defaults_ignore_the_environment() {
        #[derive(clap::Args)]
        struct Probe {
            #[arg(long, env = "PATH", default_value = "unset")]
            path: String,
            #[arg(long, default_value_t = 7)]
            count: u32,
            #[arg(long, env = "PATH")]
            optional: Option<String>,
        }
        assert!(std::env::var_os("PATH").is_some());
        let probe = command_line_defaults::<Probe>();
        assert_eq!((probe.path.as_str(), probe.count), ("unset", 7));
        assert_eq!(probe.optional, None);
        let config = Config::for_secret(None, "0123456789abcdef0123456789abcdef");
        assert_eq!(config.database_url, None);
        assert_eq!(config.tenant_claim, "tenant_id");
        assert_eq!(config.notes.max_bytes, 64 * 1024);
        assert_eq!(config.embed.model, None);
    }

    #[test]
    fn short_secret_is_one_clear_line() {
        let config = Config::for_secret(None, "short");
        let err = config.validate().unwrap_err();
        assert_eq!(err, "MNEMO_JWT_SECRET is 5 bytes; HS256 needs at least 32");
    }

    #[test]
    fn idempotency_ttl_is_bounded_and_named() {
        let mut config = Config::for_secret(None, "0123456789abcdef0123456789abcdef");
        assert!(config.validate().is_ok());
        for bad in [0, crate::idempotency::MAX_TTL_HOURS + 1] {
            config.idempotency_ttl_hours = bad;
            let err = config.validate().unwrap_err();
            assert!(err.starts_with("MNEMO_IDEMPOTENCY_TTL_HOURS"), "{err}");
        }
    }

    #[test]
    fn two_key_sources_are_refused() {
        let mut config = Config::for_secret(None, "0123456789abcdef0123456789abcdef");
        config.jwt_jwks = Some("jwks.json".into());
        assert!(config.validate().unwrap_err().contains("only one"));
    }
}
