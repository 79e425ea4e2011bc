-- GET /api/me's database work: the scoped transaction and one read of the settings.
-- pgbench-mode: prepared
BEGIN;
SELECT set_config('role', 'mnemo_app', true), set_config('mnemo.tenant', 'bench', true), set_config('mnemo.user', 'u' || (:client_id % 16), true);
SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user');
COMMIT;
