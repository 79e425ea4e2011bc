//! Request and response types of the detail-memory API (and of the agent tools built on it).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::{IntoParams, ToSchema};

use crate::search::SearchMode;

/// Body of `POST /api/memories` and `PUT /api/memories/{key}`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryInput {
    /// The full output to keep (logs, file contents, query results, ...). Not empty; at most
    /// `MNEMO_MEMORY_MAX_BYTES` bytes.
    #[schema(min_length = 1)]
    pub content: String,
    /// Short description used as the summary in the placeholder; when absent a deterministic
    /// summary is made from the content.
    #[serde(default)]
    #[schema(
        max_length = 4000,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    pub description: Option<String>,
    /// Free text such as `command_output`, `file_content`, `user_preference` (default `text`).
    /// Also accepted as `type`; sending both is 422.
    #[serde(default, alias = "type")]
    #[schema(
        max_length = 64,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    pub memory_type: Option<String>,
    #[serde(default)]
    #[schema(
        max_length = 256,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    pub agent_id: Option<String>,
    #[serde(default)]
    #[schema(
        max_length = 256,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    pub thread_id: Option<String>,
    /// Readable key (`[A-Za-z0-9._:-]`, at most 128); generated when absent. With PUT the path
    /// names the key and this field must be absent or equal.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9._:-]+$")]
    pub key: Option<String>,
    /// Anything the caller wants kept with the memory: source command, exit code, duration, ...
    /// At most 64 KiB as JSON. Also accepted as `content_metadata`; sending both is 422.
    #[serde(default, alias = "content_metadata")]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Map<String, Value>>,
}

/// What a store did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum StoreStatus {
    /// A new memory.
    Created,
    /// Same content and description as stored: nothing changed.
    Unchanged,
    /// Same content; description, type, ids or metadata changed.
    Updated,
    /// Different content: the new version replaced the old one.
    Replaced,
}

/// The previous version a PUT replaced.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PreviousVersion {
    pub version: i32,
    pub size_bytes: i64,
    pub content_sha256: String,
}

/// Answer to a store: what to put in the agent's context.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct StoredMemory {
    pub memory_key: String,
    /// Exactly `[MemoryRef: <memory_key> - <summary>]`.
    pub placeholder: String,
    pub summary: String,
    pub memory_type: String,
    pub agent_id: Option<String>,
    pub thread_id: Option<String>,
    pub size_bytes: i64,
    pub line_count: i64,
    /// cl100k_base tokens (the content is counted chunk by chunk; see the README).
    pub token_count: i64,
    /// Lowercase hex SHA-256 of the content.
    pub content_sha256: String,
    /// 1 for a new memory, +1 each time a PUT changes it.
    pub version: i32,
    pub status: StoreStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous: Option<PreviousVersion>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A memory without its content, as lists show it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MemoryInfo {
    pub memory_key: String,
    pub placeholder: String,
    pub summary: String,
    pub memory_type: String,
    pub agent_id: Option<String>,
    pub thread_id: Option<String>,
    #[schema(value_type = Object)]
    pub metadata: Value,
    pub size_bytes: i64,
    pub line_count: i64,
    pub token_count: i64,
    pub content_sha256: String,
    pub version: i32,
    pub is_active: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// One page of `GET /api/memories`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MemoryList {
    pub items: Vec<MemoryInfo>,
    /// Pass as `cursor` for the next page; null at the end.
    pub next_cursor: Option<String>,
}

/// Query of `GET /api/memories`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    pub agent_id: Option<String>,
    pub thread_id: Option<String>,
    pub memory_type: Option<String>,
    /// Created at or after this instant (RFC 3339).
    pub created_after: Option<DateTime<Utc>>,
    /// Created before this instant (RFC 3339).
    pub created_before: Option<DateTime<Utc>>,
    /// A JSON object the memory's metadata must contain (`{"exit_code":1}`).
    pub metadata: Option<String>,
    /// Also list soft-deleted memories.
    pub include_inactive: Option<bool>,
    /// 1 to 200, default 50.
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// Query of `GET /api/memories/{key}`: either `offset`+`limit` (bytes) or
/// `line_start`+`line_count`; neither reads the first `MNEMO_MEMORY_PAGE_BYTES` bytes.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PageQuery {
    /// Byte offset (0-based). Inside a multi-byte character it moves back to its first byte.
    #[param(maximum = 1_125_899_906_842_624_u64)]
    pub offset: Option<u64>,
    /// Bytes to read (1 to `MNEMO_MEMORY_MAX_PAGE_BYTES`, default `MNEMO_MEMORY_PAGE_BYTES`).
    #[param(minimum = 1, maximum = 1_048_576)]
    pub limit: Option<u64>,
    /// First line to read (1-based).
    #[param(minimum = 1, maximum = 1_125_899_906_842_624_u64)]
    pub line_start: Option<u64>,
    /// Lines to read (1 to 100000, default 100); the page stops early at
    /// `MNEMO_MEMORY_MAX_PAGE_BYTES` (flagged `capped`).
    #[param(minimum = 1, maximum = 100_000)]
    pub line_count: Option<u64>,
    /// Read a soft-deleted memory.
    pub include_inactive: Option<bool>,
}

