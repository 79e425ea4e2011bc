-- Raw equivalent of POST /api/chat/session/archive_messages with a 20-message batch: the service's
-- one statement (multi-row INSERT of the messages, the session upsert counting them, the batch
-- record), with literal values, prepared, autocommit, no scoping. A new session per transaction,
-- as mnemo-bench sends.
\set n random(1, 2000000000)
\set r random(1, 1000000000)
WITH inserted AS (
    INSERT INTO conversation_messages
        (tenant_id, user_id, session_id, message_id, sender, text, sent_at, tool_calls, tool_call_id)
    SELECT 'bench', 'pgbench-' || :client_id, 'pg-' || :n || '-' || :r,
           m.id, m.sender, m.text, m.sent_at, NULL, NULL
    FROM unnest(ARRAY['m0','m1','m2','m3','m4','m5','m6','m7','m8','m9','m10','m11','m12','m13','m14','m15','m16','m17','m18','m19']::text[], ARRAY['user','ai','user','ai','user','ai','user','ai','user','ai','user','ai','user','ai','user','ai','user','ai','user','ai']::text[], ARRAY['message 0 of the bench conversation','message 1 of the bench conversation','message 2 of the bench conversation','message 3 of the bench conversation','message 4 of the bench conversation','message 5 of the bench conversation','message 6 of the bench conversation','message 7 of the bench conversation','message 8 of the bench conversation','message 9 of the bench conversation','message 10 of the bench conversation','message 11 of the bench conversation','message 12 of the bench conversation','message 13 of the bench conversation','message 14 of the bench conversation','message 15 of the bench conversation','message 16 of the bench conversation','message 17 of the bench conversation','message 18 of the bench conversation','message 19 of the bench conversation']::text[],
                array_fill('2026-11-21T12:00:00Z'::timestamptz, ARRAY[20]))
         WITH ORDINALITY AS m(id, sender, text, sent_at, ord)
    ORDER BY m.ord
    ON CONFLICT DO NOTHING
    RETURNING message_id, seq, archived_at
), session AS (
    INSERT INTO agent_sessions AS s (tenant_id, user_id, session_id, agent_name, message_count)
    SELECT 'bench', 'pgbench-' || :client_id, 'pg-' || :n || '-' || :r, 'default', count(*)::int
    FROM inserted
    ON CONFLICT (tenant_id, user_id, session_id)
    DO UPDATE SET last_activity_at = now(), version = s.version + 1,
                  message_count = s.message_count + EXCLUDED.message_count
    RETURNING s.version
), batch AS (
    INSERT INTO recent_conversation_history
        (tenant_id, user_id, id, session_id, start_timestamp, end_timestamp,
         message_count, new_count, duplicate_count)
    SELECT 'bench', 'pgbench-' || :client_id, gen_random_uuid(), 'pg-' || :n || '-' || :r,
           '2026-11-21T12:00:00Z', '2026-11-21T12:00:00Z', 20, n.count, 20 - n.count
    FROM (SELECT count(*)::int AS count FROM inserted) n
)
SELECT (SELECT version FROM session) AS version,
       COALESCE((SELECT array_agg(message_id ORDER BY seq) FROM inserted), '{}') AS new_ids,
       (SELECT max(archived_at) FROM inserted) AS archived_at;
