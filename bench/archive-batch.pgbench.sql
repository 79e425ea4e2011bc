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
    ARRAY['m0','m1','m2','m3','m4','m5','m6','m7','m8','m9','m10','m11','m12','m13','m14','m15','m16','m17','m18','m19']::text[],
    ARRAY['user','ai','user','ai','user','ai','user','ai','user','ai','user','ai','user','ai','user','ai','user','ai','user','ai']::text[],
    ARRAY['message 0 of the bench conversation','message 1 of the bench conversation','message 2 of the bench conversation','message 3 of the bench conversation','message 4 of the bench conversation','message 5 of the bench conversation','message 6 of the bench conversation','message 7 of the bench conversation','message 8 of the bench conversation','message 9 of the bench conversation','message 10 of the bench conversation','message 11 of the bench conversation','message 12 of the bench conversation','message 13 of the bench conversation','message 14 of the bench conversation','message 15 of the bench conversation','message 16 of the bench conversation','message 17 of the bench conversation','message 18 of the bench conversation','message 19 of the bench conversation']::text[],
    array_fill('2026-11-21T12:00:00Z'::timestamptz, ARRAY[20]), array_fill(NULL::jsonb, ARRAY[20]),
    array_fill(NULL::text, ARRAY[20]), array_fill(NULL::timestamptz, ARRAY[20]),
    ARRAY[0], '{}'::text[], '{}'::timestamptz[], false, 'bench', 'pgbench-' || :client_id);
