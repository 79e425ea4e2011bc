-- Raw equivalent of POST /api/memories with 1 KB of text: the memory row and its one chunk (both
-- full-text indexed) in one statement, autocommit, no scoping. Same text shape as mnemo-bench sends.
\set n random(1, 2000000000)
WITH m AS (
  INSERT INTO agent_memories (tenant_id, user_id, id, memory_key, memory_type, summary, content_metadata,
      size_bytes, line_count, token_count, content_sha256, chunk_count)
  VALUES ('bench', 'pgbench-' || :client_id, gen_random_uuid(), 'pg-' || :client_id || '-' || :n || '-' || floor(random() * 1e9)::text,
      'text', 'bench output 1.0 KB, 15 lines', '{}', 1024, 15, 200, md5(random()::text), 1)
  ON CONFLICT (tenant_id, user_id, memory_key) DO NOTHING
  RETURNING tenant_id, user_id, id, version, created_at, updated_at
), c AS (
  INSERT INTO agent_memory_chunks (tenant_id, user_id, memory_id, byte_start, byte_len, line_start, line_end, content)
  SELECT m.tenant_id, m.user_id, m.id, 0, 1024, 1, 15,
         left('bench output ' || :n || E'\n' || repeat(E'line of tool output with some words to index: build ok, tests passed\n', 15), 1024)
  FROM m
)
SELECT version, created_at, updated_at FROM m;
