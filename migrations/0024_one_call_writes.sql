-- Writes in one call. Storing a new memory is one function that first acts as the caller and
-- then writes, so the request sends one statement outside any transaction block: no BEGIN, no
-- separate scope statement, no COMMIT. The call is its own transaction: it commits when the
-- statement ends, and the transaction-local settings end with it. Like the read functions, it
-- runs with its caller's rights (no SECURITY DEFINER), under row-level security as mnemo_app.

-- A new memory under p_key with its chunks (the columns of each chunk as parallel arrays), queued
-- for the embedder when p_queue; no row when the caller already has a memory under p_key.
CREATE FUNCTION mnemo_write_memory(
    p_id uuid, p_key text, p_agent text, p_thread text, p_type text, p_summary text,
    p_metadata jsonb, p_size bigint, p_lines bigint, p_tokens bigint, p_sha256 text,
    p_chunk_count int, p_byte_starts bigint[], p_byte_lens int[], p_line_starts bigint[],
    p_line_ends bigint[], p_texts text[], p_queue boolean, p_tenant text, p_user text)
RETURNS TABLE (version int, created_at timestamptz, updated_at timestamptz)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    PERFORM mnemo_act_as(p_tenant, p_user);
    RETURN QUERY
    WITH m AS (
        INSERT INTO agent_memories (tenant_id, user_id, id, memory_key, agent_id, thread_id,
            memory_type, summary, content_metadata, size_bytes, line_count, token_count,
            content_sha256, chunk_count)
        VALUES (current_setting('mnemo.tenant'), current_setting('mnemo.user'), p_id, p_key,
            p_agent, p_thread, p_type, p_summary, p_metadata, p_size, p_lines, p_tokens,
            p_sha256, p_chunk_count)
        ON CONFLICT (tenant_id, user_id, memory_key) DO NOTHING
        RETURNING tenant_id, user_id, id, version, created_at, updated_at
    ), c AS (
        INSERT INTO agent_memory_chunks (tenant_id, user_id, memory_id, byte_start, byte_len,
            line_start, line_end, content)
        SELECT m.tenant_id, m.user_id, m.id, u.byte_start, u.byte_len, u.line_start,
            u.line_end, u.content
        FROM m, unnest(p_byte_starts, p_byte_lens, p_line_starts, p_line_ends, p_texts)
            AS u(byte_start, byte_len, line_start, line_end, content)
    ), o AS (
        INSERT INTO embedding_outbox (tenant_id, user_id, kind, memory_id)
        SELECT m.tenant_id, m.user_id, 'memory', m.id FROM m WHERE p_queue
    )
    SELECT m.version, m.created_at, m.updated_at FROM m;
END
$$;
