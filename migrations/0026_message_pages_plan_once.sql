-- A page of a session's messages is planned once per connection, not for every call. Left to
-- choose, PostgreSQL planned the page statement anew for each call once the table's statistics
-- made its generic plan's estimate look dear (2.5 times the CPU of a call on a database of 2.6
-- million messages), and a generic plan of the former statement, with an optional cursor, would
-- have filtered a deep page's rows instead of starting at the cursor. So each case is now its
-- own statement (oldest or newest first; the first page, or the page after a keyset cursor,
-- whose comparison is then an index condition), and the function runs them with generic plans.
CREATE OR REPLACE FUNCTION mnemo_read_messages(
    p_retention_days int, p_session text, p_after_at timestamptz, p_after_seq bigint,
    p_limit bigint, p_newest_first boolean, p_tenant text, p_user text)
RETURNS TABLE (message_id text, sender text, text text, sent_at timestamptz,
               archived_at timestamptz, tool_calls jsonb, tool_call_id text, seq bigint,
               edited_at timestamptz)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
    PERFORM mnemo_act_as(p_tenant, p_user);
    IF $6 THEN
        IF $3 IS NULL THEN
            RETURN QUERY
            SELECT c.message_id, c.sender, c.text, c.sent_at, c.archived_at, c.tool_calls,
                   c.tool_call_id, c.seq, c.edited_at
            FROM agent_sessions s
            LEFT JOIN LATERAL (
                SELECT * FROM conversation_messages c
                WHERE c.tenant_id = s.tenant_id AND c.user_id = s.user_id
                  AND c.session_id = s.session_id
                  AND ($1::int IS NULL OR c.archived_at >= now() - make_interval(days => $1::int))
                  AND ($3::timestamptz, $4::int8) IS NULL
                ORDER BY c.sent_at DESC, c.seq DESC
                LIMIT $5
            ) c ON true
            WHERE s.session_id = $2
              AND ($1::int IS NULL OR s.last_activity_at >= now() - make_interval(days => $1::int))
            ORDER BY c.sent_at DESC, c.seq DESC;
        ELSE
            RETURN QUERY
            SELECT c.message_id, c.sender, c.text, c.sent_at, c.archived_at, c.tool_calls,
                   c.tool_call_id, c.seq, c.edited_at
            FROM agent_sessions s
            LEFT JOIN LATERAL (
                SELECT * FROM conversation_messages c
                WHERE c.tenant_id = s.tenant_id AND c.user_id = s.user_id
                  AND c.session_id = s.session_id
                  AND ($1::int IS NULL OR c.archived_at >= now() - make_interval(days => $1::int))
                  AND (c.sent_at, c.seq) < ($3, $4)
                ORDER BY c.sent_at DESC, c.seq DESC
                LIMIT $5
            ) c ON true
            WHERE s.session_id = $2
              AND ($1::int IS NULL OR s.last_activity_at >= now() - make_interval(days => $1::int))
            ORDER BY c.sent_at DESC, c.seq DESC;
        END IF;
    ELSE
        IF $3 IS NULL THEN
            RETURN QUERY
            SELECT c.message_id, c.sender, c.text, c.sent_at, c.archived_at, c.tool_calls,
                   c.tool_call_id, c.seq, c.edited_at
            FROM agent_sessions s
            LEFT JOIN LATERAL (
                SELECT * FROM conversation_messages c
                WHERE c.tenant_id = s.tenant_id AND c.user_id = s.user_id
                  AND c.session_id = s.session_id
                  AND ($1::int IS NULL OR c.archived_at >= now() - make_interval(days => $1::int))
                  AND ($3::timestamptz, $4::int8) IS NULL
                ORDER BY c.sent_at ASC, c.seq ASC
                LIMIT $5
            ) c ON true
            WHERE s.session_id = $2
              AND ($1::int IS NULL OR s.last_activity_at >= now() - make_interval(days => $1::int))
            ORDER BY c.sent_at ASC, c.seq ASC;
        ELSE
            RETURN QUERY
            SELECT c.message_id, c.sender, c.text, c.sent_at, c.archived_at, c.tool_calls,
                   c.tool_call_id, c.seq, c.edited_at
            FROM agent_sessions s
            LEFT JOIN LATERAL (
                SELECT * FROM conversation_messages c
                WHERE c.tenant_id = s.tenant_id AND c.user_id = s.user_id
                  AND c.session_id = s.session_id
                  AND ($1::int IS NULL OR c.archived_at >= now() - make_interval(days => $1::int))
                  AND (c.sent_at, c.seq) > ($3, $4)
                ORDER BY c.sent_at ASC, c.seq ASC
                LIMIT $5
            ) c ON true
            WHERE s.session_id = $2
              AND ($1::int IS NULL OR s.last_activity_at >= now() - make_interval(days => $1::int))
            ORDER BY c.sent_at ASC, c.seq ASC;
        END IF;
    END IF;
END
$$;
