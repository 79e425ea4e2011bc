-- What index upkeep a write pays, chosen by measurement.
--
-- A GIN index gathers new entries in a pending list and merges them into the index when the
-- list outgrows `gin_pending_list_limit` (4 MB by default) or when (auto)vacuum runs. Every
-- lookup reads the whole pending list: after a burst of writes a word lookup that finds one
-- memory summary took 2.25 ms, 0.09 ms once the list was merged. A 256 kB limit bounds that
-- read while writes still merge in batches. Measured with `scripts/bench --scale append
-- memory-store context-one`, two rounds each, against the default: PostgreSQL CPU per
-- `context-one` request fell 15-17% (small user) and 6-9% (100x history); appends and 1 KB
-- stores moved between -14% and +13%, in no consistent direction. Without a pending list at all
-- (`fastupdate = off`) appends cost up to 22% more PostgreSQL CPU and stores up to 57% more.
ALTER INDEX conversation_messages_words SET (gin_pending_list_limit = 256);
ALTER INDEX agent_memory_chunks_words SET (gin_pending_list_limit = 256);
ALTER INDEX agent_memories_summary_words SET (gin_pending_list_limit = 256);

-- The full-text indexes of task history served no statement: task searches run under row-level
-- security, which keeps PostgreSQL from using a GIN index for `@@` (the operator is not
-- leakproof), and nothing else searches task history by words (`idx_scan` stayed 0 on the bench
-- database through every task search). Each task write still paid for them: without them
-- `scripts/bench task-events` (ten events a request) answered 11-27% more requests at 12-24%
-- less PostgreSQL CPU a request.
DROP INDEX task_messages_search_idx;
DROP INDEX task_snapshots_search_idx;
DROP INDEX task_events_search_idx;
DROP INDEX task_step_texts_search_idx;

-- The same holds for the memories' metadata index: `@>` on jsonb is not leakproof either, so a
-- search or listing filtered by metadata tests each of the caller's memories (found through the
-- (tenant, user) indexes) and never used it. Its upkeep measured within noise (pgbench, 8
-- clients, inserts with four metadata keys: 17,237 and 16,202 rows/s with it, 18,333 and 16,271
-- without), so it goes as dead weight rather than as a speed-up.
DROP INDEX agent_memories_metadata;
