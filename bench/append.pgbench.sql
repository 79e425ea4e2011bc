-- Raw equivalent of POST /api/chat/session/archive_messages with one message into a random one of
-- the sessions of one user (`-D user=...`): 1,000 sessions for `append`, one shared by every
-- client for `append-one` (whose file links here; `-D sessions=...` from each scenario's setup).
-- It runs the one call the request sends for an archive written alone, which acts as the user and
-- writes the archive as its own transaction (the session upsert, the message upsert, the batch
-- record). mnemo writes a user's archives that arrive together in one such call; pgbench's
-- clients cannot share a call, so each transaction here is one archive.
\set s random(0, :sessions - 1)
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
