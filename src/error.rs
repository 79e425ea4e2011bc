//! One error type for the whole API, answered as `application/problem+json` (RFC 9457).
//!
//! A handler returns [`ApiError`]; its response carries a [`Problem`] in the response extensions and
//! the outermost middleware ([`crate::http`]) writes the body, adding the request id and the request
//! path as `instance`. Responses that axum or tower make on their own (404 fallback, 405, 408, 413)
//! are rewritten into the same shape there too, so every error a client sees has one form.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

pub const PROBLEM_JSON: &str = "application/problem+json";

/// RFC 9457 problem details, as every error body of this API.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Problem {
    /// A URI naming the kind of problem; `about:blank` when the status says it all.
    #[serde(rename = "type")]
    pub kind: String,
    /// Short, human-readable summary of the kind of problem.
    pub title: String,
    /// The HTTP status code.
    pub status: u16,
    /// What exactly went wrong with this request.
    pub detail: String,
    /// The request path this problem occurred on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// The request id (also in the `x-request-id` response header); quote it in bug reports.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// Extension members of this kind of problem (`field`, `current_version`, `limit`, ...).
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extensions: Map<String, Value>,
}

impl Problem {
    pub fn new(status: StatusCode, detail: impl Into<String>) -> Self {
        Problem {
            kind: "about:blank".into(),
            title: status.canonical_reason().unwrap_or("Error").into(),
            status: status.as_u16(),
            detail: detail.into(),
            instance: None,
            request_id: None,
            extensions: Map::new(),
        }
    }

    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extensions.insert(key.into(), value.into());
        self
    }

    pub fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }
}

/// Every failure a handler can answer with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// A problem the client caused, answered as it is (4xx, or 503 for a missing optional service).
    #[error("{}", .0.detail)]
    Problem(Box<Problem>),
    /// Anything unexpected: logged with its detail, answered 500 with a generic body.
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn problem(problem: Problem) -> Self {
        ApiError::Problem(Box::new(problem))
    }

    pub fn status(status: StatusCode, detail: impl Into<String>) -> Self {
        Self::problem(Problem::new(status, detail))
    }

    pub fn bad_request(detail: impl Into<String>) -> Self {
        Self::status(StatusCode::BAD_REQUEST, detail)
    }

    pub fn unauthorized(detail: impl Into<String>) -> Self {
        Self::status(StatusCode::UNAUTHORIZED, detail)
    }

    pub fn forbidden(detail: impl Into<String>) -> Self {
        Self::status(StatusCode::FORBIDDEN, detail)
    }

    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::status(StatusCode::NOT_FOUND, detail)
    }

    pub fn conflict(detail: impl Into<String>) -> Self {
        Self::status(StatusCode::CONFLICT, detail)
    }

    pub fn too_large(detail: impl Into<String>) -> Self {
        Self::status(StatusCode::PAYLOAD_TOO_LARGE, detail)
    }

    /// 422 naming the offending field (a JSON path such as `messages_batch[3].sender`).
    pub fn invalid(field: impl Into<String>, detail: impl Into<String>) -> Self {
        let field = field.into();
        Self::problem(
            Problem::new(StatusCode::UNPROCESSABLE_ENTITY, detail)
                .with("field", Value::String(field)),
        )
    }

    pub fn unavailable(detail: impl Into<String>) -> Self {
        Self::status(StatusCode::SERVICE_UNAVAILABLE, detail)
    }

    /// The status this error answers with.
    pub fn status_code(&self) -> StatusCode {
        match self {
            ApiError::Problem(problem) => problem.status(),
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Whether this answers 404.
    pub fn is_not_found(&self) -> bool {
        self.status_code() == StatusCode::NOT_FOUND
    }

    /// The `field` member of a 422, if any.
    pub fn field(&self) -> Option<&str> {
        match self {
            ApiError::Problem(problem) => problem.extensions.get("field").and_then(Value::as_str),
            ApiError::Internal(_) => None,
        }
    }

    /// Adds an extension member; no effect on internal errors.
    pub fn with(self, key: &str, value: impl Into<Value>) -> Self {
        match self {
            ApiError::Problem(problem) => ApiError::Problem(Box::new(problem.with(key, value))),
            other => other,
        }
    }

    /// The problem a request is answered with when a statement breaks the named constraint
    /// `name`, if [`CONSTRAINTS`] lists it.
    pub fn from_constraint(name: &str) -> Option<ApiError> {
        let found = CONSTRAINTS.iter().find(|c| c.names.contains(&name))?;
        let err = ApiError::status(found.status, found.detail);
        Some(match found.field {
            Some(field) => err.with("field", field),
            None => err,
        })
    }
}

/// The names of the constraints [`ApiError::from_constraint`] maps.
pub fn mapped_constraints() -> impl Iterator<Item = &'static str> {
    CONSTRAINTS.iter().flat_map(|c| c.names.iter().copied())
}

