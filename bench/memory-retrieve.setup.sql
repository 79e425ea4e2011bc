-- 50 one-chunk 1 KB memories for each of 16 pgbench clients (keys pg-get-<client>-<i>).
DELETE FROM agent_memories WHERE tenant_id = 'bench' AND user_id LIKE 'pgbench-get-%';
WITH m AS (
  INSERT INTO agent_memories (tenant_id, user_id, id, memory_key, memory_type, summary, size_bytes,
      line_count, token_count, content_sha256, chunk_count)
  SELECT 'bench', 'pgbench-get-' || c, gen_random_uuid(), 'pg-get-' || c || '-' || i, 'text', 'bench', 1024, 15, 200, md5(c || '-' || i), 1
  FROM generate_series(0, 63) c, generate_series(0, 49) i
  RETURNING tenant_id, user_id, id)
INSERT INTO agent_memory_chunks (tenant_id, user_id, memory_id, byte_start, byte_len, line_start, line_end, content)
SELECT tenant_id, user_id, id, 0, 1024, 1, 15,
       left(repeat(E'line of tool output with some words to index: build ok, tests passed\n', 16), 1024)
FROM m;
