//! `--explain DIR`: the plans of the hot conversation statements, of a key read and of a notes
//! read.

use super::*;

/// `--explain DIR`: writes `DIR/<statement>.txt`, the plan PostgreSQL runs for each hot statement
/// of the conversation paths, with actual row counts (`EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF,
/// BUFFERS OFF, SUMMARY OFF)`), as `--user` of `--tenant` through the scoped transaction a request
/// uses (row-level security included). Writes are rolled back. Session `s7` is read and written.
pub(crate) async fn explain(dir: &std::path::Path, tenant: &str, user: &str) -> Result<(), String> {
    use mnemo::conversations::model::Order;
    use mnemo::conversations::store;
    let url = std::env::var("DATABASE_URL").map_err(|_| "DATABASE_URL is not set".to_owned())?;
    let db = mnemo::db::connect(&url, 2, None)
        .await
        .map_err(|e| e.to_string())?;
    let principal = mnemo::auth::Principal {
        tenant_id: tenant.to_owned(),
        user_id: user.to_owned(),
        scopes: Vec::new(),
    };
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    const HOW: &str = "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, BUFFERS OFF, SUMMARY OFF) ";
    let session = "s7";
    let at = chrono::DateTime::parse_from_rfc3339("2026-11-21T12:00:00Z")
        .map_err(|e| e.to_string())?
        .with_timezone(&chrono::Utc);
    let version: Option<i64> = {
        let mut tx = db.scoped(&principal).await.map_err(|e| e.to_string())?;
        let v = sqlx::query_scalar!(
            "SELECT version FROM agent_sessions WHERE session_id = $1",
            session
        )
        .fetch_optional(&mut tx)
        .await
        .map_err(|e| e.to_string())?;
        tx.end_read_only();
        v
    };
    let deep = chrono::DateTime::parse_from_rfc3339("2026-01-01T08:00:00Z")
        .map_err(|e| e.to_string())?
        .with_timezone(&chrono::Utc);
    let text = chat_text(1);
    let mut written = Vec::new();
    for name in [
        "archive-one-message",
        "window",
        "window-unchanged",
        "messages-newest-page",
        "messages-deep-page",
        "sessions-list",
    ] {
        let mut tx = db.scoped(&principal).await.map_err(|e| e.to_string())?;
        let no_days: Option<i32> = None;
        let messages_sql = |order, cursor| format!("{HOW}{}", store::messages_sql(order, cursor));
        let sessions_sql = format!("{HOW}{}", store::sessions_sql());
        let archive_sql = format!("{HOW}{}", store::ARCHIVE_SQL);
        let window_sql = format!("{HOW}{}", store::WINDOW_SQL);
        // Runtime: each is EXPLAIN over the conversation store's own statement text.
        let query = match name {
            "archive-one-message" => {
                sqlx::query_scalar::<_, String>(&archive_sql)
                    .bind(session)
                    .bind("assistant")
                    .bind(vec!["explain-1"])
                    .bind(vec!["user"])
                    .bind(vec![text.as_str()])
                    .bind(vec![at])
                    .bind(vec![None::<Value>])
                    .bind(vec![None::<&str>])
                    .bind(uuid::Uuid::now_v7())
                    .bind(Some(at))
                    .bind(Some(at))
                    .bind(1i32)
                    .bind(false)
                    .bind(vec![None::<chrono::DateTime<chrono::Utc>>])
                    .bind(Vec::<&str>::new())
                    .bind(Vec::<Option<chrono::DateTime<chrono::Utc>>>::new())
                    .fetch_all(&mut tx)
                    .await
            }
            "window" | "window-unchanged" => {
                sqlx::query_scalar::<_, String>(&window_sql)
                    .bind(session)
                    .bind(10i64)
                    .bind(no_days)
                    .bind(if name == "window" { None } else { version })
                    .fetch_all(&mut tx)
                    .await
            }
            "messages-newest-page" => {
                sqlx::query_scalar::<_, String>(&messages_sql(Order::Desc, false))
                    .bind(no_days)
                    .bind(session)
                    .bind(None::<chrono::DateTime<chrono::Utc>>)
                    .bind(None::<i64>)
                    .bind(11i64)
                    .fetch_all(&mut tx)
                    .await
            }
            // A cursor in the middle of the session's history.
            "messages-deep-page" => {
                sqlx::query_scalar::<_, String>(&messages_sql(Order::Asc, true))
                    .bind(no_days)
                    .bind(session)
                    .bind(Some(deep))
                    .bind(Some(0i64))
                    .bind(101i64)
                    .fetch_all(&mut tx)
                    .await
            }
            _ => {
                sqlx::query_scalar::<_, String>(&sessions_sql)
                    .bind(no_days)
                    .bind(None::<&str>)
                    .bind(None::<chrono::DateTime<chrono::Utc>>)
                    .bind(None::<&str>)
                    .bind(51i64)
                    .fetch_all(&mut tx)
                    .await
            }
        };
        let lines = query.map_err(|e| format!("{name}: {e}"))?;
        // The plan a request runs once PostgreSQL settles on a generic plan for the prepared
        // statement (after five executions), which knows no parameter value: where it differs
        // from the plan above, a cost that grows with the data can hide.
        let statement = match name {
            "archive-one-message" => Some(store::ARCHIVE_SQL.to_owned()),
            "window" => Some(store::WINDOW_SQL.to_owned()),
            "messages-newest-page" => Some(store::messages_sql(Order::Desc, false).to_owned()),
            "messages-deep-page" => Some(store::messages_sql(Order::Asc, true).to_owned()),
            "sessions-list" => Some(store::sessions_sql()),
            _ => None,
        };
        let generic = match statement {
            // Runtime, and over the simple protocol: a statement with parameters and no values
            // for them is what `GENERIC_PLAN` plans; a prepared one would ask for the values.
            Some(sql) => {
                let explain = format!("EXPLAIN (GENERIC_PLAN, COSTS OFF) {sql}");
                let rows = sqlx::raw_sql(&explain)
                    .fetch_all(&mut tx)
                    .await
                    .map_err(|e| format!("{name} (generic): {e}"))?;
                let lines: Result<Vec<String>, _> =
                    rows.iter().map(|r| sqlx::Row::try_get(r, 0)).collect();
                Some(lines.map_err(|e| format!("{name} (generic): {e}"))?)
            }
            None => None,
        };
        tx.rollback().await.map_err(|e| e.to_string())?;
        let path = dir.join(format!("{name}.txt"));
        std::fs::write(&path, lines.join("\n") + "\n").map_err(|e| e.to_string())?;
        written.push(path.display().to_string());
        if let Some(generic) = generic {
            let path = dir.join(format!("{name}.generic.txt"));
            std::fs::write(&path, generic.join("\n") + "\n").map_err(|e| e.to_string())?;
            written.push(path.display().to_string());
        }
    }
    // The statements that functions called in one call run: a key read (its first 8 KB page, by
    // bytes, of the loaded history's middle memory), a notes read that names a row it does not
    // match, so that the text is read, and the archive of a group of 16 one-message archives to
    // 16 sessions (written, then rolled back).
    let group = group_arguments(16, &text);
    // Each: the file, the function, where its statement stands in the function's source, the
    // parameter types, the arguments.
    let reads: [(&str, &str, Statement, &str, &str); 3] = [
        (
            "memory-read",
            "mnemo_read_memory",
            Statement {
                after: &["ELSE", "RETURN QUERY"],
                end: ";",
            },
            "text, boolean, bigint, bigint, boolean, bigint, text, text",
            "'detail-50000', false, 0, 8192, false, 32768, current_setting('mnemo.tenant'), \
             current_setting('mnemo.user')",
        ),
        (
            "notes-read",
            "mnemo_read_notes",
            Statement {
                after: &["RETURN QUERY"],
                end: ";",
            },
            "text, bigint, bigint, text, text",
            "'bench', -1, -1, current_setting('mnemo.tenant'), current_setting('mnemo.user')",
        ),
        (
            // The statement the group runs in its loop over the answers.
            "archive-group",
            "mnemo_write_archives",
            Statement {
                after: &["FOR r IN"],
                end: "\n        LOOP",
            },
            "text[], text[], uuid[], timestamptz[], timestamptz[], int[], int[], text[], text[], \
             text[], timestamptz[], jsonb[], text[], timestamptz[], int[], text[], timestamptz[], \
             boolean",
            &group,
        ),
    ];
    for (name, function, statement, types, args) in reads {
        let plan = function_plan(&db, &principal, function, statement, types, args).await?;
        let path = dir.join(format!("{name}.txt"));
        std::fs::write(&path, plan.join("\n") + "\n").map_err(|e| e.to_string())?;
        written.push(path.display().to_string());
    }
    println!("explain user={user} wrote {}", written.join(" "));
    Ok(())
}

