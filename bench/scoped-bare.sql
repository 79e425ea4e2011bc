-- The raw limit: one INSERT of a 1 KB row, autocommit, one round trip.
-- pgbench-mode: prepared
INSERT INTO bench_rows (tenant_id, user_id, payload) VALUES ('bench', 'u' || (:client_id % 16), repeat('x', 1024));
