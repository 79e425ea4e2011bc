-- The vector side of POST /api/chat/search (vector_candidates in src/conversations/search.rs), as
-- the server runs it (copied from the statement log), in a transaction scoped to one user, with
-- hnsw.iterative_scan = relaxed_order, asking for the 200 nearest vectors and scoring their
-- messages by both their vectors. The server sends it unnamed, so PostgreSQL plans it for its
-- parameters every time: the first plan below is the one it runs; the seventh shows the generic
-- plan it is kept from.
BEGIN;
SET LOCAL role mnemo_app;
SELECT set_config('mnemo.tenant', 'bench', true), set_config('mnemo.user', :'user', true) \g /dev/null
SET LOCAL hnsw.iterative_scan = relaxed_order;
PREPARE chat_semantic(vector, text, text, text, timestamptz, timestamptz, int4, int8, int8[]) AS
WITH near AS (
         SELECT m.seq, v.session_id, v.message_id, v.with_context, 1 - (v.embedding::vector(:dims) <=> $1::vector(:dims)) AS score
         FROM message_vectors v
         JOIN conversation_messages m
           ON m.tenant_id = v.tenant_id AND m.user_id = v.user_id
          AND m.session_id = v.session_id AND m.message_id = v.message_id
         WHERE v.tenant_id = current_setting('mnemo.tenant')
           AND v.user_id = current_setting('mnemo.user')
           AND v.model = $2
           AND ($3::text IS NULL OR v.session_id = $3)
           AND ($4::text IS NULL OR EXISTS (
                 SELECT 1 FROM agent_sessions s
                 WHERE s.tenant_id = m.tenant_id AND s.user_id = m.user_id
                   AND s.session_id = m.session_id AND s.agent_name = $4))
           AND ($5::timestamptz IS NULL OR m.sent_at >= $5)
           AND ($6::timestamptz IS NULL OR m.sent_at < $6)
           AND ($7::int IS NULL OR m.archived_at >= now() - make_interval(days => $7::int))
           AND ($9::int8[] IS NULL OR m.seq = ANY($9))
         ORDER BY (v.embedding::vector(:dims) <=> $1::vector(:dims))
         LIMIT $8
         ), messages AS (
             SELECT seq, session_id, message_id, count(*) AS n, sum(score) AS total,
                    bool_or(with_context) AS has_context
             FROM near GROUP BY seq, session_id, message_id
         )
         -- A message's similarity is the mean of its own vector's and its vector with
         -- context's (see `crate::search::fusion`); the one not among the nearest is looked up
         -- by its key, and a message with one vector has that one's.
         SELECT n.seq,
                (CASE WHEN n.n > 1 THEN n.total / n.n
                      ELSE coalesce((n.total + (
                          SELECT 1 - (v.embedding::vector(:dims) <=> $1::vector(:dims)) FROM message_vectors v
                          WHERE v.tenant_id = current_setting('mnemo.tenant')
                            AND v.user_id = current_setting('mnemo.user')
                            AND v.session_id = n.session_id AND v.message_id = n.message_id
                            AND v.model = $2 AND v.with_context = NOT n.has_context)) / 2,
                          n.total)
                 END)::real AS score
         FROM messages n;
\echo chat vector search: user :user, a random unit query vector
\echo first execution (a custom plan):
EXPLAIN (ANALYZE, BUFFERS)
EXECUTE chat_semantic(:'qvec', :'model', NULL, NULL, NULL, NULL, NULL, 200, NULL);
EXECUTE chat_semantic(:'qvec', :'model', NULL, NULL, NULL, NULL, NULL, 200, NULL) \g /dev/null
EXECUTE chat_semantic(:'qvec', :'model', NULL, NULL, NULL, NULL, NULL, 200, NULL) \g /dev/null
EXECUTE chat_semantic(:'qvec', :'model', NULL, NULL, NULL, NULL, NULL, 200, NULL) \g /dev/null
EXECUTE chat_semantic(:'qvec', :'model', NULL, NULL, NULL, NULL, NULL, 200, NULL) \g /dev/null
EXECUTE chat_semantic(:'qvec', :'model', NULL, NULL, NULL, NULL, NULL, 200, NULL) \g /dev/null
\echo seventh execution (the plan a pooled server connection settles on):
EXPLAIN (ANALYZE, BUFFERS)
EXECUTE chat_semantic(:'qvec', :'model', NULL, NULL, NULL, NULL, NULL, 200, NULL);
ROLLBACK;
