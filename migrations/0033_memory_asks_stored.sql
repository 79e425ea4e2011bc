-- Whether a memory asks, stored with it. A search that may lift its hits by their neighbours
-- (see the conversation search's `neighbours`) asked, for every candidate memory, whether its
-- text only asks and whether the memory before it ends with a question: two reads of a chunk
-- by key per candidate, on top of the memory itself and the two in its stream, so two of the
-- statement's five index probes. Both are facts of the memory's content, known when it is
-- written: the write stores them, and the search reads them off the rows it already has.
--
-- NULL for a memory written before this migration: the search then reads its chunk as before,
-- so no backfill is needed and the answers are the same. A memory of more than one chunk
-- neither asks nor ends asking, as before.
ALTER TABLE agent_memories ADD COLUMN asks boolean, ADD COLUMN ends_asking boolean;

-- The memory's write, as before, storing both: the server computes them from the chunks it
-- writes (as `mnemo_only_asks` and `mnemo_ends_asking` would, reading only the text's end
-- where these functions count the characters of all of it, about 3 µs a kilobyte each).
DROP FUNCTION mnemo_write_memory(uuid, text, text, text, text, text, jsonb, bigint, bigint,
    bigint, text, int, bigint[], int[], bigint[], bigint[], text[], boolean, text, text);
CREATE FUNCTION mnemo_write_memory(
    p_id uuid, p_key text, p_agent text, p_thread text, p_type text, p_summary text,
    p_metadata jsonb, p_size bigint, p_lines bigint, p_tokens bigint, p_sha256 text,
    p_chunk_count int, p_byte_starts bigint[], p_byte_lens int[], p_line_starts bigint[],
    p_line_ends bigint[], p_texts text[], p_asks boolean, p_ends_asking boolean,
    p_queue boolean, p_tenant text, p_user text)
RETURNS TABLE (version int, created_at timestamptz, updated_at timestamptz)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    PERFORM mnemo_act_as(p_tenant, p_user);
    RETURN QUERY
    WITH m AS (
        INSERT INTO agent_memories (tenant_id, user_id, id, memory_key, agent_id, thread_id,
            memory_type, summary, content_metadata, size_bytes, line_count, token_count,
            content_sha256, chunk_count, asks, ends_asking)
        VALUES (current_setting('mnemo.tenant'), current_setting('mnemo.user'), p_id, p_key,
            p_agent, p_thread, p_type, p_summary, p_metadata, p_size, p_lines, p_tokens,
            p_sha256, p_chunk_count, p_asks, p_ends_asking)
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

-- Its plans stay generic, as before (see the one-call plans).
ALTER FUNCTION mnemo_write_memory SET plan_cache_mode = force_generic_plan;
