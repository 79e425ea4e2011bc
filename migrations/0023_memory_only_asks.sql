-- Whether a detail memory only asks: it is one chunk, and that chunk's text only asks (see
-- mnemo_only_asks(text)). A memory of several chunks is a document, not a question. Reads under
-- the caller's row-level security like the query that calls it.
CREATE FUNCTION mnemo_only_asks(m agent_memories) RETURNS boolean
LANGUAGE sql STABLE STRICT PARALLEL SAFE
RETURN m.chunk_count = 1
   AND (SELECT mnemo_only_asks(c.content) FROM agent_memory_chunks c
        WHERE c.tenant_id = m.tenant_id AND c.user_id = m.user_id AND c.memory_id = m.id);