/// The arguments of `mnemo_write_archives` but the last two (the queue off), as SQL: `archives`
/// archives of one message each (`text`) to as many sessions of the loaded history.
fn group_arguments(archives: usize, text: &str) -> String {
    let list = |item: &dyn Fn(usize) -> String, of: &str| {
        let items: Vec<String> = (1..=archives).map(item).collect();
        format!("ARRAY[{}]::{of}[]", items.join(", "))
    };
    let every = |value: &str, of: &str| list(&|_| value.to_owned(), of);
    let at = "'2026-11-21T12:00:00Z'";
    [
        list(&|i| format!("'s{i}'"), "text"),
        every("'assistant'", "text"),
        every("gen_random_uuid()", "uuid"),
        every(at, "timestamptz"),
        every(at, "timestamptz"),
        every("1", "int"),
        list(&|i| i.to_string(), "int"),
        list(&|i| format!("'explain-group-{i}'"), "text"),
        every("'user'", "text"),
        every(&format!("'{}'", text.replace('\'', "''")), "text"),
        every(at, "timestamptz"),
        every("NULL", "jsonb"),
        every("NULL", "text"),
        every("NULL", "timestamptz"),
        every("0", "int"),
        "'{}'::text[]".to_owned(),
        "'{}'::timestamptz[]".to_owned(),
        "false".to_owned(),
    ]
    .join(", ")
}

