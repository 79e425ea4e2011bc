-- The vector side of POST /api/memories/search (vector_candidates in
-- src/memories/search/sides.rs), as the server runs it (copied from the statement log), in a
-- transaction scoped to one user, with hnsw.iterative_scan = relaxed_order: the caller's 300
-- nearest vectors that pass the filters (tested on the nearest only, as they are read), their best
-- 200 chunks scored by both their vectors, and the best 100 memories with their vectors alone.
-- The server sends it unnamed, so PostgreSQL plans it for its parameters every time: the first
-- plan below is the one it runs; the seventh shows the generic plan it is kept from.
BEGIN;
SET LOCAL role mnemo_app;
SELECT set_config('mnemo.tenant', 'bench', true), set_config('mnemo.user', :'user', true) \g /dev/null
SET LOCAL hnsw.iterative_scan = relaxed_order;
PREPARE semantic(vector, text, bool, text, text, text, timestamptz, timestamptz, jsonb, uuid[], int8, int8, int8) AS
WITH near AS (
             -- The nearest vectors first, then the filters on those only, as they are read:
             -- a memory is looked up for each vector the limit reaches, not for every vector of
             -- the caller (`OFFSET 0` keeps the test out of the scan). The vectors themselves are
             -- not carried through the ordering; the kept texts' are looked up below.
             SELECT o.memory_id, o.byte_start, o.with_context, NULL::vector AS embedding,
                    1 - o.distance AS score
             FROM (SELECT v.memory_id, v.byte_start, v.with_context, (v.embedding::vector(:dims) <=> $1::vector(:dims)) AS distance
                   FROM memory_vectors v
                   WHERE v.tenant_id = current_setting('mnemo.tenant')
                     AND v.user_id = current_setting('mnemo.user')
                     AND v.model = $2
                     AND ($10::uuid[] IS NULL OR v.memory_id = ANY($10))
                   ORDER BY (v.embedding::vector(:dims) <=> $1::vector(:dims))
                   OFFSET 0) o
             WHERE EXISTS (SELECT 1 FROM agent_memories m
                 WHERE m.tenant_id = current_setting('mnemo.tenant')
                   AND m.user_id = current_setting('mnemo.user') AND m.id = o.memory_id
                   AND ($3 OR m.is_active)
       AND ($4::text IS NULL OR m.agent_id = $4)
       AND ($5::text IS NULL OR m.thread_id = $5)
       AND ($6::text IS NULL OR m.memory_type = $6)
       AND ($7::timestamptz IS NULL OR m.created_at >= $7)
       AND ($8::timestamptz IS NULL OR m.created_at < $8)
       AND ($9::jsonb IS NULL OR m.content_metadata @> $9) OFFSET 0)
             ORDER BY o.distance
             LIMIT $11
         ), chunks AS (
             SELECT memory_id, byte_start, count(*) AS n, sum(score) AS total,
                    bool_or(with_context) AS has_context,
                    (array_agg(embedding) FILTER (WHERE NOT with_context))[1] AS alone
             FROM near GROUP BY memory_id, byte_start ORDER BY max(score) DESC LIMIT $12
         ), both_vectors AS (
             SELECT c.memory_id, c.byte_start, (CASE WHEN c.n > 1 THEN c.total / c.n
               ELSE coalesce((c.total + (
                   SELECT 1 - (v.embedding::vector(:dims) <=> $1::vector(:dims)) FROM memory_vectors v
                   WHERE v.tenant_id = current_setting('mnemo.tenant')
                     AND v.user_id = current_setting('mnemo.user') AND v.memory_id = c.memory_id AND v.byte_start = c.byte_start
                     AND v.model = $2 AND v.with_context = NOT c.has_context)) / 2,
                   c.total)
          END)::real AS score, c.alone FROM chunks c
         )
         -- The best $13 memories first, so that only their vectors are looked up.
         SELECT b.memory_id, b.byte_start, b.score, coalesce(b.alone, (
             SELECT v.embedding FROM memory_vectors v
             WHERE v.tenant_id = current_setting('mnemo.tenant')
               AND v.user_id = current_setting('mnemo.user') AND v.memory_id = b.memory_id AND v.byte_start = b.byte_start
               AND v.model = $2 AND NOT v.with_context)) AS alone
         FROM (SELECT * FROM (SELECT DISTINCT ON (memory_id) memory_id, byte_start, score, alone
                              FROM both_vectors
                              ORDER BY memory_id, score DESC) d
               ORDER BY score DESC, memory_id LIMIT $13) b
         ORDER BY b.score DESC, b.memory_id;
\echo memory vector search: user :user, a random unit query vector
\echo first execution (a custom plan):
EXPLAIN (ANALYZE, BUFFERS)
EXECUTE semantic(:'qvec', :'model', false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 300, 200, 100);
EXECUTE semantic(:'qvec', :'model', false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 300, 200, 100) \g /dev/null
EXECUTE semantic(:'qvec', :'model', false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 300, 200, 100) \g /dev/null
EXECUTE semantic(:'qvec', :'model', false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 300, 200, 100) \g /dev/null
EXECUTE semantic(:'qvec', :'model', false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 300, 200, 100) \g /dev/null
EXECUTE semantic(:'qvec', :'model', false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 300, 200, 100) \g /dev/null
\echo seventh execution (the plan a pooled server connection settles on):
EXPLAIN (ANALYZE, BUFFERS)
EXECUTE semantic(:'qvec', :'model', false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 300, 200, 100);
ROLLBACK;
