-- The keyword side of POST /api/memories/search (keyword_candidates in
-- src/memories/search/sides.rs), as the server runs it: a prepared statement in a transaction
-- scoped to one user.
BEGIN;
SET LOCAL role mnemo_app;
SELECT set_config('mnemo.tenant', 'bench', true), set_config('mnemo.user', :'user', true) \g /dev/null
SET LOCAL hnsw.iterative_scan = relaxed_order;
PREPARE keyword(text, text, bool, text, text, text, timestamptz, timestamptz, jsonb, uuid[], int8) AS
WITH q AS (
     SELECT pos, pos && websearch_to_tsquery('english', mnemo_memory_search_text($2)) AS q,
            tsvector_to_array(to_tsvector('english', mnemo_memory_search_text($1))) AS terms,
            ARRAY(SELECT DISTINCT l.lexeme
                  FROM unnest(string_to_array($1, ' or ')) WITH ORDINALITY AS w(word, o),
                       unnest(tsvector_to_array(
                           to_tsvector('english', mnemo_memory_search_text(w.word)))) AS l(lexeme)
                  WHERE w.o > 1 AND w.word ~ '^[[:upper:]]') AS names
     FROM websearch_to_tsquery('english', mnemo_memory_search_text($1)) AS pos
 ), mem AS (
     SELECT id, summary_tsv FROM agent_memories
     WHERE tenant_id = current_setting('mnemo.tenant')
       AND user_id = current_setting('mnemo.user')
       AND ($3 OR is_active)
       AND ($4::text IS NULL OR agent_id = $4)
       AND ($5::text IS NULL OR thread_id = $5)
       AND ($6::text IS NULL OR memory_type = $6)
       AND ($7::timestamptz IS NULL OR created_at >= $7)
       AND ($8::timestamptz IS NULL OR created_at < $8)
       AND ($9::jsonb IS NULL OR content_metadata @> $9)), hits AS MATERIALIZED (
             SELECT c.memory_id, c.byte_start, c.tsv
             FROM agent_memory_chunks c, q
             WHERE c.tenant_id = current_setting('mnemo.tenant')
               AND c.user_id = current_setting('mnemo.user')
               AND numnode(q.pos) > 0 AND c.tsv @@ q.q
               AND c.memory_id IN (SELECT id FROM mem)
             UNION ALL
             SELECT mem.id, NULL, mem.summary_tsv
             FROM mem, q
             WHERE numnode(q.pos) > 0 AND mem.summary_tsv @@ q.q
         ), terms AS (
             SELECT t.term, quote_literal(t.term)::tsquery AS tq
             FROM q, unnest(q.terms) AS t(term)
             WHERE position(E'\\' in t.term) = 0
         ), matches AS MATERIALIZED (
             SELECT h.memory_id, h.byte_start, t.term FROM hits h JOIN terms t ON h.tsv @@ t.tq
         ), df AS (
             SELECT term, count(*) AS n FROM matches GROUP BY term
         ), stats AS (
             SELECT greatest((SELECT count(*) FROM agent_memory_chunks c
         WHERE c.tenant_id = current_setting('mnemo.tenant')
           AND c.user_id = current_setting('mnemo.user')), (SELECT count(*) FROM hits)) AS n
         ), idf AS (
             SELECT df.term, df.n, ln(1 + ((SELECT n FROM stats) - df.n + 0.5) / (df.n + 0.5)) AS idf
             FROM df
         ), weights AS (
             SELECT i.term,
                    CASE WHEN i.term = ANY(q.names)
                         THEN (i.idf + max(i.idf) FILTER (WHERE i.n > 0) OVER ()) / 2
                         ELSE i.idf
                    END AS weight
             FROM idf i CROSS JOIN q
         ), scored AS (
             SELECT m.memory_id, m.byte_start, sum(w.weight)::real AS score
             FROM matches m JOIN weights w USING (term)
             GROUP BY m.memory_id, m.byte_start
         ), best AS (
             SELECT DISTINCT ON (memory_id) memory_id, byte_start,
                    max(score) OVER (PARTITION BY memory_id) AS score
             FROM scored
             WHERE $10::uuid[] IS NULL OR memory_id = ANY($10)
             ORDER BY memory_id, byte_start IS NULL, score DESC, byte_start
         )
         SELECT memory_id, byte_start, score FROM best
         ORDER BY score DESC, memory_id DESC LIMIT $11;
\echo memory keyword search: user :user, question :question
\echo first execution (a custom plan):
EXPLAIN (ANALYZE, BUFFERS)
EXECUTE keyword(replace(:'question', ' ', ' or '), '', false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 100);
EXECUTE keyword(replace(:'question', ' ', ' or '), '', false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 100) \g /dev/null
EXECUTE keyword(replace(:'question', ' ', ' or '), '', false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 100) \g /dev/null
EXECUTE keyword(replace(:'question', ' ', ' or '), '', false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 100) \g /dev/null
EXECUTE keyword(replace(:'question', ' ', ' or '), '', false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 100) \g /dev/null
EXECUTE keyword(replace(:'question', ' ', ' or '), '', false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 100) \g /dev/null
\echo seventh execution (the plan a pooled server connection settles on):
EXPLAIN (ANALYZE, BUFFERS)
EXECUTE keyword(replace(:'question', ' ', ' or '), '', false, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 100);
ROLLBACK;