/// `statement` with each of `names` that stands as a word of its own (not inside a longer name,
/// a quoted string or a `--` comment, nor qualified by a table) written as `$1`, `$2`, ... in
/// their order: a PL/pgSQL function's statement as a prepared statement.
fn positional(statement: &str, names: &[String]) -> String {
    let mut out = String::with_capacity(statement.len());
    let mut word = String::new();
    let mut chars = statement.chars().peekable();
    let flush = |word: &mut String, out: &mut String| {
        // A qualified name (`t.name`) is a column, not the parameter.
        match names.iter().position(|n| n == word.as_str()) {
            Some(i) if !out.ends_with('.') => out.push_str(&format!("${}", i + 1)),
            _ => out.push_str(word),
        }
        word.clear();
    };
    while let Some(c) = chars.next() {
        if c.is_alphanumeric() || c == '_' || c == '$' {
            word.push(c);
            continue;
        }
        flush(&mut word, &mut out);
        out.push(c);
        // A string or a comment is copied as it is, to its end.
        let end = match c {
            '\'' => '\'',
            '-' if chars.peek() == Some(&'-') => '\n',
            _ => continue,
        };
        for c in chars.by_ref() {
            out.push(c);
            if c == end {
                break;
            }
        }
    }
    flush(&mut word, &mut out);
    out
}

/// Where a statement stands in a function's source: after each of `after` in turn, up to `end`.
struct Statement<'a> {
    after: &'a [&'a str],
    end: &'a str,
}

impl Statement<'_> {
    /// The statement's text in `source`, if the markers are there.
    fn find<'s>(&self, source: &'s str) -> Option<&'s str> {
        let start = self.after.iter().try_fold(source, |rest, marker| {
            rest.split_once(marker).map(|(_, r)| r)
        })?;
        start.split_once(self.end).map(|(statement, _)| statement)
    }
}

/// The plan of a statement a function runs: taken from the function's source in the database
/// (`statement` finds it; the function's parameter names in it become positions), prepared with
/// the function's parameter types and run with `args` on a generic plan (as the function runs
/// it), as the caller, through a scoped transaction, then rolled back.
async fn function_plan(
    db: &mnemo::db::Db,
    principal: &mnemo::auth::Principal,
    function: &str,
    statement: Statement<'_>,
    types: &str,
    args: &str,
) -> Result<Vec<String>, String> {
    let failed = |e: &dyn std::fmt::Display| format!("{function}: {e}");
    let mut tx = db.scoped(principal).await.map_err(|e| e.to_string())?;
    // Runtime: a catalog read, not part of the schema the statement macros are checked against.
    let (source, names): (String, Vec<String>) = sqlx::query_as(
        "SELECT prosrc, coalesce((proargnames)[1:pronargs], '{}') FROM pg_proc WHERE proname = $1",
    )
    .bind(function)
    .fetch_one(&mut tx)
    .await
    .map_err(|e| failed(&e))?;
    let read = statement
        .find(&source)
        .map(|statement| positional(statement.trim(), &names))
        .ok_or_else(|| failed(&"no such statement in its source"))?;
    let steps = [
        format!("PREPARE mnemo_explain_read ({types}) AS {read}"),
        "SET LOCAL plan_cache_mode = force_generic_plan".to_owned(),
    ];
    for step in &steps {
        // Runtime: the statement text is the function's own, read above.
        sqlx::raw_sql(step)
            .execute(&mut tx)
            .await
            .map_err(|e| failed(&e))?;
    }
    let explain = format!(
        "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, BUFFERS OFF, SUMMARY OFF) \
         EXECUTE mnemo_explain_read({args})"
    );
    let rows = sqlx::raw_sql(&explain)
        .fetch_all(&mut tx)
        .await
        .map_err(|e| failed(&e))?;
    let lines: Result<Vec<String>, _> = rows.iter().map(|r| sqlx::Row::try_get(r, 0)).collect();
    let lines = lines.map_err(|e| failed(&e))?;
    sqlx::raw_sql("DEALLOCATE mnemo_explain_read")
        .execute(&mut tx)
        .await
        .map_err(|e| failed(&e))?;
    tx.rollback().await.map_err(|e| e.to_string())?;
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::positional;

    #[test]
    fn parameter_names_become_positions_outside_strings_and_comments() {
        let names = ["p_ids".to_owned(), "p_id".to_owned(), "p_user".to_owned()];
        let statement = "SELECT p_ids[1], p_id, 'p_id''s p_user' AS p_user_name -- the p_id's\n\
                         FROM t WHERE t.p_id = p_id AND u = p_user AND x = $9";
        assert_eq!(
            positional(statement, &names),
            "SELECT $1[1], $2, 'p_id''s p_user' AS p_user_name -- the p_id's\n\
             FROM t WHERE t.p_id = $2 AND u = $3 AND x = $9"
        );
    }
}
