-- Writes in one call. Storing a new memory, and archiving a batch of messages when no other
-- archive of the user is waiting to share a transaction, are each one function that first acts
-- as the caller and then writes, so the request sends one statement outside any transaction block: no BEGIN, no
-- separate scope statement, no COMMIT. The call is its own transaction: it commits when the
-- statement ends, and the transaction-local settings end with it. Like the read functions, it
-- runs with its caller's rights (no SECURITY DEFINER), under row-level security as mnemo_app.

-- A new memory under p_key with its chunks (the columns of each chunk as parallel arrays), queued
-- for the embedder when p_queue; no row when the caller already has a memory under p_key.
CREATE FUNCTION mnemo_write_memory(
    p_id uuid, p_key text, p_agent text, p_thread text, p_type text, p_summary text,
    p_metadata jsonb, p_size bigint, p_lines bigint, p_tokens bigint, p_sha256 text,
    p_chunk_count int, p_byte_starts bigint[], p_byte_lens int[], p_line_starts bigint[],
    p_line_ends bigint[], p_texts text[], p_queue boolean, p_tenant text, p_user text)
RETURNS TABLE (version int, created_at timestamptz, updated_at timestamptz)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    PERFORM mnemo_act_as(p_tenant, p_user);
    RETURN QUERY
    WITH m AS (
        INSERT INTO agent_memories (tenant_id, user_id, id, memory_key, agent_id, thread_id,
            memory_type, summary, content_metadata, size_bytes, line_count, token_count,
            content_sha256, chunk_count)
        VALUES (current_setting('mnemo.tenant'), current_setting('mnemo.user'), p_id, p_key,
            p_agent, p_thread, p_type, p_summary, p_metadata, p_size, p_lines, p_tokens,
            p_sha256, p_chunk_count)
        ON CONFLICT (tenant_id, user_id, memory_key) DO NOTHING
        RETURNING tenant_id, user_id, id, version, created_at, updated_at
    ), c AS (
        INSERT INTO agent_memory_chunks (tenant_id, user_id, memory_id, byte_start, byte_len,
            line_start, line_end, content)
        SELECT m.tenant_id, m.user_id, m.id, u.byte_start, u.byte_len, u.line_start,
            u.line_end, u.content
        FROM m, unnest(p_byte_starts, p_byte_lens, p_line_starts, p_line_ends, p_texts)
            AS u(byte_start, byte_len, line_start, line_end, content)
    ), o AS (
        INSERT INTO embedding_outbox (tenant_id, user_id, kind, memory_id)
        SELECT m.tenant_id, m.user_id, 'memory', m.id FROM m WHERE p_queue
    )
    SELECT m.version, m.created_at, m.updated_at FROM m;
END
$$;

-- The archive of one batch into session $1 (the conversation store's archive statement, the
-- same text; a test compares them), with its parameters $1..$16 in the statement's order. Without
-- an embedder ($13 false), vectors a former embedder made of the updated messages' old text are
-- deleted in the same transaction (the table exists only with pgvector, hence the dynamic
-- statement).
CREATE FUNCTION mnemo_write_archive(
    p_session text, p_agent text, p_ids text[], p_senders text[], p_texts text[],
    p_sent_at timestamptz[], p_tool_calls jsonb[], p_tool_call_ids text[], p_batch uuid,
    p_start timestamptz, p_end timestamptz, p_received int, p_queue boolean,
    p_edited_at timestamptz[], p_deleted_ids text[], p_deleted_edited_at timestamptz[],
    p_tenant text, p_user text)
RETURNS TABLE (version bigint, new_ids text[], updated_ids text[], deleted_ids text[],
               archived_at timestamptz, message_count int, summary_covers int)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    r record;
