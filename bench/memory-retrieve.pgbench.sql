-- Raw equivalent of GET /api/memories/{key} (first 8 KB page): the one call the request sends,
-- which acts as the client's user and reads the memory row with the chunks the page overlaps,
-- outside any transaction.
\set i random(0, 49)
SELECT * FROM mnemo_read_memory('pg-get-' || :client_id || '-' || :i, false, 0, 8192, false,
                                32768, 'bench', 'pgbench-get-' || :client_id);
