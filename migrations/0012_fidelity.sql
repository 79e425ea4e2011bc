-- Waits that time out, and running summaries of chat sessions.

-- The wait-timeout job works across tenants like the lifecycle sweeper: its transaction runs as
-- mnemo_app with mnemo.sweeper = 'on', which this policy honours for reading task_waits only;
-- each wait it ends is changed under that wait's own tenant and user, by the ordinary policy.
CREATE POLICY wait_timeout_read ON task_waits FOR SELECT
    USING (current_setting('mnemo.sweeper', true) = 'on');
-- Only watching waits with a timeout can become overdue; the job scans just those.
CREATE INDEX task_waits_deadline_idx ON task_waits (created_at)
    WHERE status = 'watching' AND timeout_seconds IS NOT NULL;

-- A session's running summary: `message_count` counts the messages ever archived into the
-- session (kept by the trigger below, so the archive statement itself is unchanged);
-- `summary_message_count` is how many of them the summary covers. A background job refreshes
-- the summary once enough messages arrived since.
ALTER TABLE agent_sessions
    ADD COLUMN message_count integer NOT NULL DEFAULT 0,
    ADD COLUMN summary_message_count integer NOT NULL DEFAULT 0,
    ADD COLUMN summary_updated_at timestamptz;

-- Sessions that exist already start from the messages they hold. (A migration role subject to
-- row-level security sees none; those sessions then count from here on.)
UPDATE agent_sessions s
SET message_count = c.n
FROM (SELECT tenant_id, user_id, session_id, count(*)::int AS n
      FROM conversation_messages GROUP BY tenant_id, user_id, session_id) c
WHERE c.tenant_id = s.tenant_id AND c.user_id = s.user_id AND c.session_id = s.session_id;

-- One UPDATE per statement and session, whatever the size of the batch. Only rows really
-- inserted count (ON CONFLICT DO NOTHING leaves repeats out of the transition table). It runs as
-- the caller, under the caller's row-level security.
CREATE FUNCTION mnemo_count_session_messages() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE agent_sessions s
    SET message_count = s.message_count + c.n
    FROM (SELECT tenant_id, user_id, session_id, count(*)::int AS n
          FROM inserted GROUP BY tenant_id, user_id, session_id) c
    WHERE c.tenant_id = s.tenant_id AND c.user_id = s.user_id AND c.session_id = s.session_id;
    RETURN NULL;
END
$$;
CREATE TRIGGER conversation_messages_count AFTER INSERT ON conversation_messages
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION mnemo_count_session_messages();
