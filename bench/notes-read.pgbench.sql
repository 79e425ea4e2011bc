-- Raw equivalent of GET /api/agents/bench/notes: the one call the request sends, which acts as
-- the client's user and reads the agent's notes, outside any transaction.
SELECT * FROM mnemo_read_notes('bench', 'bench', 'pgbench-notes-' || :client_id);
