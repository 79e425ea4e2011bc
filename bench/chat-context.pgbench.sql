-- Raw equivalent of POST /api/chat/context with one new message: the window read (the cache's
-- version check), the one-message archive statement and the notes read, as one transaction.
\set n random(1, 2000000000)
BEGIN;
SELECT s.version, m.message_id, m.sender, m.text, m.sent_at
FROM agent_sessions s
LEFT JOIN LATERAL (
    SELECT c.message_id, c.sender, c.text, c.sent_at, c.seq FROM conversation_messages c
    WHERE c.tenant_id = s.tenant_id AND c.user_id = s.user_id AND c.session_id = s.session_id
    ORDER BY c.sent_at DESC, c.seq DESC LIMIT 10
) m ON true
WHERE s.tenant_id = 'bench' AND s.user_id = 'pgbench-ctx-' || :client_id AND s.session_id = 'ctx'
ORDER BY m.sent_at, m.seq;
WITH session AS (
    INSERT INTO agent_sessions AS s (tenant_id, user_id, session_id, agent_name)
    VALUES ('bench', 'pgbench-ctx-' || :client_id, 'ctx', 'bench')
    ON CONFLICT (tenant_id, user_id, session_id)
    DO UPDATE SET last_activity_at = now(), version = s.version + 1
    RETURNING s.version
), inserted AS (
    INSERT INTO conversation_messages (tenant_id, user_id, session_id, message_id, sender, text, sent_at)
    VALUES ('bench', 'pgbench-ctx-' || :client_id, 'ctx', 'c' || :n || '-' || floor(random() * 1e9)::text,
            'user', 'what did we decide?', now())
    ON CONFLICT DO NOTHING
    RETURNING message_id, seq, archived_at
), batch AS (
    INSERT INTO recent_conversation_history (tenant_id, user_id, id, session_id, start_timestamp,
        end_timestamp, message_count, new_count, duplicate_count)
    SELECT 'bench', 'pgbench-ctx-' || :client_id, gen_random_uuid(), 'ctx', now(), now(), 1, n.count, 1 - n.count
    FROM (SELECT count(*)::int AS count FROM inserted) n
)
SELECT (SELECT version FROM session), (SELECT max(archived_at) FROM inserted);
SELECT notes, version, created_at, updated_at FROM agent_long_term_memory
WHERE tenant_id = 'bench' AND user_id = 'pgbench-ctx-' || :client_id AND agent_name = 'bench';
COMMIT;
