-- Raw equivalent of POST /api/chat/context with one new message, every client in the same session
-- of one user (`-D user=...`): the scoped transaction, the window read (the cache's version
-- check and the summary state), the notes read and the one-message archive statement. Recall (a
-- keyword search over the user's history) is left out.
\set n random(1, 2000000000)
BEGIN;
SELECT set_config('role', 'mnemo_app', true), set_config('mnemo.tenant', 'bench', true), set_config('mnemo.user', :user, true);
SELECT s.version, s.summary, s.message_count, s.summary_message_count, m.message_id, m.sender, m.text, m.sent_at, m.archived_at, m.tool_calls, m.tool_call_id
FROM agent_sessions s
LEFT JOIN LATERAL (
    SELECT c.message_id, c.sender, c.text, c.sent_at, c.seq, c.archived_at, c.tool_calls, c.tool_call_id
    FROM conversation_messages c
    WHERE c.tenant_id = s.tenant_id AND c.user_id = s.user_id AND c.session_id = s.session_id
    ORDER BY c.sent_at DESC, c.seq DESC
    LIMIT 10
) m ON true
WHERE s.session_id = 'ctx'
ORDER BY m.sent_at, m.seq;
SELECT notes, version, created_at, updated_at FROM agent_long_term_memory WHERE agent_name = 'bench';
WITH session AS (
    INSERT INTO agent_sessions AS s (tenant_id, user_id, session_id, agent_name)
    VALUES (current_setting('mnemo.tenant'), current_setting('mnemo.user'), 'ctx', 'bench')
    ON CONFLICT (tenant_id, user_id, session_id)
    DO UPDATE SET last_activity_at = now(), version = s.version + 1
    RETURNING s.version
), inserted AS (
    INSERT INTO conversation_messages
        (tenant_id, user_id, session_id, message_id, sender, text, sent_at)
    SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user'), 'ctx',
           'p' || :n::int || '-' || floor(random() * 1e9)::text, 'user',
           'what did we decide about the cache and the index in step ' || (:n::int % 1000) || '?',
           '2026-11-21T12:00:00Z'
    ON CONFLICT DO NOTHING
    RETURNING message_id, seq, archived_at, sender, text
), batch AS (
    INSERT INTO recent_conversation_history
        (tenant_id, user_id, id, session_id, start_timestamp, end_timestamp,
         message_count, new_count, duplicate_count, updated_count, deleted_count)
    SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user'), gen_random_uuid(), 'ctx',
           '2026-11-21T12:00:00Z', '2026-11-21T12:00:00Z', 1, n.new, 1 - n.new, 0, 0
    FROM (SELECT count(*)::int AS new FROM inserted) n
)
SELECT (SELECT version FROM session) AS version,
       COALESCE((SELECT array_agg(message_id ORDER BY seq) FROM inserted), '{}') AS new_ids,
       (SELECT max(archived_at) FROM inserted) AS archived_at;
COMMIT;
