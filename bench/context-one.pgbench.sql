-- Raw equivalent of POST /api/chat/context with one new message, every client in the same session
-- of one user (`-D user=...`): the scoped transaction, the window read (the cache's version
-- check and the summary state), the notes read and the one-message archive call (in the
-- transaction, as the turn writes it). Recall (a keyword search over the user's history) is left
-- out.
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
SELECT * FROM mnemo_write_archives(
    ARRAY['ctx'], ARRAY['bench'], ARRAY[gen_random_uuid()],
    ARRAY['2026-11-21T12:00:00Z'::timestamptz], ARRAY['2026-11-21T12:00:00Z'::timestamptz],
    ARRAY[1], ARRAY[1], ARRAY['p' || :n || '-' || floor(random() * 1e9)::text], ARRAY['user'],
    ARRAY['what did we decide about the cache and the index in step ' || (:n % 1000) || '?'],
    ARRAY['2026-11-21T12:00:00Z'::timestamptz], ARRAY[NULL::jsonb], ARRAY[NULL::text],
    ARRAY[NULL::timestamptz], ARRAY[0], '{}'::text[], '{}'::timestamptz[], false,
    current_setting('mnemo.tenant'), current_setting('mnemo.user'));
COMMIT;
