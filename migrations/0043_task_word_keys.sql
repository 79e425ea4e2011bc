-- Word indexes keyed by user for task history, and its word lookup.
--
-- A word search of task history (its messages, execution-log events, snapshots and step texts)
-- read every text of the caller and tested the query on each: the tables had no word index it
-- could use, since row-level security keeps PostgreSQL from using a GIN index for `@@`. A chat
-- turn's recall searches task history too, so a caller with a task of 100,000 messages and
-- 100,000 events spent 3 s of PostgreSQL on every turn. These indexes key each word by its user,
-- as the message and memory indexes do (mnemo_word_keys), and `mnemo_task_matches` reads them
-- past row-level security, applying the scope's tenant and user itself: a lookup reads the
-- caller's matches of the words only.
--
-- Each index keeps a small pending list, as the others do: a task write adds its entries there,
-- and they are merged in batches.

CREATE INDEX task_messages_words ON task_messages
    USING gin (mnemo_word_keys(tenant_id, user_id, tsvector_to_array(tsv)))
    WITH (gin_pending_list_limit = 256);
CREATE INDEX task_events_words ON task_events
    USING gin (mnemo_word_keys(tenant_id, user_id, tsvector_to_array(tsv)))
    WITH (gin_pending_list_limit = 256);
CREATE INDEX task_snapshots_words ON task_snapshots
    USING gin (mnemo_word_keys(tenant_id, user_id, tsvector_to_array(tsv)))
    WITH (gin_pending_list_limit = 256);
CREATE INDEX task_step_texts_words ON task_step_texts
    USING gin (mnemo_word_keys(tenant_id, user_id, tsvector_to_array(tsv)))
    WITH (gin_pending_list_limit = 256);

GRANT SELECT ON task_messages, task_events, task_snapshots, task_step_texts TO mnemo_words;
-- Of the steps, only what places a step text in time.
GRANT SELECT (tenant_id, user_id, task_id, seq, created_at) ON task_steps TO mnemo_words;
CREATE POLICY words_lookup ON task_messages FOR SELECT TO mnemo_words USING (true);
CREATE POLICY words_lookup ON task_events FOR SELECT TO mnemo_words USING (true);
CREATE POLICY words_lookup ON task_snapshots FOR SELECT TO mnemo_words USING (true);
CREATE POLICY words_lookup ON task_step_texts FOR SELECT TO mnemo_words USING (true);
CREATE POLICY words_lookup ON task_steps FOR SELECT TO mnemo_words USING (true);

-- The caller's task texts holding any of `terms` (lexemes), of all the caller's tasks, at most
-- `n` of them (NULL: all). Each text is named as a task search names it: task, source
-- ('message', 'event', 'snapshot', or a step text's kind), seq, and for a step text its part and
-- the chunk's character offset; with its time (a step text's is its step's), by which a search
-- orders equal scores.
CREATE FUNCTION mnemo_task_matches(terms text[], n bigint)
RETURNS TABLE (task_id uuid, source text, seq bigint, part_index int, char_offset int,
               at timestamptz, tsv tsvector)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp SET max_parallel_workers_per_gather = 0 AS $$
DECLARE
    tenant text := current_setting('mnemo.tenant', true);
    usr text := current_setting('mnemo.user', true);
BEGIN
    -- As in mnemo_message_matches: planned for each call with its keys, each lookup fenced by a
    -- subquery so that it goes through the word index, the caller's rows kept afterwards by the
    -- exact test.
    RETURN QUERY EXECUTE
        'SELECT m.task_id, ''message''::text, m.seq::bigint, NULL::int, NULL::int, m.created_at,
                m.tsv
         FROM (SELECT * FROM public.task_messages m
               WHERE public.mnemo_word_keys(m.tenant_id, m.user_id, tsvector_to_array(m.tsv))
                     && $1
                 AND tsvector_to_array(m.tsv) && $4
               OFFSET 0) m
         WHERE m.tenant_id = $2 AND m.user_id = $3
       UNION ALL
         SELECT e.task_id, ''event''::text, e.seq::bigint, NULL::int, NULL::int, e.ts, e.tsv
         FROM (SELECT * FROM public.task_events e
               WHERE public.mnemo_word_keys(e.tenant_id, e.user_id, tsvector_to_array(e.tsv))
                     && $1
                 AND tsvector_to_array(e.tsv) && $4
               OFFSET 0) e
         WHERE e.tenant_id = $2 AND e.user_id = $3
       UNION ALL
         SELECT s.task_id, ''snapshot''::text, s.seq::bigint, NULL::int, NULL::int, s.ts, s.tsv
         FROM (SELECT * FROM public.task_snapshots s
               WHERE public.mnemo_word_keys(s.tenant_id, s.user_id, tsvector_to_array(s.tsv))
                     && $1
                 AND tsvector_to_array(s.tsv) && $4
               OFFSET 0) s
         WHERE s.tenant_id = $2 AND s.user_id = $3
       UNION ALL
         SELECT t.task_id, t.kind, t.seq::bigint, t.part_index, t.char_offset,
                (SELECT st.created_at FROM public.task_steps st
                 WHERE st.tenant_id = t.tenant_id AND st.user_id = t.user_id
                   AND st.task_id = t.task_id AND st.seq = t.seq),
                t.tsv
         FROM (SELECT * FROM public.task_step_texts t
               WHERE public.mnemo_word_keys(t.tenant_id, t.user_id, tsvector_to_array(t.tsv))
                     && $1
                 AND tsvector_to_array(t.tsv) && $4
               OFFSET 0) t
         WHERE t.tenant_id = $2 AND t.user_id = $3
         LIMIT $5'
        USING public.mnemo_word_keys(tenant, usr, terms), tenant, usr, terms, n;
END
$$;

-- Owned by mnemo_words and callable by mnemo_app only, as the other word lookups.
GRANT CREATE ON SCHEMA public TO mnemo_words;
ALTER FUNCTION mnemo_task_matches(text[], bigint) OWNER TO mnemo_words;
REVOKE CREATE ON SCHEMA public FROM mnemo_words;
REVOKE ALL ON FUNCTION mnemo_task_matches(text[], bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mnemo_task_matches(text[], bigint) TO mnemo_app;