/// A named constraint a request can run into, and what the client is told.
struct Constraint {
    names: &'static [&'static str],
    status: StatusCode,
    detail: &'static str,
    /// The request field (or header) the conflict is about.
    field: Option<&'static str>,
}

/// Every named constraint that a request, rather than a bug, can break: a duplicate the client
/// sent, or a row that another request deleted between this request's check and its write. A
/// statement breaking one of these answers its problem wherever it runs; any other violation is
/// a 500 (a bug, logged).
const CONSTRAINTS: &[Constraint] = &[
    Constraint {
        names: &["task_steps_step_id_key"],
        status: StatusCode::CONFLICT,
        detail: "a step with this step_id already exists in the task",
        field: Some("step_id"),
    },
    Constraint {
        names: &["task_tool_calls_pkey"],
        status: StatusCode::CONFLICT,
        detail: "a tool call with this tool_call_id already exists in the task",
        field: Some("tool_call_id"),
    },
    Constraint {
        names: &["task_artifacts_pkey"],
        status: StatusCode::CONFLICT,
        detail: "an artifact with this id already exists in the task",
        field: None,
    },
    Constraint {
        names: &["tasks_pkey"],
        status: StatusCode::CONFLICT,
        detail: "a task with this id already exists",
        field: Some("keep_id"),
    },
    Constraint {
        names: &["agent_memories_key_unique"],
        status: StatusCode::CONFLICT,
        detail: "a memory with this key already exists",
        field: Some("key"),
    },
    Constraint {
        names: &["idempotency_keys_pkey"],
        status: StatusCode::CONFLICT,
        detail: "a request with this Idempotency-Key is still in progress; retry once it has \
                 finished",
        field: Some("Idempotency-Key"),
    },
    Constraint {
        names: &["task_actions_item_fkey"],
        status: StatusCode::NOT_FOUND,
        detail: "the active plan has no such step (a replan replaced it meanwhile)",
        field: None,
    },
    Constraint {
        names: &[
            "task_plans_task_fkey",
            "task_events_task_fkey",
            "task_messages_task_fkey",
            "task_snapshots_task_fkey",
            "task_steps_task_fkey",
            "task_artifacts_task_fkey",
            "task_configs_task_fkey",
            "task_waits_task_fkey",
        ],
        status: StatusCode::NOT_FOUND,
        detail: "no such task (it was deleted meanwhile)",
        field: None,
    },
    Constraint {
        names: &[
            "conversation_messages_session_fkey",
            "recent_conversation_history_session_fkey",
        ],
        status: StatusCode::NOT_FOUND,
        detail: "no such session (it was deleted meanwhile)",
        field: None,
    },
];

/// Whether `err` is PostgreSQL aborting a transaction that lost a conflict with a concurrent one:
/// a deadlock (40P01), a serialization failure (40001) or a lock it could not take (55P03). The
/// request was not wrong, and the same request again can succeed: 503 with `Retry-After`, not
/// a 500.
pub fn is_transaction_conflict(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db)
        if matches!(db.code().as_deref(), Some("40P01" | "40001" | "55P03")))
}

/// Seconds a client is told to wait (`Retry-After`) when the database is busy or unreachable.
pub const RETRY_AFTER_SECS: u64 = 2;

