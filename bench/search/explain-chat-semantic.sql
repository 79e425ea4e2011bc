-- The vector side of POST /api/chat/search (vector_candidates in src/conversations/search.rs), as
-- the server runs it: a prepared statement in a transaction scoped to one user, with
-- hnsw.iterative_scan = relaxed_order, asking for the 100 nearest messages.
BEGIN;
SET LOCAL role mnemo_app;
SELECT set_config('mnemo.tenant', 'bench', true), set_config('mnemo.user', :'user', true) \g /dev/null
SET LOCAL hnsw.iterative_scan = relaxed_order;
PREPARE chat_semantic(vector, text, text, text, timestamptz, timestamptz, int4, int8, int8[]) AS
WITH msg AS (
     SELECT m.seq, m.tsv FROM conversation_messages m
     JOIN agent_sessions s
       ON s.tenant_id = m.tenant_id AND s.user_id = m.user_id AND s.session_id = m.session_id
     WHERE m.tenant_id = current_setting('mnemo.tenant')
       AND m.user_id = current_setting('mnemo.user')
       AND ($3::text IS NULL OR m.session_id = $3)
       AND ($4::text IS NULL OR s.agent_name = $4)
       AND ($5::timestamptz IS NULL OR m.sent_at >= $5)
       AND ($6::timestamptz IS NULL OR m.sent_at < $6)
       AND ($7::int IS NULL OR m.archived_at >= now() - make_interval(days => $7::int))
 )
         SELECT m.seq, (1 - (v.embedding::vector(:dims) <=> $1::vector(:dims)))::real AS score
         FROM message_vectors v
         JOIN conversation_messages m
           ON m.tenant_id = v.tenant_id AND m.user_id = v.user_id
          AND m.session_id = v.session_id AND m.message_id = v.message_id
         WHERE v.tenant_id = current_setting('mnemo.tenant')
           AND v.user_id = current_setting('mnemo.user')
           AND v.model = $2
           AND m.seq IN (SELECT seq FROM msg)
           AND ($9::int8[] IS NULL OR m.seq = ANY($9))
         ORDER BY (v.embedding::vector(:dims) <=> $1::vector(:dims))
         LIMIT $8;
\echo chat vector search: user :user, a random unit query vector
\echo first execution (a custom plan):
EXPLAIN (ANALYZE, BUFFERS)
EXECUTE chat_semantic(:'qvec', :'model', NULL, NULL, NULL, NULL, NULL, 100, NULL);
EXECUTE chat_semantic(:'qvec', :'model', NULL, NULL, NULL, NULL, NULL, 100, NULL) \g /dev/null
EXECUTE chat_semantic(:'qvec', :'model', NULL, NULL, NULL, NULL, NULL, 100, NULL) \g /dev/null
EXECUTE chat_semantic(:'qvec', :'model', NULL, NULL, NULL, NULL, NULL, 100, NULL) \g /dev/null
EXECUTE chat_semantic(:'qvec', :'model', NULL, NULL, NULL, NULL, NULL, 100, NULL) \g /dev/null
EXECUTE chat_semantic(:'qvec', :'model', NULL, NULL, NULL, NULL, NULL, 100, NULL) \g /dev/null
\echo seventh execution (the plan a pooled server connection settles on):
EXPLAIN (ANALYZE, BUFFERS)
EXECUTE chat_semantic(:'qvec', :'model', NULL, NULL, NULL, NULL, NULL, 100, NULL);
ROLLBACK;