/// Where a page sits in the content.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PageRange {
    /// `bytes` or `lines`: how the page was asked for.
    pub unit: String,
    /// Byte range `[offset, end)` of `content`.
    pub offset: u64,
    pub end: u64,
    pub length: u64,
    /// First and last line the slice touches; null for an empty slice.
    pub line_start: Option<u64>,
    pub line_end: Option<u64>,
}

/// Query parameters that read the following page: `offset`+`limit` or `line_start`+`line_count`.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq, Eq)]
pub struct NextPage {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line_start: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line_count: Option<u64>,
}

impl NextPage {
    /// As a query string (`offset=8192&limit=8192`).
    pub fn query_string(&self) -> String {
        let mut parts = Vec::new();
        for (name, value) in [
            ("offset", self.offset),
            ("limit", self.limit),
            ("line_start", self.line_start),
            ("line_count", self.line_count),
        ] {
            if let Some(value) = value {
                parts.push(format!("{name}={value}"));
            }
        }
        parts.join("&")
    }
}

/// Totals of the whole content.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct ContentTotals {
    pub size_bytes: i64,
    pub line_count: i64,
    pub token_count: i64,
}

/// One page of a memory's content.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MemoryPage {
    pub memory_key: String,
    pub placeholder: String,
    pub summary: String,
    pub is_active: bool,
    /// The slice.
    pub content: String,
    pub range: PageRange,
    pub totals: ContentTotals,
    /// Parameters for the following page; null when this page reaches the end.
    pub next: Option<NextPage>,
    /// A line page stopped before `line_count` lines because of the byte cap.
    pub capped: bool,
    /// A line page whose one line is longer than the cap: the slice ends inside the line and
    /// `next` reads on by bytes.
    pub line_split: bool,
}

/// Query of `GET /api/memories/{key}/grep`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct GrepQuery {
    /// Regular expression (Rust `regex` syntax, linear time, at most 1024 bytes).
    #[param(required = true, min_length = 1, max_length = 1024, format = Regex)]
    pub pattern: Option<String>,
    /// Lines of context before and after each match (0 to 20, default 2).
    #[param(maximum = 20)]
    pub context: Option<u32>,
    /// Matches returned (1 to 1000, default 50); all are counted.
    #[param(minimum = 1, maximum = 1000)]
    pub max_matches: Option<u32>,
    /// Case-insensitive matching.
    pub ignore_case: Option<bool>,
    /// Grep a soft-deleted memory.
    pub include_inactive: Option<bool>,
}

/// A line in a grep answer.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct GrepLine {
    pub line_number: u64,
    pub line: String,
    /// The line was longer than 2000 bytes; `line` is its beginning.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

/// A matching line and its context.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct GrepMatch {
    pub line_number: u64,
    pub line: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    pub before: Vec<GrepLine>,
    pub after: Vec<GrepLine>,
}

/// Answer of a grep.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct GrepResult {
    pub memory_key: String,
    pub placeholder: String,
    pub pattern: String,
    pub matches: Vec<GrepMatch>,
    /// Matching lines in the whole content.
    pub total_matches: u64,
    /// More lines matched than `matches` holds (raise `max_matches` or narrow the pattern).
    pub truncated: bool,
    pub line_count: i64,
}

/// Filters of a search.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = MemorySearchFilters)]
pub struct SearchFilters {
    #[serde(default)]
    pub agent_id: Option<String>,
    #[serde(default)]
    pub thread_id: Option<String>,
    #[serde(default)]
    pub memory_type: Option<String>,
    #[serde(default)]
    pub created_after: Option<DateTime<Utc>>,
    #[serde(default)]
    pub created_before: Option<DateTime<Utc>>,
    /// An object the metadata must contain.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Map<String, Value>>,
    /// Also search soft-deleted memories.
    #[serde(default)]
    pub include_inactive: bool,
}

