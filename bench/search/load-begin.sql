-- Before scripts/bench-search loads: empties the tables searched (this database is the
-- benchmark's own), and drops their secondary indexes (GIN, HNSW, btree), remembering their
-- definitions in bench_search_indexes; load-end.sql builds them again once the rows are in.
\set ON_ERROR_STOP on
CREATE TABLE IF NOT EXISTS bench_search_scale (users int, chunks bigint, messages bigint, model text,
                                               loaded_at timestamptz DEFAULT now());
CREATE TABLE IF NOT EXISTS bench_search_indexes (name text PRIMARY KEY, def text NOT NULL);
DELETE FROM bench_search_scale;
INSERT INTO bench_search_indexes (name, def)
SELECT i.indexname, i.indexdef FROM pg_indexes i
WHERE i.schemaname = 'public'
  AND i.tablename IN ('agent_memories', 'agent_memory_chunks', 'memory_vectors',
                      'agent_sessions', 'conversation_messages', 'message_vectors')
  AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname)
ON CONFLICT (name) DO NOTHING;
SELECT format('DROP INDEX IF EXISTS %I', name) FROM bench_search_indexes \gexec
TRUNCATE agent_memories, agent_memory_chunks, memory_vectors, agent_sessions, session_digests,
         conversation_messages, message_vectors, recent_conversation_history, embedding_outbox;
ALTER TABLE conversation_messages ALTER COLUMN seq RESTART;
INSERT INTO agent_sessions (tenant_id, user_id, session_id, agent_name, created_at,
                            last_activity_at)
SELECT 'bench', 'u' || u, 's' || s, 'agent-' || (s % 3), timestamptz '2026-01-01',
       timestamptz '2026-01-01'
FROM generate_series(0, :users - 1) AS u, generate_series(0, :sessions - 1) AS s;
