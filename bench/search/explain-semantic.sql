-- The vector side of POST /api/memories/search (vector_candidates in
-- src/memories/search/sides.rs), as the server runs it: a prepared statement in a transaction
-- scoped to one user, with hnsw.iterative_scan = relaxed_order, asking for 3 × 100 nearest chunks.
BEGIN;
SET LOCAL role mnemo_app;
SELECT set_config('mnemo.tenant', 'bench', true), set_config('mnemo.user', :'user', true) \g /dev/null
SET LOCAL hnsw.iterative_scan = relaxed_order;
PREPARE semantic(vector, text, bool, text, text, text, timestamptz, timestamptz, jsonb, uuid[], int8) AS
WITH mem AS (
     SELECT id, summary_tsv FROM agent_memories
     WHERE tenant_id = current_setting('mnemo.tenant')
       AND user_id = current_setting('mnemo.user')
       AND ($3 OR is_active)
       AND ($4::text IS NULL OR agent_id = $4)
       AND ($5::text IS NULL OR thread_id = $5)
       AND ($6::text IS NULL OR memory_type = $6)
       AND ($7::timestamptz IS NULL OR created_at >= $7)
       AND ($8::timestamptz IS NULL OR created_at < $8)
       AND ($9::jsonb IS NULL OR content_metadata @> $9)), near AS (
             SELECT v.memory_id, v.byte_start, 1 - (v.embedding::vector(:dims) <=> $1::vector(:dims)) AS score
             FROM memory_vectors v
             WHERE v.tenant_id = current_setting('mnemo.tenant')
               AND v.user_id = current_setting('mnemo.user')
               AND v.model = $2
               AND v.memory_id IN (SELECT id FROM mem)
               AND ($10::uuid[] IS NULL OR v.memory_id = ANY($10))
             ORDER BY (v.embedding::vector(:dims) <=> $1::vector(:dims))
             LIMIT $11
         )
         SELECT DISTINCT ON (memory_id) memory_id, byte_start, score::real AS score FROM near
         ORDER BY memory_id, score DESC;
\echo memory vector search: user :user, a random unit query vector
\echo first execution (a custom plan):
EXPLAIN (ANALYZE, BUFFERS)
EXECUTE semantic(:'qvec', :'model', false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 300);
EXECUTE semantic(:'qvec', :'model', false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 300) \g /dev/null
EXECUTE semantic(:'qvec', :'model', false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 300) \g /dev/null
EXECUTE semantic(:'qvec', :'model', false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 300) \g /dev/null
EXECUTE semantic(:'qvec', :'model', false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 300) \g /dev/null
EXECUTE semantic(:'qvec', :'model', false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 300) \g /dev/null
\echo seventh execution (the plan a pooled server connection settles on):
EXPLAIN (ANALYZE, BUFFERS)
EXECUTE semantic(:'qvec', :'model', false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 300);
ROLLBACK;
