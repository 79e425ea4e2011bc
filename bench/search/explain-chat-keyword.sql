-- The keyword side of POST /api/chat/search (keyword_candidates in src/conversations/search.rs),
-- as the server runs it: a prepared statement in a transaction scoped to one user.
BEGIN;
SET LOCAL role mnemo_app;
SELECT set_config('mnemo.tenant', 'bench', true), set_config('mnemo.user', :'user', true) \g /dev/null
SET LOCAL hnsw.iterative_scan = relaxed_order;
PREPARE chat_keyword(text, text, text, text, timestamptz, timestamptz, int4, int8, int8[]) AS
WITH q AS (
     SELECT pos, pos && websearch_to_tsquery('english', mnemo_memory_search_text($2)) AS q,
            tsvector_to_array(to_tsvector('english', mnemo_memory_search_text($1))) AS terms,
            ARRAY(SELECT DISTINCT l.lexeme
                  FROM unnest(string_to_array($1, ' or ')) WITH ORDINALITY AS w(word, o),
                       unnest(tsvector_to_array(
                           to_tsvector('english', mnemo_memory_search_text(w.word)))) AS l(lexeme)
                  WHERE w.o > 1 AND w.word ~ '^[[:upper:]]') AS names
     FROM websearch_to_tsquery('english', mnemo_memory_search_text($1)) AS pos
 ), msg AS (
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
 ), hits AS MATERIALIZED (
             SELECT msg.seq, msg.tsv FROM msg, q
             WHERE numnode(q.pos) > 0 AND msg.tsv @@ q.q
         ), terms AS (
             SELECT t.term, quote_literal(t.term)::tsquery AS tq
             FROM q, unnest(q.terms) AS t(term)
             WHERE position(E'\\' in t.term) = 0
         ), matches AS MATERIALIZED (
             SELECT h.seq, t.term FROM hits h JOIN terms t ON h.tsv @@ t.tq
         ), df AS (
             SELECT term, count(*) AS n FROM matches GROUP BY term
         ), stats AS (
             SELECT greatest((SELECT count(*) FROM conversation_messages c
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
             SELECT m.seq, sum(w.weight)::real AS score
             FROM matches m JOIN weights w USING (term)
             GROUP BY m.seq
         )
         SELECT seq, score FROM (
             (SELECT seq, score FROM scored ORDER BY score DESC, seq DESC LIMIT $8)
             UNION
             SELECT seq, score FROM scored WHERE $9::int8[] IS NOT NULL AND seq = ANY($9)
         ) best ORDER BY score DESC, seq DESC;
\echo chat keyword search: user :user, question :question
\echo first execution (a custom plan):
EXPLAIN (ANALYZE, BUFFERS)
EXECUTE chat_keyword(replace(:'question', ' ', ' or '), '', NULL, NULL, NULL, NULL, NULL, 100, NULL);
EXECUTE chat_keyword(replace(:'question', ' ', ' or '), '', NULL, NULL, NULL, NULL, NULL, 100, NULL) \g /dev/null
EXECUTE chat_keyword(replace(:'question', ' ', ' or '), '', NULL, NULL, NULL, NULL, NULL, 100, NULL) \g /dev/null
EXECUTE chat_keyword(replace(:'question', ' ', ' or '), '', NULL, NULL, NULL, NULL, NULL, 100, NULL) \g /dev/null
EXECUTE chat_keyword(replace(:'question', ' ', ' or '), '', NULL, NULL, NULL, NULL, NULL, 100, NULL) \g /dev/null
EXECUTE chat_keyword(replace(:'question', ' ', ' or '), '', NULL, NULL, NULL, NULL, NULL, 100, NULL) \g /dev/null
\echo seventh execution (the plan a pooled server connection settles on):
EXPLAIN (ANALYZE, BUFFERS)
EXECUTE chat_keyword(replace(:'question', ' ', ' or '), '', NULL, NULL, NULL, NULL, NULL, 100, NULL);
ROLLBACK;
