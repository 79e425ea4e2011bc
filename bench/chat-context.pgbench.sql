-- Raw equivalent of POST /api/chat/context with one new message: the window read (the cache's
-- version check), the one-message archive call (which acts as the client's user) and the notes
-- read, as one transaction.
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
SELECT * FROM mnemo_write_archives(
    ARRAY['ctx'], ARRAY['bench'], ARRAY[gen_random_uuid()], ARRAY[now()], ARRAY[now()],
    ARRAY[1], ARRAY[1], ARRAY['c' || :n || '-' || floor(random() * 1e9)::text], ARRAY['user'],
    ARRAY['what did we decide?'],
    ARRAY[now()], ARRAY[NULL::jsonb], ARRAY[NULL::text], ARRAY[NULL::timestamptz],
    ARRAY[0], '{}'::text[], '{}'::timestamptz[], false, 'bench', 'pgbench-ctx-' || :client_id);
SELECT notes, version, created_at, updated_at FROM agent_long_term_memory
WHERE tenant_id = 'bench' AND user_id = 'pgbench-ctx-' || :client_id AND agent_name = 'bench';
COMMIT;
