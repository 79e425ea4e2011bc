-- Raw equivalent of GET /api/chat/sessions/{id}/messages?order=desc&limit=10 on a random one of the
-- first 100 sessions of one user (`-D user=...`): the scoped transaction and the one statement of
-- the page (the session row with the page joined to it); the read ends with a rollback.
\set s random(0, 99)
BEGIN;
SELECT set_config('role', 'mnemo_app', true), set_config('mnemo.tenant', 'bench', true), set_config('mnemo.user', :user, true);
SELECT m.message_id, m.sender, m.text, m.sent_at, m.archived_at, m.tool_calls, m.tool_call_id, m.seq, m.edited_at
FROM agent_sessions s
LEFT JOIN LATERAL (
    SELECT c.message_id, c.sender, c.text, c.sent_at, c.archived_at, c.tool_calls, c.tool_call_id, c.seq, c.edited_at
    FROM conversation_messages c
    WHERE c.tenant_id = s.tenant_id AND c.user_id = s.user_id AND c.session_id = s.session_id
      AND (NULL::int IS NULL OR c.archived_at >= now() - make_interval(days => NULL::int))
      AND (NULL::timestamptz IS NULL OR (c.sent_at, c.seq) < (NULL, NULL))
    ORDER BY c.sent_at DESC, c.seq DESC
    LIMIT 11
) m ON true
WHERE s.session_id = 's' || :s::int AND (NULL::int IS NULL OR s.last_activity_at >= now() - make_interval(days => NULL::int))
ORDER BY m.sent_at DESC, m.seq DESC;
ROLLBACK;
