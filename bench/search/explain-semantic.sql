-- The vector side of POST /api/memories/search (vector_candidates in
-- src/memories/search/sides.rs), as the server runs it (copied from the statement log), in a
-- transaction scoped to one user, with hnsw.iterative_scan = relaxed_order, asking for 3 × 100
-- nearest vectors and scoring the best 200 chunks by both their vectors. The server sends it
-- unnamed, so PostgreSQL plans it for its parameters every time: the first plan below is the one
-- it runs; the seventh shows the generic plan it is kept from.
BEGIN;
SET LOCAL role mnemo_app;
SELECT set_config('mnemo.tenant', 'bench', true), set_config('mnemo.user', :'user', true) \g /dev/null
SET LOCAL hnsw.iterative_scan = relaxed_order;
PREPARE semantic(vector, text, bool, text, text, text, timestamptz, timestamptz, jsonb, uuid[], int8, int8) AS
WITH near AS (
             SELECT v.memory_id, v.byte_start, v.with_context, 1 - (v.embedding::vector(:dims) <=> $1::vector(:dims)) AS score
             FROM memory_vectors v
             WHERE v.tenant_id = current_setting('mnemo.tenant')
               AND v.user_id = current_setting('mnemo.user')
               AND v.model = $2
               AND EXISTS (SELECT 1 FROM agent_memories m
                 WHERE m.tenant_id = current_setting('mnemo.tenant')
                   AND m.user_id = current_setting('mnemo.user') AND m.id = v.memory_id
                   AND ($3 OR m.is_active)
       AND ($4::text IS NULL OR m.agent_id = $4)
       AND ($5::text IS NULL OR m.thread_id = $5)
       AND ($6::text IS NULL OR m.memory_type = $6)
       AND ($7::timestamptz IS NULL OR m.created_at >= $7)
       AND ($8::timestamptz IS NULL OR m.created_at < $8)
       AND ($9::jsonb IS NULL OR m.content_metadata @> $9) OFFSET 0)
               AND ($10::uuid[] IS NULL OR v.memory_id = ANY($10))
             ORDER BY (v.embedding::vector(:dims) <=> $1::vector(:dims))
             LIMIT $11
         ), chunks AS (
             SELECT memory_id, byte_start, count(*) AS n, sum(score) AS total,
                    bool_or(with_context) AS has_context
             FROM near GROUP BY memory_id, byte_start
             ORDER BY max(score) DESC LIMIT $12
         ), both_vectors AS (
             -- A chunk's similarity is the mean of its own vector's and its vector with
             -- context's (see `crate::search::fusion`); the one not among the nearest is
             -- looked up by its key, and a chunk with one vector has that one's.
             SELECT c.memory_id, c.byte_start,
                    CASE WHEN c.n > 1 THEN c.total / c.n
                         ELSE coalesce((c.total + (
                             SELECT 1 - (v.embedding::vector(:dims) <=> $1::vector(:dims)) FROM memory_vectors v
                             WHERE v.tenant_id = current_setting('mnemo.tenant')
                               AND v.user_id = current_setting('mnemo.user')
                               AND v.memory_id = c.memory_id AND v.byte_start = c.byte_start
                               AND v.model = $2 AND v.with_context = NOT c.has_context)) / 2,
                             c.total)
                    END AS score
             FROM chunks c
         )
         SELECT DISTINCT ON (memory_id) memory_id, byte_start, score::real AS score
         FROM both_vectors
         ORDER BY memory_id, score DESC;
\echo memory vector search: user :user, a random unit query vector
\echo first execution (a custom plan):
EXPLAIN (ANALYZE, BUFFERS)
EXECUTE semantic(:'qvec', :'model', false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 300, 200);
EXECUTE semantic(:'qvec', :'model', false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 300, 200) \g /dev/null
EXECUTE semantic(:'qvec', :'model', false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 300, 200) \g /dev/null
EXECUTE semantic(:'qvec', :'model', false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 300, 200) \g /dev/null
EXECUTE semantic(:'qvec', :'model', false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 300, 200) \g /dev/null
EXECUTE semantic(:'qvec', :'model', false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 300, 200) \g /dev/null
\echo seventh execution (the plan a pooled server connection settles on):
EXPLAIN (ANALYZE, BUFFERS)
EXECUTE semantic(:'qvec', :'model', false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 300, 200);
ROLLBACK;
