-- A task's action logs in the order its export writes them, found by the task.
--
-- The export of one task read its logs by task, and no index held the task: every log of the
-- user was read and the task's kept. A user whose other tasks hold 100,000 logs took 74 ms to
-- read one task's 10,000 (`EXPLAIN ANALYZE`, a user the statistics did not know yet), and the
-- time grew with the other tasks. With the index the read is one range in the export's order
-- (10.6 ms, no sort), however many logs the other tasks hold. A log append writes one more
-- index entry.
CREATE INDEX task_action_logs_task_idx
    ON task_action_logs (tenant_id, user_id, task_id, created_at, id);
