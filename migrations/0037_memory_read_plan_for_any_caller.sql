-- A memory read by key planned for any caller. `mnemo_read_memory` runs one generic plan per
-- connection, made at its first call, and the planner estimates `current_setting(...)` by its
-- value at that moment: when the first caller was a user the table's statistics do not know yet
-- (new since the last ANALYZE), it took that user to hold no memories, found every index
-- starting with the tenant and user equally good, and could pick the one by stream
-- (`agent_memories_stream`) with the key as a filter. The connection then read every memory of
-- each later caller to find one: 25 ms of PostgreSQL CPU a read for a user of 120,000 memories,
-- where the key's own index answers in 0.1 ms. The lookup now compares the tenant and user with
-- the call's parameters, which a generic plan does not know, so it is costed for a typical user
-- whoever calls first, and the key's unique index wins. Row-level security confines the rows as
-- before (the call acts as the same tenant and user first).
CREATE OR REPLACE FUNCTION mnemo_read_memory(
    p_key text, p_by_lines boolean, p_start bigint, p_size bigint, p_include_inactive boolean,
    p_cap bigint, p_tenant text, p_user text)
RETURNS TABLE (summary text, is_active boolean, size_bytes bigint, line_count bigint,
               token_count bigint, chunk_byte_start bigint, chunk_line_start bigint,
               chunk_content text)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
    PERFORM mnemo_act_as(p_tenant, p_user);
    IF $2 THEN
        RETURN QUERY
        SELECT m.summary, m.is_active, m.size_bytes, m.line_count, m.token_count,
               c.byte_start, c.line_start, c.content
        FROM agent_memories m
        LEFT JOIN LATERAL (
            SELECT byte_start AS first FROM agent_memory_chunks f
            WHERE f.tenant_id = m.tenant_id AND f.user_id = m.user_id
              AND f.memory_id = m.id AND f.line_end >= $3
            ORDER BY f.line_end, f.byte_start LIMIT 1
        ) f ON true
        LEFT JOIN LATERAL (
            SELECT byte_start, line_start, content FROM agent_memory_chunks c
            WHERE c.tenant_id = m.tenant_id AND c.user_id = m.user_id
              AND c.memory_id = m.id AND (m.is_active OR $5)
              AND c.byte_start >= f.first AND c.byte_start < f.first + $6
              AND c.line_end >= $3 AND c.line_start <= $3 + $4 - 1
            OFFSET 0
        ) c ON true
        WHERE m.tenant_id = $7 AND m.user_id = $8 AND m.memory_key = $1
        ORDER BY c.byte_start;
    ELSE
        RETURN QUERY
        SELECT m.summary, m.is_active, m.size_bytes, m.line_count, m.token_count,
               c.byte_start, c.line_start, c.content
        FROM agent_memories m
        LEFT JOIN LATERAL (
            SELECT byte_start, line_start, content FROM agent_memory_chunks c
            WHERE c.tenant_id = m.tenant_id AND c.user_id = m.user_id
              AND c.memory_id = m.id AND (m.is_active OR $5)
              AND c.byte_start > $3 - 16384 AND c.byte_start < $3 + $4
              AND c.byte_start + c.byte_len > $3
            OFFSET 0
        ) c ON true
        WHERE m.tenant_id = $7 AND m.user_id = $8 AND m.memory_key = $1
        ORDER BY c.byte_start;
    END IF;
END
$$;
