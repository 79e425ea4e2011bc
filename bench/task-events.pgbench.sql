-- Raw equivalent of POST /api/tasks/{id}/events with 10 events: the service's one statement (the
-- task row's counter bump, which orders the log, and the multi-row INSERT), prepared, autocommit,
-- no scoping. One task per client, as mnemo-bench.
WITH t AS (
    UPDATE tasks SET event_count = event_count + 10, updated_at = now()
    WHERE tenant_id = 'bench' AND user_id = 'pgbench-task-' || :client_id
      AND id = ('00000000-0000-7000-8000-' || lpad(:client_id::text, 12, '0'))::uuid
    RETURNING tenant_id, user_id, id, event_count - 10 AS base)
INSERT INTO task_events (tenant_id, user_id, task_id, seq, ts, stage, sub_task_id, step_narrative, tool_name,
    status, input_payload, result_data, error_info, duration_ms)
SELECT t.tenant_id, t.user_id, t.id, t.base + v.i, now(), v.stage, v.sub_task_id, v.step_narrative, v.tool_name,
       v.status, v.input_payload, v.result_data, v.error_info, v.duration_ms
FROM t CROSS JOIN (VALUES
        (1::bigint, '1'::jsonb, 'sub-1'::text, 'step 1 of the batch'::text, 'cli'::text, 'COMPLETED'::text, '{"cmd": "docker build ."}'::jsonb, '{"exit": 0}'::jsonb, NULL::jsonb, 12::bigint),
        (2, '1', 'sub-1', 'step 2 of the batch', 'cli', 'COMPLETED', '{"cmd": "docker build ."}', '{"exit": 0}', NULL, 12),
        (3, '1', 'sub-1', 'step 3 of the batch', 'cli', 'COMPLETED', '{"cmd": "docker build ."}', '{"exit": 0}', NULL, 12),
        (4, '1', 'sub-1', 'step 4 of the batch', 'cli', 'COMPLETED', '{"cmd": "docker build ."}', '{"exit": 0}', NULL, 12),
        (5, '1', 'sub-1', 'step 5 of the batch', 'cli', 'COMPLETED', '{"cmd": "docker build ."}', '{"exit": 0}', NULL, 12),
        (6, '1', 'sub-1', 'step 6 of the batch', 'cli', 'COMPLETED', '{"cmd": "docker build ."}', '{"exit": 0}', NULL, 12),
        (7, '1', 'sub-1', 'step 7 of the batch', 'cli', 'COMPLETED', '{"cmd": "docker build ."}', '{"exit": 0}', NULL, 12),
        (8, '1', 'sub-1', 'step 8 of the batch', 'cli', 'COMPLETED', '{"cmd": "docker build ."}', '{"exit": 0}', NULL, 12),
        (9, '1', 'sub-1', 'step 9 of the batch', 'cli', 'COMPLETED', '{"cmd": "docker build ."}', '{"exit": 0}', NULL, 12),
        (10, '1', 'sub-1', 'step 10 of the batch', 'cli', 'COMPLETED', '{"cmd": "docker build ."}', '{"exit": 0}', NULL, 12)
    ) AS v(i, stage, sub_task_id, step_narrative, tool_name, status, input_payload, result_data, error_info, duration_ms)
RETURNING seq;
