-- Raw equivalent of GET /api/agents/bench/notes: the one call the request sends, which acts as
-- the client's user and reads the agent's notes, outside any transaction. The server holds the
-- answer from its earlier reads, so the call names that row (version 1, written by :notes_row)
-- and gets the version back without the text.
SELECT * FROM mnemo_read_notes('bench', 1, :notes_row, 'bench', 'pgbench-notes-' || :client_id);
