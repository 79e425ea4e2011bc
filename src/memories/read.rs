//! Reading a memory back: one page (by bytes or by lines) and grep, as plain functions over a
//! connection. [`retrieve_memory`] is the agent tool `retrieve_memory`.

use futures::TryStreamExt;
use uuid::Uuid;

use super::chunks::CHUNK_BYTES;
use super::grep::{self, Grep, Lines};
use super::model::{
    ContentTotals, GrepLine, GrepMatch, GrepQuery, GrepResult, MemoryPage, NextPage, PageQuery,
    PageRange,
};
use super::paging::{self, Request, Totals, Window};
use super::placeholder;
use super::store::{Limits, inactive, not_found};
use crate::access::Caller;
use crate::db::Scoped;
use crate::error::{ApiError, ApiResult};

/// Default number of lines of a line page without `line_count`.
pub const DEFAULT_PAGE_LINES: u64 = 100;
/// Largest `line_count` of a line page.
pub const MAX_PAGE_LINES: u64 = 100_000;
/// Offsets and line numbers above this are refused as absurd (and keep SQL arithmetic in range).
const MAX_POSITION: u64 = 1 << 50;

/// Turns page parameters into a page request, refusing mixed, zero, negative or absurd values.
pub fn page_request(query: &PageQuery, limits: &Limits) -> ApiResult<Request> {
    let bytes = query.offset.is_some() || query.limit.is_some();
    let lines = query.line_start.is_some() || query.line_count.is_some();
    if bytes && lines {
        let field = if query.line_start.is_some() {
            "line_start"
        } else {
            "line_count"
        };
        return Err(ApiError::invalid(
            field,
            "page either by bytes (`offset`, `limit`) or by lines (`line_start`, `line_count`), not both",
        ));
    }
    if lines {
        let start = query.line_start.unwrap_or(1);
        let count = query.line_count.unwrap_or(DEFAULT_PAGE_LINES);
        if start == 0 || start > MAX_POSITION {
            return Err(ApiError::invalid(
                "line_start",
                format!("`line_start` is 1-based and at most {MAX_POSITION}"),
            ));
        }
        if count == 0 || count > MAX_PAGE_LINES {
            return Err(ApiError::invalid(
                "line_count",
                format!("`line_count` must be 1 to {MAX_PAGE_LINES}"),
            ));
        }
        return Ok(Request::Lines { start, count });
    }
    let offset = query.offset.unwrap_or(0);
    let limit = query.limit.unwrap_or(limits.page_bytes);
    if offset > MAX_POSITION {
        return Err(ApiError::invalid(
            "offset",
            format!("`offset` must be at most {MAX_POSITION}"),
        ));
    }
    if limit == 0 || limit > limits.max_page_bytes {
        return Err(ApiError::invalid(
            "limit",
            format!("`limit` must be 1 to {} bytes", limits.max_page_bytes),
        ));
    }
    Ok(Request::Bytes { offset, limit })
}

// The byte page of `mnemo_read_memory` writes `CHUNK_BYTES` out as 16384.
const _: () = assert!(CHUNK_BYTES == 16384);

/// The memory row with one chunk of a page (none when the page holds no chunk).
struct PageRow {
    summary: String,
    is_active: bool,
    size_bytes: i64,
    line_count: i64,
    token_count: i64,
    chunk_byte_start: Option<i64>,
    chunk_line_start: Option<i64>,
    chunk_content: Option<String>,
}

fn next_page(request: Option<Request>) -> Option<NextPage> {
    request.map(|r| match r {
        Request::Bytes { offset, limit } => NextPage {
            offset: Some(offset),
            limit: Some(limit),
            line_start: None,
            line_count: None,
        },
        Request::Lines { start, count } => NextPage {
            offset: None,
            limit: None,
            line_start: Some(start),
            line_count: Some(count),
        },
    })
}

