-- About 1 KB of notes for the agent `bench` of each of 64 pgbench clients (users pgbench-notes-<client>).
DELETE FROM agent_long_term_memory WHERE tenant_id = 'bench' AND user_id LIKE 'pgbench-notes-%';
INSERT INTO agent_long_term_memory (tenant_id, user_id, agent_name, notes, version)
SELECT 'bench', 'pgbench-notes-' || c, 'bench',
       E'# Bench\n' || left(repeat(E'line of tool output with some words to index: build ok, tests passed\n', 16), 1024), 1
FROM generate_series(0, 63) c;
-- The rows' writing transaction (one INSERT wrote them all), for pgbench (`-D notes_row=...`): the
-- server names the answer it holds by the version and this.
SELECT 'notes_row=' || min(xmin::text) FROM agent_long_term_memory
WHERE tenant_id = 'bench' AND user_id LIKE 'pgbench-notes-%';
