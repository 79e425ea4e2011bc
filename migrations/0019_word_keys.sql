-- Word indexes keyed by user.
--
-- The full-text indexes held each word once for the whole table. A word common across the table
-- but rare in one user's history ("decided": 1.5 million messages of all users, 649 of the
-- caller's) then had no good plan: the index returns every user's matches, the (tenant, user)
-- index every text of the caller, and PostgreSQL read the whole table (0.8 s at 6.9 million
-- messages). These indexes key each word by its user instead: a key is a 64-bit hash of the
-- lexeme, seeded by a hash of the tenant and user, so a lookup reads the caller's matches only,
-- and the planner weighs each key by its own frequency. A hash can collide, so each lookup also
-- tests the words themselves.

-- The keys of `lexemes` for the user `usr` of `tenant`.
CREATE FUNCTION mnemo_word_keys(tenant text, usr text, lexemes text[]) RETURNS int8[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN ARRAY(SELECT hashtextextended(l, hashtextextended(tenant || E'\n' || usr, 0))
             FROM unnest(lexemes) AS l);

DROP INDEX conversation_messages_tsv;
CREATE INDEX conversation_messages_words ON conversation_messages
    USING gin (mnemo_word_keys(tenant_id, user_id, tsvector_to_array(tsv)));
DROP INDEX agent_memory_chunks_tsv;
CREATE INDEX agent_memory_chunks_words ON agent_memory_chunks
    USING gin (mnemo_word_keys(tenant_id, user_id, tsvector_to_array(tsv)));
DROP INDEX agent_memories_summary_tsv;
CREATE INDEX agent_memories_summary_words ON agent_memories
    USING gin (mnemo_word_keys(tenant_id, user_id, tsvector_to_array(summary_tsv)));

-- The lookups take the lexemes themselves: a text matches when it holds any of them.
DROP FUNCTION mnemo_message_matches(tsquery, bigint);
DROP FUNCTION mnemo_chunk_matches(tsquery, bigint);
DROP FUNCTION mnemo_summary_matches(tsquery, bigint);

-- The caller's conversation messages holding any of `terms` (lexemes), at most `n` of them
-- (NULL: all).
CREATE FUNCTION mnemo_message_matches(terms text[], n bigint)
RETURNS TABLE (seq bigint, tsv tsvector, session_id text, sent_at timestamptz,
               archived_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp SET max_parallel_workers_per_gather = 0 AS $$
DECLARE
    tenant text := current_setting('mnemo.tenant', true);
    usr text := current_setting('mnemo.user', true);
BEGIN
    -- Planned for each call with its keys, so the planner weighs the index by their frequencies.
    -- The subquery is a fence: outside it the planner would intersect the key's matches with the
    -- caller's rows from the (tenant, user) index, taking the two to be independent (0.2 s for a
    -- million-message history instead of 8 ms). The caller's rows are kept after the lookup, by
    -- the exact test. Parallel workers cost more to start than such a lookup takes.
    RETURN QUERY EXECUTE
        'SELECT m.seq, m.tsv, m.session_id, m.sent_at, m.archived_at
         FROM (SELECT * FROM public.conversation_messages m
               WHERE public.mnemo_word_keys(m.tenant_id, m.user_id, tsvector_to_array(m.tsv))
                     && $1
                 AND tsvector_to_array(m.tsv) && $4
               OFFSET 0) m
         WHERE m.tenant_id = $2 AND m.user_id = $3
         LIMIT $5'
        USING public.mnemo_word_keys(tenant, usr, terms), tenant, usr, terms, n;
END
$$;

-- The caller's memory chunks holding any of `terms`, at most `n` of them (NULL: all).
CREATE FUNCTION mnemo_chunk_matches(terms text[], n bigint)
RETURNS TABLE (memory_id uuid, byte_start bigint, tsv tsvector)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp SET max_parallel_workers_per_gather = 0 AS $$
DECLARE
    tenant text := current_setting('mnemo.tenant', true);
    usr text := current_setting('mnemo.user', true);
BEGIN
    RETURN QUERY EXECUTE
        'SELECT c.memory_id, c.byte_start, c.tsv
         FROM (SELECT * FROM public.agent_memory_chunks c
               WHERE public.mnemo_word_keys(c.tenant_id, c.user_id, tsvector_to_array(c.tsv))
                     && $1
                 AND tsvector_to_array(c.tsv) && $4
               OFFSET 0) c
         WHERE c.tenant_id = $2 AND c.user_id = $3
         LIMIT $5'
        USING public.mnemo_word_keys(tenant, usr, terms), tenant, usr, terms, n;
END
$$;

-- The caller's memories whose summary holds any of `terms`, at most `n` of them (NULL: all).
CREATE FUNCTION mnemo_summary_matches(terms text[], n bigint)
RETURNS TABLE (id uuid, summary_tsv tsvector)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp SET max_parallel_workers_per_gather = 0 AS $$
DECLARE
    tenant text := current_setting('mnemo.tenant', true);
    usr text := current_setting('mnemo.user', true);
BEGIN
    RETURN QUERY EXECUTE
        'SELECT m.id, m.summary_tsv
         FROM (SELECT * FROM public.agent_memories m
               WHERE public.mnemo_word_keys(m.tenant_id, m.user_id,
                                            tsvector_to_array(m.summary_tsv)) && $1
                 AND tsvector_to_array(m.summary_tsv) && $4
               OFFSET 0) m
         WHERE m.tenant_id = $2 AND m.user_id = $3
         LIMIT $5'
        USING public.mnemo_word_keys(tenant, usr, terms), tenant, usr, terms, n;
END
$$;

-- As before: owned by mnemo_words (which may read every user's searchable text, and applies the
-- scope's tenant and user itself), callable by mnemo_app only. Without a scope they find nothing.
GRANT CREATE ON SCHEMA public TO mnemo_words;
ALTER FUNCTION mnemo_message_matches(text[], bigint) OWNER TO mnemo_words;
ALTER FUNCTION mnemo_chunk_matches(text[], bigint) OWNER TO mnemo_words;
ALTER FUNCTION mnemo_summary_matches(text[], bigint) OWNER TO mnemo_words;
REVOKE CREATE ON SCHEMA public FROM mnemo_words;
REVOKE ALL ON FUNCTION mnemo_message_matches(text[], bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION mnemo_chunk_matches(text[], bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION mnemo_summary_matches(text[], bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mnemo_message_matches(text[], bigint) TO mnemo_app;
GRANT EXECUTE ON FUNCTION mnemo_chunk_matches(text[], bigint) TO mnemo_app;
GRANT EXECUTE ON FUNCTION mnemo_summary_matches(text[], bigint) TO mnemo_app;
