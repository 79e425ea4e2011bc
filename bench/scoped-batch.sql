-- The alternative Scoped does not use: BEGIN and the settings as one simple-query batch (one round
-- trip fewer), which PostgreSQL must parse and plan on every request.
-- pgbench-mode: simple
BEGIN \; SELECT set_config('role', 'mnemo_app', true), set_config('mnemo.tenant', 'bench', true), set_config('mnemo.user', 'u' || (:client_id % 16), true);
INSERT INTO bench_rows (tenant_id, user_id, payload) VALUES ('bench', 'u' || (:client_id % 16), repeat('x', 1024));
COMMIT;
