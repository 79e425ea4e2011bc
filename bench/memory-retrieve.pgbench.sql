-- Raw equivalent of GET /api/memories/{key} (first 8 KB page): the memory row and the chunks the
-- page overlaps, by primary/unique key, prepared, no scoping.
\set i random(0, 49)
SELECT m.summary, m.is_active, m.size_bytes, m.line_count, m.token_count,
       c.byte_start, c.line_start, c.content
FROM agent_memories m
LEFT JOIN LATERAL (
  SELECT byte_start, line_start, content FROM agent_memory_chunks c
  WHERE c.tenant_id = m.tenant_id AND c.user_id = m.user_id AND c.memory_id = m.id
    AND c.byte_start > -16384 AND c.byte_start < 8192 AND c.byte_start + c.byte_len > 0
) c ON true
WHERE m.tenant_id = 'bench' AND m.user_id = 'pgbench-get-' || :client_id AND m.memory_key = 'pg-get-' || :client_id || '-' || :i
ORDER BY c.byte_start;