/// Whether `err` means the database could not be reached or went away (a restart, a dropped
/// connection, a full pool) rather than that the statement was wrong: such errors are 503.
pub fn is_unavailable(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            // 08: connection exception; 57P01..57P03: the server is shutting down or starting;
            // 53300: too many connections; 57014: cancelled by the statement timeout.
            code.starts_with("08")
                || matches!(
                    code.as_ref(),
                    "57P01" | "57P02" | "57P03" | "53300" | "57014"
                )
        }),
        _ => false,
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(err: sqlx::Error) -> Self {
        if is_unavailable(&err) {
            tracing::warn!(error = %err, "database unavailable");
            let detail = match err {
                sqlx::Error::PoolTimedOut => "the database is busy; retry shortly",
                _ => "the database is unreachable; retry shortly",
            };
            return ApiError::unavailable(detail);
        }
        if is_transaction_conflict(&err) {
            tracing::info!(error = %err, "a transaction lost to a concurrent one");
            return ApiError::unavailable(
                "a concurrent change to the same data conflicted with this request, which was \
                 rolled back; retry it",
            );
        }
        if let sqlx::Error::Database(db) = &err
            && let Some(mapped) = db.constraint().and_then(ApiError::from_constraint)
        {
            return mapped;
        }
        // A value PostgreSQL cannot hold that parsing let through: a date before 4713 BC (the
        // JSON parser takes years down to -262143).
        if let sqlx::Error::Database(db) = &err
            && db.code().as_deref() == Some("22008")
        {
            return ApiError::status(StatusCode::UNPROCESSABLE_ENTITY, OUT_OF_RANGE_TIME);
        }
        ApiError::Internal(anyhow::Error::new(err))
    }
}

/// What a date PostgreSQL cannot hold is answered with.
const OUT_OF_RANGE_TIME: &str =
    "a date or time is outside the range that can be stored (4713 BC to 294276 AD)";

/// Checks that PostgreSQL can hold `at`, as it checks a bound parameter: for a request that may
/// answer without sending it (a search of nothing), so that the same input is 422 either way.
/// The range is PostgreSQL's `timestamptz`: from 4714-11-24 BC (astronomical year -4713) at
/// midnight UTC, up to but not including the year 294277.
pub fn check_storable_time(
    field: &str,
    at: Option<chrono::DateTime<chrono::Utc>>,
) -> ApiResult<()> {
    /// Microseconds from 2000-01-01 UTC, PostgreSQL's epoch: `MIN_TIMESTAMP` (included) and
    /// `END_TIMESTAMP` (excluded).
    const FIRST: i64 = -211_813_488_000_000_000;
    const END: i64 = 9_223_371_331_200_000_000;
    /// 2000-01-01 UTC, in microseconds from 1970.
    const EPOCH: i64 = 946_684_800_000_000;
    let Some(at) = at else {
        return Ok(());
    };
    match at.timestamp_micros().checked_sub(EPOCH) {
        Some(us) if (FIRST..END).contains(&us) => Ok(()),
        _ => Err(ApiError::invalid(field, OUT_OF_RANGE_TIME)),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let problem = match self {
            ApiError::Problem(problem) => *problem,
            ApiError::Internal(err) => {
                // The detail goes to the log only; the body says nothing of the internals.
                tracing::error!(error = ?err, "internal error");
                Problem::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "an internal error occurred; the request id identifies it in the server log",
                )
            }
        };
        problem_response(problem)
    }
}

/// A response whose body the problem middleware fills in (request id, instance).
pub fn problem_response(problem: Problem) -> Response {
    let status = problem.status();
    let mut response = status.into_response();
    if status == StatusCode::SERVICE_UNAVAILABLE {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
    }
    if status == StatusCode::UNAUTHORIZED
        && !response.headers().contains_key(header::WWW_AUTHENTICATE)
    {
        let challenge = format!(
            "Bearer error=\"invalid_token\", error_description=\"{}\"",
            problem.detail.replace(['"', '\\'], "'")
        );
        if let Ok(value) = HeaderValue::from_str(&challenge) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        }
    }
    response.extensions_mut().insert(problem);
    response
}
