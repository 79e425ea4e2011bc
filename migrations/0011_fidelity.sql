-- Waits that time out.

-- The wait-timeout job works across tenants like the lifecycle sweeper: its transaction runs as
-- mnemo_app with mnemo.sweeper = 'on', which this policy honours for reading task_waits only;
-- each wait it ends is changed under that wait's own tenant and user, by the ordinary policy.
CREATE POLICY wait_timeout_read ON task_waits FOR SELECT
    USING (current_setting('mnemo.sweeper', true) = 'on');
-- Only watching waits with a timeout can become overdue; the job scans just those.
CREATE INDEX task_waits_deadline_idx ON task_waits (created_at)
    WHERE status = 'watching' AND timeout_seconds IS NOT NULL;
