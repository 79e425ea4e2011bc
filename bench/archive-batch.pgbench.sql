-- Raw equivalent of POST /api/chat/session/archive_messages with a 20-message batch: the one call
-- the request sends, which acts as the client's user and writes the archive as its own
-- transaction (the session upsert, the messages' multi-row upsert, the batch record). A new
-- session per transaction, as mnemo-bench sends.
\set n random(1, 2000000000)
\set r random(1, 1000000000)
SELECT * FROM mnemo_write_archives(
    ARRAY['pg-' || :n || '-' || :r], ARRAY['assistant'], ARRAY[gen_random_uuid()],
    ARRAY['2026-11-21T12:00:00Z'::timestamptz], ARRAY['2026-11-21T12:00:00Z'::timestamptz],
    ARRAY[20], ARRAY[20],
    ARRAY(SELECT 'm' || i FROM generate_series(0, 19) i),
    ARRAY(SELECT CASE WHEN i % 2 = 0 THEN 'user' ELSE 'ai' END FROM generate_series(0, 19) i),
    ARRAY(SELECT 'message ' || i || ' of the bench conversation' FROM generate_series(0, 19) i),
    array_fill('2026-11-21T12:00:00Z'::timestamptz, ARRAY[20]), array_fill(NULL::jsonb, ARRAY[20]),
    array_fill(NULL::text, ARRAY[20]), array_fill(NULL::timestamptz, ARRAY[20]),
    ARRAY[0], '{}'::text[], '{}'::timestamptz[], false, 'bench', 'pgbench-' || :client_id);
