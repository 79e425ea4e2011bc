-- Tenancy foundation: the role every request runs as, and the one policy every table uses.
--
-- mnemo_app has no LOGIN and no BYPASSRLS. Requests switch to it inside their transaction
-- (set_config('role', 'mnemo_app', true)), so row-level security applies even when the pool logs in
-- as a superuser. Roles are cluster-wide: creating it tolerates a concurrent creator.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'mnemo_app') THEN
        BEGIN
            CREATE ROLE mnemo_app NOLOGIN NOBYPASSRLS;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;
        END;
    END IF;
    IF NOT pg_has_role(current_user, 'mnemo_app', 'MEMBER') THEN
        EXECUTE format('GRANT mnemo_app TO %I', current_user);
    END IF;
END
$$;

GRANT USAGE ON SCHEMA public TO mnemo_app;

-- Makes a table tenant- and user-scoped: ENABLE + FORCE row-level security, one policy comparing
-- tenant_id and user_id with the transaction's settings (missing settings match nothing: fail
-- closed), and the table rights mnemo_app needs. Every table calls this in its own migration.
CREATE OR REPLACE FUNCTION mnemo_scope_table(tbl regclass) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', tbl);
    EXECUTE format('ALTER TABLE %s FORCE ROW LEVEL SECURITY', tbl);
    EXECUTE format(
        'CREATE POLICY tenant_user_isolation ON %s
             USING (tenant_id = current_setting(''mnemo.tenant'', true)
                    AND user_id = current_setting(''mnemo.user'', true))
             WITH CHECK (tenant_id = current_setting(''mnemo.tenant'', true)
                    AND user_id = current_setting(''mnemo.user'', true))',
        tbl);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO mnemo_app', tbl);
END
$$;
