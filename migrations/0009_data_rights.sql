-- Data rights: erasing a whole tenant.
--
-- Erasing one user's data needs nothing new: a request runs as mnemo_app, whose policy already
-- limits every statement to the caller's tenant and user. Erasing a whole tenant touches every
-- user of it, which mnemo_app can never do. Instead of bypassing row-level security, that one
-- request switches to mnemo_eraser: it may only read and delete, and only through a policy of
-- its own that matches the rows of the tenant named in the transaction's `mnemo.tenant`
-- setting (missing setting: nothing matches).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'mnemo_eraser') THEN
        BEGIN
            CREATE ROLE mnemo_eraser NOLOGIN NOBYPASSRLS;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;
        END;
    END IF;
    IF NOT pg_has_role(current_user, 'mnemo_eraser', 'MEMBER') THEN
        EXECUTE format('GRANT mnemo_eraser TO %I', current_user);
    END IF;
END
$$;
GRANT USAGE ON SCHEMA public TO mnemo_eraser;

-- Lets mnemo_eraser read and delete the rows of one tenant of `tbl` (a table with tenant_id).
CREATE OR REPLACE FUNCTION mnemo_erasable_table(tbl regclass) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('GRANT SELECT, DELETE ON %s TO mnemo_eraser', tbl);
    IF NOT EXISTS (SELECT 1 FROM pg_policy WHERE polrelid = tbl AND polname = 'tenant_erase') THEN
        EXECUTE format(
            'CREATE POLICY tenant_erase ON %s FOR ALL TO mnemo_eraser
                 USING (tenant_id = current_setting(''mnemo.tenant'', true))',
            tbl);
    END IF;
END
$$;

-- Every table that exists now and has a tenant_id column (the vector tables too, when pgvector
-- made them already).
DO $$
DECLARE
    tbl regclass;
BEGIN
    FOR tbl IN
        SELECT c.oid::regclass
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')
          AND EXISTS (SELECT 1 FROM pg_attribute a
                      WHERE a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped)
    LOOP
        PERFORM mnemo_erasable_table(tbl);
    END LOOP;
END
$$;

-- Tables made later through mnemo_scope_table (the vector tables of a server that readies
-- pgvector at start, and every table of later migrations) become erasable the same way.
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
    PERFORM mnemo_erasable_table(tbl);
END
$$;
