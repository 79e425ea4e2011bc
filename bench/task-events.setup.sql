-- One task per pgbench client (user pgbench-task-<client>), as mnemo-bench has one per client.
DELETE FROM tasks WHERE tenant_id = 'bench' AND user_id LIKE 'pgbench-task-%';
INSERT INTO tasks (tenant_id, user_id, id, name)
SELECT 'bench', 'pgbench-task-' || c, ('00000000-0000-7000-8000-' || lpad(c::text, 12, '0'))::uuid, 'bench task ' || c
FROM generate_series(0, 63) c;