/// Body of `POST /api/memories/search`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = MemorySearchRequest)]
pub struct SearchRequest {
    /// A question or keywords (1 to 1000 characters). Words and `"quoted phrases"` are ORed
    /// (a memory matching more of them, and rarer ones, ranks higher); `-word` excludes. Any
    /// text is safe.
    #[schema(min_length = 1, max_length = 1000, pattern = r"\S")]
    pub query: String,
    /// Hits to return (1 to 100, default 10).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 100)]
    pub limit: Option<u32>,
    /// `keyword`, `semantic` or `hybrid`; default `hybrid` when the server has an embedder,
    /// else `keyword`.
    #[serde(default)]
    pub mode: Option<SearchMode>,
    #[serde(default)]
    pub filters: Option<SearchFilters>,
}

/// One search hit.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = MemorySearchHit)]
pub struct SearchHit {
    pub memory_key: String,
    pub placeholder: String,
    pub summary: String,
    pub memory_type: String,
    pub agent_id: Option<String>,
    pub thread_id: Option<String>,
    /// `content` (a chunk of the content matched) or `summary`.
    pub matched: String,
    /// Matching text with the matched words in `**bold**` (a semantic-only hit: the start of
    /// the closest chunk).
    pub snippet: String,
    /// The rank score, higher is better: the keyword rank in `keyword` mode, the similarity less
    /// its crowding discount in `semantic` mode, their fusion in `hybrid` mode.
    pub score: f32,
    /// Place among the keyword matches (1 = best), when the words matched.
    pub keyword_rank: Option<u32>,
    /// Place by similarity less the crowding discount (1 = closest), when the memory has been
    /// embedded.
    pub vector_rank: Option<u32>,
    /// Cosine similarity of the closest chunk to the query, when compared.
    pub similarity: Option<f32>,
    /// Line range of the matching chunk (content hits).
    pub line_start: Option<i64>,
    pub line_end: Option<i64>,
    /// Byte range `[byte_start, byte_end)` of the matching chunk (content hits).
    pub byte_start: Option<i64>,
    pub byte_end: Option<i64>,
    /// First line in the chunk holding a highlighted word, when one is found.
    pub match_line: Option<i64>,
    /// Query parameters of `GET /api/memories/{key}` reading the matching chunk's lines.
    pub retrieve: Option<NextPage>,
}

/// Answer of a search.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = MemorySearchResults)]
pub struct SearchResults {
    /// The mode that ranked the hits.
    pub mode: SearchMode,
    /// True when the embedder failed and only keyword results are served.
    pub degraded: bool,
    pub hits: Vec<SearchHit>,
    /// More hits exist past `limit`.
    pub has_more: bool,
    /// When words alone ranked the hits (keyword mode, a degraded search, or no candidate had a
    /// vector yet), what a text holding every word of the query would score: the scores divided
    /// by it are shares of the question, comparable across kinds of text (see `POST
    /// /api/recall`). None when the scores are similarities or fused ones. Not part of the answer.
    #[serde(skip)]
    pub words_weight: Option<f32>,
}

/// Query of `DELETE /api/memories/{key}`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct DeleteQuery {
    /// Remove the memory and its content for good instead of marking it inactive.
    pub hard: Option<bool>,
}

/// Body of `POST /api/memories/capture`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CaptureInput {
    /// The tool or command output.
    #[schema(min_length = 1)]
    pub content: String,
    /// The command that produced it (kept in the metadata and the summary).
    #[serde(default)]
    #[schema(
        max_length = 4000,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    pub command: Option<String>,
    /// Store only above this many cl100k tokens (default `MNEMO_MEMORY_CAPTURE_THRESHOLD_TOKENS`).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 10_000_000)]
    pub threshold_tokens: Option<u64>,
    #[serde(default)]
    #[schema(
        max_length = 256,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    pub agent_id: Option<String>,
    #[serde(default)]
    #[schema(
        max_length = 256,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    pub thread_id: Option<String>,
    /// Key to store under (generated when absent; an existing key is replaced like PUT).
    #[serde(default)]
    #[schema(min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9._:-]+$")]
    pub key: Option<String>,
    /// Default `command_output`.
    #[serde(default)]
    #[schema(
        max_length = 64,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    pub memory_type: Option<String>,
    #[serde(default)]
    pub exit_code: Option<i64>,
    /// How long the command ran, in milliseconds.
    #[serde(default)]
    #[schema(minimum = 0)]
    pub duration_ms: Option<i64>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Map<String, Value>>,
}

/// Answer of a capture: `context` is what goes into the agent's context either way.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CaptureResult {
    /// True when the output was over the threshold and stored.
    pub stored: bool,
    pub token_count: i64,
    pub threshold_tokens: u64,
    /// The content itself (not stored), or the placeholder line (stored).
    pub context: String,
    /// The stored memory, when stored.
    pub memory: Option<StoredMemory>,
}
