-- Raw equivalent of POST /api/chat/session/archive_messages with one message into a random one of
-- 1,000 sessions of one user (`-D user=...`): the scoped transaction and the service's archive
-- statement, prepared. `append-one` is the same SQL on one session.
\set s random(0, 999)
\set n random(1, 2000000000)
BEGIN;
SELECT set_config('role', 'mnemo_app', true), set_config('mnemo.tenant', 'bench', true), set_config('mnemo.user', :user, true);
WITH inserted AS (
    INSERT INTO conversation_messages
        (tenant_id, user_id, session_id, message_id, sender, text, sent_at)
    SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user'), 's' || :s::int,
           'p' || :n::int || '-' || floor(random() * 1e9)::text, 'user',
           'message ' || :n::int || ': could you check why the nightly build failed again? The log says the integration tests timed out after the database migration step, and I would like to know whether we should retry it.',
           '2026-11-21T12:00:00Z'
    ON CONFLICT DO NOTHING
    RETURNING message_id, seq, archived_at, sender, text
), session AS (
    INSERT INTO agent_sessions AS s (tenant_id, user_id, session_id, agent_name, message_count)
    SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user'), 's' || :s::int, 'assistant', count(*)::int
    FROM inserted
    ON CONFLICT (tenant_id, user_id, session_id)
    DO UPDATE SET last_activity_at = now(), version = s.version + 1,
                  message_count = s.message_count + EXCLUDED.message_count
    RETURNING s.version
), batch AS (
    INSERT INTO recent_conversation_history
        (tenant_id, user_id, id, session_id, start_timestamp, end_timestamp,
         message_count, new_count, duplicate_count, updated_count, deleted_count)
    SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user'), gen_random_uuid(), 's' || :s::int,
           '2026-11-21T12:00:00Z', '2026-11-21T12:00:00Z', 1, n.new, 1 - n.new, 0, 0
    FROM (SELECT count(*)::int AS new FROM inserted) n
)
SELECT (SELECT version FROM session) AS version,
       COALESCE((SELECT array_agg(message_id ORDER BY seq) FROM inserted), '{}') AS new_ids,
       (SELECT max(archived_at) FROM inserted) AS archived_at;
COMMIT;
