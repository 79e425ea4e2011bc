-- What Scoped::begin does: BEGIN and the three set_config calls in one simple-query batch, then the
-- pgbench-mode: simple
-- INSERT under row-level security as mnemo_app, then COMMIT (three round trips).
BEGIN \; SELECT set_config('role', 'mnemo_app', true), set_config('mnemo.tenant', 'bench', true), set_config('mnemo.user', 'u' || (:client_id % 16), true);
INSERT INTO bench_rows (tenant_id, user_id, payload) VALUES ('bench', 'u' || (:client_id % 16), repeat('x', 1024));
COMMIT;