/// Agent tool `retrieve_memory`: one page of memory `key`, reading only the chunks the page
/// overlaps, in one call (`mnemo_read_memory`: the memory row with the page's chunks, which are
/// put in `byte_start` order here). A range past the end is an empty slice with the totals.
pub async fn retrieve_memory(
    caller: &Caller,
    key: &str,
    request: Request,
    include_inactive: bool,
    limits: &Limits,
) -> ApiResult<MemoryPage> {
    // By bytes: the page [offset, offset + limit). By lines: `count` lines from `start`, up to
    // the byte cap past the chunk holding line `start`.
    let (by_lines, start, size) = match request {
        Request::Bytes { offset, limit } => (false, offset, limit),
        Request::Lines { start, count } => (true, start, count),
    };
    let cap = (limits.max_page_bytes + CHUNK_BYTES as u64) as i64;
    let mut rows = caller
        .read_call(|tenant, user| {
            sqlx::query_as!(
                PageRow,
                r#"SELECT summary AS "summary!", is_active AS "is_active!",
                          size_bytes AS "size_bytes!", line_count AS "line_count!",
                          token_count AS "token_count!", chunk_byte_start, chunk_line_start,
                          chunk_content
                   FROM mnemo_read_memory($1, $2, $3, $4, $5, $6, $7, $8)"#,
                key,
                by_lines,
                start as i64,
                size as i64,
                include_inactive,
                cap,
                tenant,
                user
            )
        })
        .await?;
    // The chunks in page order: the call reads them along the chunk index and does not sort them
    // again.
    rows.sort_by_key(|r| r.chunk_byte_start);
    let Some(first) = rows.first() else {
        return Err(not_found(key));
    };
    if !first.is_active && !include_inactive {
        return Err(inactive(key));
    }
    let totals = Totals {
        size_bytes: first.size_bytes as u64,
        line_count: first.line_count as u64,
    };
    let window_start = first.chunk_byte_start.unwrap_or(0) as u64;
    let window_line = first.chunk_line_start.unwrap_or(1) as u64;
    let text: String = rows
        .iter()
        .filter_map(|r| r.chunk_content.as_deref())
        .collect();
    let window = Window {
        text: &text,
        byte_start: window_start,
        line_start: window_line,
    };
    let (page, unit) = match request {
        Request::Bytes { offset, limit } => {
            (paging::bytes(&window, totals, offset, limit), "bytes")
        }
        Request::Lines { start, count } => (
            paging::lines(
                &window,
                totals,
                start,
                count,
                limits.max_page_bytes,
                limits.page_bytes,
            ),
            "lines",
        ),
    };
    Ok(MemoryPage {
        memory_key: key.to_owned(),
        placeholder: placeholder::placeholder(key, &first.summary),
        summary: first.summary.clone(),
        is_active: first.is_active,
        content: page.text.to_owned(),
        range: PageRange {
            unit: unit.into(),
            offset: page.byte_start,
            end: page.byte_end,
            length: page.byte_end - page.byte_start,
            line_start: page.lines.map(|l| l.0),
            line_end: page.lines.map(|l| l.1),
        },
        totals: ContentTotals {
            size_bytes: first.size_bytes,
            line_count: first.line_count,
            token_count: first.token_count,
        },
        next: next_page(page.next),
        capped: page.capped,
        line_split: page.line_split,
    })
}

struct Head {
    id: Uuid,
    summary: String,
    is_active: bool,
    line_count: i64,
}

