-- Conversation memory: sessions, archived messages, one row per archive batch.

-- One row per chat session, created the first time a batch for it arrives. `version` grows with
-- every archive into the session: a replica's short-term window cache is valid only while the
-- version it cached is still the one stored here.
CREATE TABLE agent_sessions (
    tenant_id        text        NOT NULL,
    user_id          text        NOT NULL,
    session_id       text        NOT NULL,
    agent_name       text        NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    last_activity_at timestamptz NOT NULL DEFAULT now(),
    summary          text,
    version          bigint      NOT NULL DEFAULT 1,
    CONSTRAINT agent_sessions_pkey PRIMARY KEY (tenant_id, user_id, session_id)
);
SELECT mnemo_scope_table('agent_sessions');
CREATE INDEX agent_sessions_by_activity
    ON agent_sessions (tenant_id, user_id, last_activity_at DESC, session_id);

-- Every archived message once: the client's message id is the natural key within its session, so
-- re-sending the whole visible conversation stores nothing twice (INSERT ... ON CONFLICT DO NOTHING).
-- `seq` orders messages that share a timestamp in the order they were first archived.
CREATE TABLE conversation_messages (
    tenant_id    text        NOT NULL,
    user_id      text        NOT NULL,
    session_id   text        NOT NULL,
    message_id   text        NOT NULL,
    seq          bigint      GENERATED ALWAYS AS IDENTITY,
    sender       text        NOT NULL CHECK (sender IN ('user', 'ai', 'tool')),
    text         text        NOT NULL,
    sent_at      timestamptz NOT NULL,
    archived_at  timestamptz NOT NULL DEFAULT now(),
    -- OpenAI-style tool calls of an `ai` message, and the call a `tool` message answers.
    tool_calls   jsonb,
    tool_call_id text,
    CONSTRAINT conversation_messages_pkey PRIMARY KEY (tenant_id, user_id, session_id, message_id),
    CONSTRAINT conversation_messages_session_fkey FOREIGN KEY (tenant_id, user_id, session_id)
        REFERENCES agent_sessions (tenant_id, user_id, session_id) ON DELETE CASCADE
);
SELECT mnemo_scope_table('conversation_messages');
CREATE INDEX conversation_messages_by_time
    ON conversation_messages (tenant_id, user_id, session_id, sent_at, seq);

-- One row per archive batch (what arrived when, and how much of it was new).
CREATE TABLE recent_conversation_history (
    tenant_id       text        NOT NULL,
    user_id         text        NOT NULL,
    id              uuid        NOT NULL,
    session_id      text        NOT NULL,
    archived_at     timestamptz NOT NULL DEFAULT now(),
    start_timestamp timestamptz,
    end_timestamp   timestamptz,
    message_count   integer     NOT NULL,
    new_count       integer     NOT NULL,
    duplicate_count integer     NOT NULL,
    CONSTRAINT recent_conversation_history_pkey PRIMARY KEY (tenant_id, user_id, id),
    CONSTRAINT recent_conversation_history_session_fkey FOREIGN KEY (tenant_id, user_id, session_id)
        REFERENCES agent_sessions (tenant_id, user_id, session_id) ON DELETE CASCADE
);
SELECT mnemo_scope_table('recent_conversation_history');
CREATE INDEX recent_conversation_history_by_session
    ON recent_conversation_history (tenant_id, user_id, session_id, archived_at);

-- The retention sweeper is a background job over every tenant. It does not use the request path
-- (mnemo_app + tenant settings); it switches to this role, which may only read and delete these
-- tables, through policies of its own that match every row.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'mnemo_retention') THEN
        BEGIN
            CREATE ROLE mnemo_retention NOLOGIN NOBYPASSRLS;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;
        END;
    END IF;
    IF NOT pg_has_role(current_user, 'mnemo_retention', 'MEMBER') THEN
        EXECUTE format('GRANT mnemo_retention TO %I', current_user);
    END IF;
END
$$;
GRANT USAGE ON SCHEMA public TO mnemo_retention;
GRANT SELECT, DELETE ON agent_sessions, conversation_messages, recent_conversation_history
    TO mnemo_retention;
CREATE POLICY retention_sweep ON agent_sessions FOR ALL TO mnemo_retention USING (true);
CREATE POLICY retention_sweep ON conversation_messages FOR ALL TO mnemo_retention USING (true);
CREATE POLICY retention_sweep ON recent_conversation_history FOR ALL TO mnemo_retention
    USING (true);

-- The sweeper finds expired rows across tenants by age; these indexes serve only it.
CREATE INDEX conversation_messages_by_archived_at ON conversation_messages (archived_at);
CREATE INDEX recent_conversation_history_by_archived_at
    ON recent_conversation_history (archived_at);
CREATE INDEX agent_sessions_by_last_activity ON agent_sessions (last_activity_at);
