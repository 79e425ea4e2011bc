-- The sweepers that read across tenants (the task lifecycle, the wait timeouts and the expiry of
-- idempotency records) get a role of their own, as the retention sweeper and the indexer have.
--
-- They ran as mnemo_app with the transaction-local setting mnemo.sweeper = 'on', which policies
-- on tasks, task_waits and idempotency_keys honoured. Those policies applied to every role, so
-- each request's statement on these tables was confined by "the caller's rows OR the sweeper is
-- on": PostgreSQL cannot search an index with such a condition, and a task looked up by id was
-- found by reading every tenant's tasks (a sequential scan of 30,000 tasks, 2 ms, for one row).
-- Granted to mnemo_sweeper only, the policies leave a request's statements confined by the
-- caller's tenant and user alone, which the indexes that lead with them answer. The sweepers
-- read as mnemo_sweeper, and make each change as mnemo_app acting as the row's own user.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'mnemo_sweeper') THEN
        BEGIN
            CREATE ROLE mnemo_sweeper NOLOGIN NOBYPASSRLS;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;
        END;
    END IF;
    IF NOT pg_has_role(current_user, 'mnemo_sweeper', 'MEMBER') THEN
        EXECUTE format('GRANT mnemo_sweeper TO %I', current_user);
    END IF;
END
$$;
GRANT USAGE ON SCHEMA public TO mnemo_sweeper;
GRANT SELECT ON tasks, task_waits TO mnemo_sweeper;
GRANT SELECT, DELETE ON idempotency_keys TO mnemo_sweeper;

DROP POLICY lifecycle_sweeper_read ON tasks;
DROP POLICY wait_timeout_read ON task_waits;
DROP POLICY idempotency_sweep_read ON idempotency_keys;
DROP POLICY idempotency_sweep_delete ON idempotency_keys;

CREATE POLICY lifecycle_sweeper_read ON tasks FOR SELECT TO mnemo_sweeper USING (true);
CREATE POLICY wait_timeout_read ON task_waits FOR SELECT TO mnemo_sweeper USING (true);
CREATE POLICY idempotency_sweep_read ON idempotency_keys FOR SELECT TO mnemo_sweeper
    USING (expires_at <= now());
CREATE POLICY idempotency_sweep_delete ON idempotency_keys FOR DELETE TO mnemo_sweeper
    USING (expires_at <= now());
