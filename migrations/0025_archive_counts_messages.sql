-- A session's count of messages ever archived is kept by the archive statement itself: the
-- session's upsert, which already moves its version and activity on, adds the messages the
-- statement inserted. It replaces the statement trigger that counted them, which updated the
-- session row a second time in every archive and ran a plan of its own (an archive cost
-- PostgreSQL about twice the CPU with it). The statement is otherwise unchanged; the other
-- statement that adds messages, an import's, counts them the same way.
DROP TRIGGER conversation_messages_count ON conversation_messages;
DROP FUNCTION mnemo_count_session_messages();

CREATE OR REPLACE FUNCTION mnemo_write_archive(
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
    WITH incoming AS (
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
    ), session AS (
        -- The session's one row change: created, or its version and activity moved on, and
        -- its count of messages ever archived raised by the new ones (the messages' foreign
        -- key is checked when the statement ends, by which time the session exists).
        INSERT INTO agent_sessions AS s (tenant_id, user_id, session_id, agent_name, message_count)
        SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user'), $1, $2, count(*)::int
        FROM inserted
        ON CONFLICT (tenant_id, user_id, session_id)
        DO UPDATE SET last_activity_at = now(), version = s.version + 1,
                      message_count = s.message_count + EXCLUDED.message_count
        RETURNING s.version, s.message_count, s.summary_message_count
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
           (SELECT message_count FROM session) AS "message_count!",
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