/// `GET /api/memories/{key}/grep`: streams the chunks in order through the matcher, so memory use
/// stays at one chunk plus the answer whatever the content size.
pub async fn grep_memory(conn: &mut Scoped, key: &str, query: &GrepQuery) -> ApiResult<GrepResult> {
    let pattern = query
        .pattern
        .as_deref()
        .ok_or_else(|| ApiError::invalid("pattern", "`pattern` is required"))?;
    let regex = grep::compile(pattern, query.ignore_case.unwrap_or(false))
        .map_err(|detail| ApiError::invalid("pattern", detail))?;
    let context = query.context.unwrap_or(2);
    if context > 20 {
        return Err(ApiError::invalid("context", "`context` must be 0 to 20"));
    }
    let max_matches = query.max_matches.unwrap_or(50);
    if max_matches == 0 || max_matches > 1000 {
        return Err(ApiError::invalid(
            "max_matches",
            "`max_matches` must be 1 to 1000",
        ));
    }
    // The scope is compared through sub-selects, values the planner cannot see: the plan a
    // connection keeps for this statement is then the key index's whoever made it. Compared with
    // `current_setting` directly, a plan made for a user the statistics do not know takes that
    // user to hold nothing and may read by the stream index with the key as a filter, for every
    // later caller. The `PUT` and the delete of a memory find it the same way.
    let head = sqlx::query_as!(
        Head,
        "SELECT id, summary, is_active, line_count FROM agent_memories
         WHERE tenant_id = (SELECT current_setting('mnemo.tenant'))
           AND user_id = (SELECT current_setting('mnemo.user')) AND memory_key = $1",
        key
    )
    .fetch_optional(&mut *conn)
    .await?
    .ok_or_else(|| not_found(key))?;
    if !head.is_active && !query.include_inactive.unwrap_or(false) {
        return Err(inactive(key));
    }
    let mut matcher = Grep::new(&regex, context as usize, max_matches as usize);
    let mut lines = Lines::default();
    {
        let mut stream = sqlx::query_scalar!(
            "SELECT content FROM agent_memory_chunks
             WHERE tenant_id = current_setting('mnemo.tenant')
               AND user_id = current_setting('mnemo.user') AND memory_id = $1
             ORDER BY byte_start",
            head.id
        )
        .fetch(&mut *conn);
        while let Some(piece) = stream.try_next().await? {
            lines.push(&piece, |n, l| matcher.line(n, l));
        }
    }
    lines.finish(|n, l| matcher.line(n, l));
    let outcome = matcher.finish();
    let line = |l: grep::Line| GrepLine {
        line_number: l.number,
        line: l.text,
        truncated: l.truncated,
    };
    Ok(GrepResult {
        placeholder: placeholder::placeholder(key, &head.summary),
        memory_key: key.to_owned(),
        pattern: pattern.to_owned(),
        matches: outcome
            .matches
            .into_iter()
            .map(|m| GrepMatch {
                line_number: m.line.number,
                line: m.line.text,
                truncated: m.line.truncated,
                before: m.before.into_iter().map(line).collect(),
                after: m.after.into_iter().map(line).collect(),
            })
            .collect(),
        total_matches: outcome.total_matches,
        truncated: outcome.truncated,
        line_count: head.line_count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_requests_are_validated() {
        let limits = Limits {
            max_content_bytes: 100,
            page_bytes: 8,
            max_page_bytes: 64,
            capture_threshold_tokens: 5,
        };
        let q = |offset, limit, line_start, line_count| PageQuery {
            offset,
            limit,
            line_start,
            line_count,
            include_inactive: None,
        };
        assert_eq!(
            page_request(&q(None, None, None, None), &limits).ok(),
            Some(Request::Bytes {
                offset: 0,
                limit: 8
            })
        );
        assert_eq!(
            page_request(&q(None, None, Some(3), None), &limits).ok(),
            Some(Request::Lines {
                start: 3,
                count: DEFAULT_PAGE_LINES
            })
        );
        assert!(page_request(&q(Some(0), None, Some(1), None), &limits).is_err());
        assert!(page_request(&q(None, Some(0), None, None), &limits).is_err());
        assert!(page_request(&q(None, Some(65), None, None), &limits).is_err());
        assert!(page_request(&q(None, None, Some(0), None), &limits).is_err());
        assert!(page_request(&q(None, None, None, Some(0)), &limits).is_err());
        assert!(page_request(&q(Some(u64::MAX), None, None, None), &limits).is_err());
    }
}