BEGIN
    PERFORM mnemo_act_as(p_tenant, p_user);
    WITH session AS (
        INSERT INTO agent_sessions AS s (tenant_id, user_id, session_id, agent_name)
        VALUES (current_setting('mnemo.tenant'), current_setting('mnemo.user'), $1, $2)
        ON CONFLICT (tenant_id, user_id, session_id)
        DO UPDATE SET last_activity_at = now(), version = s.version + 1
        RETURNING s.version, s.message_count, s.summary_message_count
    ), incoming AS (
        SELECT * FROM unnest($3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::jsonb[],
                             $8::text[], $14::timestamptz[])
             WITH ORDINALITY AS m(id, sender, text, sent_at, tool_calls, tool_call_id, edited_at, ord)
    ), upserted AS (
        -- One upsert through the primary key: each message of the batch is looked up by its id,
        -- however long the session; a stored one is updated only when its content differs and the
        -- stored state is not newer (`edited_at`). `xmax = 0` marks the rows this statement inserted.
        INSERT INTO conversation_messages AS c
            (tenant_id, user_id, session_id, message_id, sender, text, sent_at, tool_calls,
             tool_call_id, edited_at)
        SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user'), $1,
               m.id, m.sender, m.text, m.sent_at, m.tool_calls, m.tool_call_id, m.edited_at
        FROM incoming m
        ORDER BY m.ord
        ON CONFLICT (tenant_id, user_id, session_id, message_id) DO UPDATE
        SET sender = EXCLUDED.sender, text = EXCLUDED.text, tool_calls = EXCLUDED.tool_calls,
            tool_call_id = EXCLUDED.tool_call_id, edited_at = EXCLUDED.edited_at
        WHERE (c.sender, c.text, c.tool_calls, c.tool_call_id)
              IS DISTINCT FROM (EXCLUDED.sender, EXCLUDED.text, EXCLUDED.tool_calls, EXCLUDED.tool_call_id)
          AND (c.edited_at IS NULL OR EXCLUDED.edited_at >= c.edited_at)
        RETURNING c.message_id, c.seq, c.archived_at, c.sender, c.text, c.sent_at, c.xmax = 0 AS fresh
    ), inserted AS (
        SELECT message_id, seq, archived_at, sender, text FROM upserted WHERE fresh
    ), updated AS (
        SELECT message_id, seq, sent_at FROM upserted WHERE NOT fresh
    ), removed AS (
        DELETE FROM conversation_messages c
        USING unnest($15::text[], $16::timestamptz[]) AS d(id, edited_at)
        -- Only when the batch deletes something (see `updated`).
        WHERE cardinality($15::text[]) > 0
          AND c.tenant_id = current_setting('mnemo.tenant') AND c.user_id = current_setting('mnemo.user')
          AND c.session_id = $1 AND c.message_id = d.id
          AND (c.edited_at IS NULL OR d.edited_at IS NULL OR d.edited_at >= c.edited_at)
        RETURNING c.message_id, c.seq, c.sent_at
    ), queued AS (
        INSERT INTO embedding_outbox (tenant_id, user_id, kind, session_id, message_id)
        SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user'), 'message', $1, q.id
        FROM (
            SELECT i.message_id AS id FROM inserted i WHERE i.sender IN ('user', 'ai') AND i.text <> ''
            UNION
            SELECT u.message_id FROM updated u
            UNION
            SELECT n.message_id
            FROM (SELECT sent_at, seq FROM updated UNION ALL SELECT sent_at, seq FROM removed) ch
            JOIN LATERAL (
                SELECT p.message_id FROM conversation_messages p
                WHERE p.tenant_id = current_setting('mnemo.tenant')
                  AND p.user_id = current_setting('mnemo.user') AND p.session_id = $1
                  AND (p.sent_at, p.seq) > (ch.sent_at, ch.seq)
                  AND p.sender IN ('user', 'ai') AND p.text <> ''
                ORDER BY p.sent_at, p.seq LIMIT 1
            ) n ON true
        ) q
        WHERE $13
    ), counts AS (
        SELECT (SELECT count(*) FROM inserted)::int AS new,
               (SELECT count(*) FROM updated)::int AS updated,
               (SELECT count(*) FROM removed)::int AS deleted
    ), batch AS (
        INSERT INTO recent_conversation_history
            (tenant_id, user_id, id, session_id, start_timestamp, end_timestamp,
             message_count, new_count, duplicate_count, updated_count, deleted_count)
        SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user'), $9, $1, $10, $11,
               $12, n.new, $12 - n.new - n.updated - n.deleted, n.updated, n.deleted
        FROM counts n
    )
    SELECT (SELECT version FROM session) AS "version!",
           COALESCE((SELECT array_agg(message_id ORDER BY seq) FROM inserted), '{}') AS "new_ids!",
           COALESCE((SELECT array_agg(message_id ORDER BY seq) FROM updated), '{}') AS "updated_ids!",
           COALESCE((SELECT array_agg(message_id ORDER BY seq) FROM removed), '{}') AS "deleted_ids!",
           (SELECT max(archived_at) FROM inserted) AS archived_at,
           (SELECT message_count FROM session) + (SELECT count(*) FROM inserted)::int
               AS "message_count!",
           (SELECT summary_message_count FROM session) AS "summary_covers!" INTO r;
    IF NOT p_queue AND cardinality(r."updated_ids!") > 0
       AND to_regclass('message_vectors') IS NOT NULL THEN
        EXECUTE 'DELETE FROM message_vectors WHERE session_id = $1 AND message_id = ANY($2)'
            USING p_session, r."updated_ids!";
    END IF;
    version := r."version!";
    new_ids := r."new_ids!";
    updated_ids := r."updated_ids!";
    deleted_ids := r."deleted_ids!";
    archived_at := r.archived_at;
    message_count := r."message_count!";
    summary_covers := r."summary_covers!";
    RETURN NEXT;
