-- Raw equivalent of POST /api/chat/session/archive_messages with one message, every client into
-- the same session of one user (`-D user=...`): the one call the request sends for an archive
-- written alone (see append.pgbench.sql), each transaction one archive.
\set s 0
\set n random(1, 2000000000)
SELECT * FROM mnemo_write_archives(
    ARRAY['s' || :s], ARRAY['assistant'], ARRAY[gen_random_uuid()],
    ARRAY['2026-11-21T12:00:00Z'::timestamptz], ARRAY['2026-11-21T12:00:00Z'::timestamptz],
    ARRAY[1], ARRAY[1],
    ARRAY['p' || :n || '-' || :client_id || '-' || floor(random() * 1e9)::text],
    ARRAY[CASE WHEN :n % 2 = 0 THEN 'user' ELSE 'ai' END],
    ARRAY['message ' || :n || ': could you check why the nightly build failed again? The log says the integration tests timed out after the database migration step, and I would like to know whether we should retry it.'],
    ARRAY['2026-11-21T12:00:00Z'::timestamptz], ARRAY[NULL::jsonb], ARRAY[NULL::text],
    ARRAY[NULL::timestamptz], ARRAY[0], '{}'::text[], '{}'::timestamptz[], false, 'bench', :user);
