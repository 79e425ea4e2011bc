-- Reads in one call. The hottest reads (a page of a memory, a page of a session's messages, an
-- agent's notes) are
-- each one function that first acts as the caller and then reads, so a request sends one
-- statement outside any transaction block: no BEGIN, no separate scope statement, no rollback.
-- The settings are transaction-local, and the transaction is the call's own, so they end with
-- it. The functions run with the caller's rights (no SECURITY DEFINER): after mnemo_act_as the
-- read runs as mnemo_app, under the same row-level security as every request.

-- Acts as a user for the rest of the transaction: the role every request runs as, and the
-- tenant and user the row-level-security policies compare with. The same three settings a
-- request's transaction makes.
CREATE FUNCTION mnemo_act_as(p_tenant text, p_user text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('role', 'mnemo_app', true),
            set_config('mnemo.tenant', p_tenant, true),
            set_config('mnemo.user', p_user, true);
END
$$;

-- A page of memory $1: the memory row with each chunk of the page, ordered by `byte_start`
-- (none past the end; an inactive memory's chunks only with $5).
--   By bytes ($2 false): the chunks overlapping [$3, $3 + $4). A chunk overlapping the page
--   starts after $3 - 16384 (the chunk size), which keeps the scan to the few index entries
--   around the page.
--   By lines ($2 true): `f` is the first chunk holding line $3; then the chunks from there up to
--   the page's last line ($3 + $4 - 1) or $6 bytes past that chunk, whichever comes first.
-- The chunk lookups are fenced (`OFFSET 0`): the chunks are looked up by the memory's id in every
-- plan. Pulled up into the join, a generic plan made after reads of a small history could scan
-- all of a user's chunks in the byte range (92 ms among 137,000 chunks instead of 0.2 ms).
CREATE FUNCTION mnemo_read_memory(
    p_key text, p_by_lines boolean, p_start bigint, p_size bigint, p_include_inactive boolean,
    p_cap bigint, p_tenant text, p_user text)
RETURNS TABLE (summary text, is_active boolean, size_bytes bigint, line_count bigint,
               token_count bigint, chunk_byte_start bigint, chunk_line_start bigint,
               chunk_content text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    PERFORM mnemo_act_as(p_tenant, p_user);
    IF $2 THEN
        RETURN QUERY
        SELECT m.summary, m.is_active, m.size_bytes, m.line_count, m.token_count,
               c.byte_start, c.line_start, c.content
        FROM agent_memories m
        LEFT JOIN LATERAL (
            SELECT byte_start AS first FROM agent_memory_chunks f
            WHERE f.tenant_id = m.tenant_id AND f.user_id = m.user_id
              AND f.memory_id = m.id AND f.line_end >= $3
            ORDER BY f.line_end, f.byte_start LIMIT 1
        ) f ON true
        LEFT JOIN LATERAL (
            SELECT byte_start, line_start, content FROM agent_memory_chunks c
            WHERE c.tenant_id = m.tenant_id AND c.user_id = m.user_id
              AND c.memory_id = m.id AND (m.is_active OR $5)
              AND c.byte_start >= f.first AND c.byte_start < f.first + $6
              AND c.line_end >= $3 AND c.line_start <= $3 + $4 - 1
            OFFSET 0
        ) c ON true
        WHERE m.tenant_id = current_setting('mnemo.tenant')
          AND m.user_id = current_setting('mnemo.user') AND m.memory_key = $1
        ORDER BY c.byte_start;
    ELSE
        RETURN QUERY
        SELECT m.summary, m.is_active, m.size_bytes, m.line_count, m.token_count,
               c.byte_start, c.line_start, c.content
        FROM agent_memories m
        LEFT JOIN LATERAL (
            SELECT byte_start, line_start, content FROM agent_memory_chunks c
            WHERE c.tenant_id = m.tenant_id AND c.user_id = m.user_id
              AND c.memory_id = m.id AND (m.is_active OR $5)
              AND c.byte_start > $3 - 16384 AND c.byte_start < $3 + $4
              AND c.byte_start + c.byte_len > $3
            OFFSET 0
        ) c ON true
        WHERE m.tenant_id = current_setting('mnemo.tenant')
          AND m.user_id = current_setting('mnemo.user') AND m.memory_key = $1
        ORDER BY c.byte_start;
    END IF;
END
$$;

-- A page of session $2's unexpired messages (retention $1 days, NULL for none) after the keyset
-- cursor ($3, $4), at most $5, newest first when $6. No row when the session does not exist (or
-- has expired), one row of NULLs when the page is empty. Through the session row, so that the
-- messages are read along `conversation_messages_by_time` in every plan.
CREATE FUNCTION mnemo_read_messages(
    p_retention_days int, p_session text, p_after_at timestamptz, p_after_seq bigint,
    p_limit bigint, p_newest_first boolean, p_tenant text, p_user text)
RETURNS TABLE (message_id text, sender text, text text, sent_at timestamptz,
               archived_at timestamptz, tool_calls jsonb, tool_call_id text, seq bigint,
               edited_at timestamptz)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    PERFORM mnemo_act_as(p_tenant, p_user);
    IF $6 THEN
        RETURN QUERY
        SELECT c.message_id, c.sender, c.text, c.sent_at, c.archived_at, c.tool_calls,
               c.tool_call_id, c.seq, c.edited_at
        FROM agent_sessions s
        LEFT JOIN LATERAL (
            SELECT * FROM conversation_messages c
            WHERE c.tenant_id = s.tenant_id AND c.user_id = s.user_id
              AND c.session_id = s.session_id
              AND ($1::int IS NULL OR c.archived_at >= now() - make_interval(days => $1::int))
              AND ($3::timestamptz IS NULL OR (c.sent_at, c.seq) < ($3, $4))
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
              AND ($3::timestamptz IS NULL OR (c.sent_at, c.seq) > ($3, $4))
            ORDER BY c.sent_at ASC, c.seq ASC
            LIMIT $5
        ) c ON true
        WHERE s.session_id = $2
          AND ($1::int IS NULL OR s.last_activity_at >= now() - make_interval(days => $1::int))
        ORDER BY c.sent_at ASC, c.seq ASC;
    END IF;
END
$$;

-- The notes of agent $1 (no row when never written).
CREATE FUNCTION mnemo_read_notes(p_agent text, p_tenant text, p_user text)
RETURNS TABLE (notes text, version bigint, created_at timestamptz, updated_at timestamptz)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    PERFORM mnemo_act_as(p_tenant, p_user);
    RETURN QUERY
    SELECT n.notes, n.version, n.created_at, n.updated_at FROM agent_long_term_memory n
    WHERE n.tenant_id = current_setting('mnemo.tenant')
      AND n.user_id = current_setting('mnemo.user') AND n.agent_name = $1;
END
$$;