END
$$;

-- Archives that arrive together, in one call and so one transaction: archive i is
-- (p_sessions[i], p_agents[i], p_batches[i], ...), its messages the slice of the message arrays
-- after the previous archive's end up to p_message_ends[i], its deletions likewise up to
-- p_deletion_ends[i]. Each is written by mnemo_write_archive in order, so each sees the ones
-- before it; one row per archive, in the same order. Any error ends the call with nothing
-- written.
CREATE FUNCTION mnemo_write_archives(
    p_sessions text[], p_agents text[], p_batches uuid[], p_starts timestamptz[],
    p_ends timestamptz[], p_received int[], p_message_ends int[], p_ids text[],
    p_senders text[], p_texts text[], p_sent_at timestamptz[], p_tool_calls jsonb[],
    p_tool_call_ids text[], p_edited_at timestamptz[], p_deletion_ends int[],
    p_deleted_ids text[], p_deleted_edited_at timestamptz[], p_queue boolean, p_tenant text,
    p_user text)
RETURNS TABLE (version bigint, new_ids text[], updated_ids text[], deleted_ids text[],
               archived_at timestamptz, message_count int, summary_covers int)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    m int := 1;
    d int := 1;
BEGIN
    PERFORM mnemo_act_as(p_tenant, p_user);
    FOR i IN 1 .. coalesce(cardinality(p_sessions), 0) LOOP
        RETURN QUERY SELECT * FROM mnemo_write_archive(
            p_sessions[i], p_agents[i], p_ids[m:p_message_ends[i]],
            p_senders[m:p_message_ends[i]], p_texts[m:p_message_ends[i]],
            p_sent_at[m:p_message_ends[i]], p_tool_calls[m:p_message_ends[i]],
            p_tool_call_ids[m:p_message_ends[i]], p_batches[i], p_starts[i], p_ends[i],
            p_received[i], p_queue, p_edited_at[m:p_message_ends[i]],
            p_deleted_ids[d:p_deletion_ends[i]], p_deleted_edited_at[d:p_deletion_ends[i]],
            p_tenant, p_user);
        m := p_message_ends[i] + 1;
        d := p_deletion_ends[i] + 1;
    END LOOP;
END
$$;
