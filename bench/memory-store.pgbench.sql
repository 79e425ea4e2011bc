-- Raw equivalent of POST /api/memories with 1 KB of text: the one call that stores it
-- (mnemo_write_memory: the scope, then the memory row and its one chunk, both full-text indexed,
-- in one statement under row-level security), autocommit. Same text shape as mnemo-bench sends
-- (a text that does not ask: the two flags after the texts).
\set n random(1, 2000000000)
SELECT version FROM mnemo_write_memory(
    gen_random_uuid(), 'pg-' || :client_id || '-' || :n || '-' || floor(random() * 1e9)::text,
    NULL, NULL, 'text', 'bench output 1.0 KB, 15 lines', '{}', 1024, 15, 200, md5(random()::text), 1,
    ARRAY[0]::int8[], ARRAY[1024], ARRAY[1]::int8[], ARRAY[15]::int8[],
    ARRAY[left('bench output ' || :n || E'\n' || repeat(E'line of tool output with some words to index: build ok, tests passed\n', 15), 1024)],
    false, false, false, 'bench', 'pgbench-' || :client_id);
