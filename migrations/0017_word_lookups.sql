-- Word lookups that can use the full-text indexes.
--
-- Under row-level security PostgreSQL will not use a GIN index for `tsv @@ query`: the match
-- operator is not marked leakproof, so it may only run after the policy's own test, row by row.
-- A keyword search over a long history then reads every row of the caller to find the few that
-- hold a rare word. These functions find them through the index instead. Each runs as the role
-- mnemo_words, which may read the searchable text of every user (its own policy), and applies
-- the same test as the isolation policy itself: the tenant and user of the transaction's scope
-- (`mnemo.tenant`, `mnemo.user`), compared exactly. Without a scope they find nothing. Only
-- mnemo_app may call them.

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'mnemo_words') THEN
        BEGIN
            CREATE ROLE mnemo_words NOLOGIN NOBYPASSRLS;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;
        END;
    END IF;
    IF NOT pg_has_role(current_user, 'mnemo_words', 'MEMBER') THEN
        EXECUTE format('GRANT mnemo_words TO %I', current_user);
    END IF;
END
$$;
GRANT USAGE ON SCHEMA public TO mnemo_words;
GRANT SELECT ON conversation_messages, agent_memory_chunks, agent_memories TO mnemo_words;
CREATE POLICY words_lookup ON conversation_messages FOR SELECT TO mnemo_words USING (true);
CREATE POLICY words_lookup ON agent_memory_chunks FOR SELECT TO mnemo_words USING (true);
CREATE POLICY words_lookup ON agent_memories FOR SELECT TO mnemo_words USING (true);

-- The caller's conversation messages matching `q`, at most `n` of them (NULL: all).
CREATE FUNCTION mnemo_message_matches(q tsquery, n bigint)
RETURNS TABLE (seq bigint, tsv tsvector, session_id text, sent_at timestamptz,
               archived_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    -- Planned for each call with its query, so the planner weighs the index by the words'
    -- frequencies.
    RETURN QUERY EXECUTE
        'SELECT m.seq, m.tsv, m.session_id, m.sent_at, m.archived_at
         FROM public.conversation_messages m
         WHERE m.tenant_id = current_setting(''mnemo.tenant'', true)
           AND m.user_id = current_setting(''mnemo.user'', true)
           AND m.tsv @@ $1
         LIMIT $2'
        USING q, n;
END
$$;

-- The caller's memory chunks matching `q`, at most `n` of them (NULL: all).
CREATE FUNCTION mnemo_chunk_matches(q tsquery, n bigint)
RETURNS TABLE (memory_id uuid, byte_start bigint, tsv tsvector)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RETURN QUERY EXECUTE
        'SELECT c.memory_id, c.byte_start, c.tsv
         FROM public.agent_memory_chunks c
         WHERE c.tenant_id = current_setting(''mnemo.tenant'', true)
           AND c.user_id = current_setting(''mnemo.user'', true)
           AND c.tsv @@ $1
         LIMIT $2'
        USING q, n;
END
$$;

-- The caller's memories whose summary matches `q`, at most `n` of them (NULL: all).
CREATE FUNCTION mnemo_summary_matches(q tsquery, n bigint)
RETURNS TABLE (id uuid, summary_tsv tsvector)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RETURN QUERY EXECUTE
        'SELECT m.id, m.summary_tsv
         FROM public.agent_memories m
         WHERE m.tenant_id = current_setting(''mnemo.tenant'', true)
           AND m.user_id = current_setting(''mnemo.user'', true)
           AND m.summary_tsv @@ $1
         LIMIT $2'
        USING q, n;
END
$$;

-- A new owner must be allowed to create in the schema at the moment it takes a function over;
-- mnemo_words keeps no such right afterwards.
GRANT CREATE ON SCHEMA public TO mnemo_words;
ALTER FUNCTION mnemo_message_matches(tsquery, bigint) OWNER TO mnemo_words;
ALTER FUNCTION mnemo_chunk_matches(tsquery, bigint) OWNER TO mnemo_words;
ALTER FUNCTION mnemo_summary_matches(tsquery, bigint) OWNER TO mnemo_words;
REVOKE CREATE ON SCHEMA public FROM mnemo_words;
REVOKE ALL ON FUNCTION mnemo_message_matches(tsquery, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION mnemo_chunk_matches(tsquery, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION mnemo_summary_matches(tsquery, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mnemo_message_matches(tsquery, bigint) TO mnemo_app;
GRANT EXECUTE ON FUNCTION mnemo_chunk_matches(tsquery, bigint) TO mnemo_app;
GRANT EXECUTE ON FUNCTION mnemo_summary_matches(tsquery, bigint) TO mnemo_app;
