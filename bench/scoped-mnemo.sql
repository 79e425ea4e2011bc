-- What Scoped does: BEGIN, one prepared statement switching the role and setting tenant and user,
-- the INSERT under row-level security as mnemo_app, COMMIT.
-- pgbench-mode: prepared
BEGIN;
SELECT set_config('role', 'mnemo_app', true), set_config('mnemo.tenant', 'bench', true), set_config('mnemo.user', 'u' || (:client_id % 16), true);
INSERT INTO bench_rows (tenant_id, user_id, payload) VALUES ('bench', 'u' || (:client_id % 16), repeat('x', 1024));
COMMIT;
