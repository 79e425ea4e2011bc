-- Task workspace: structured steps with parts, artifacts stored as blobs, the
-- configuration snapshot (team.json), smart-wait jobs, full-text search over a task's
-- history, and the lifecycle columns the sweeper uses.

-- Archived tasks (completed long ago) are hidden from default listings but stay readable.
ALTER TABLE tasks ADD COLUMN archived_at timestamptz;

-- A paused task resumes on its next update: any change that moves lastUpdatedAt of a paused task
-- makes it active again. The sweeper pauses without touching updated_at, so it never resumes what
-- it just paused; an explicit status change away from `paused` is the caller's own.
CREATE FUNCTION mnemo_tasks_resume_on_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status = 'paused' AND NEW.status = 'paused' AND NEW.updated_at > OLD.updated_at THEN
        NEW.status := 'active';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER tasks_resume_on_update BEFORE UPDATE ON tasks
    FOR EACH ROW EXECUTE FUNCTION mnemo_tasks_resume_on_update();

-- The lifecycle sweeper is a background job over every tenant. It runs as mnemo_app with the
-- transaction-local setting mnemo.sweeper = 'on', which this policy honours for reading tasks
-- only; each change it makes runs with that task's own tenant and user set, under the ordinary
-- policy. Request transactions never set mnemo.sweeper.
CREATE POLICY lifecycle_sweeper_read ON tasks FOR SELECT
    USING (current_setting('mnemo.sweeper', true) = 'on');
CREATE INDEX tasks_sweep_active_idx ON tasks (updated_at) WHERE status = 'active';
CREATE INDEX tasks_sweep_completed_idx ON tasks ((coalesce(completed_at, updated_at)))
    WHERE status = 'completed' AND archived_at IS NULL;

-- The searchable form of history text. Only the first 100,000 characters of one document count
-- (a tsvector cannot exceed 1 MB); step text is chunked below that, so it is searched whole.
CREATE FUNCTION mnemo_task_doc(doc text) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT to_tsvector('english'::regconfig, left(coalesce(doc, ''), 100000))
$$;

-- The text of an execution-log event that search looks at.
CREATE FUNCTION mnemo_task_event_text(narrative text, tool text, result jsonb, error jsonb)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(narrative, '') || ' ' || coalesce(tool, '') || ' ' ||
           coalesce(result::text, '') || ' ' || coalesce(error::text, '')
$$;

CREATE INDEX task_messages_search_idx ON task_messages USING gin (mnemo_task_doc(content));
CREATE INDEX task_snapshots_search_idx ON task_snapshots
    USING gin (mnemo_task_doc(label || ' ' || content));
CREATE INDEX task_events_search_idx ON task_events
    USING gin (mnemo_task_doc(mnemo_task_event_text(step_narrative, tool_name, result_data, error_info)));

-- Steps: ordered by seq within a task; step_id is unique within a task.
CREATE TABLE task_steps (
    tenant_id text NOT NULL,
    user_id text NOT NULL,
    task_id uuid NOT NULL,
    seq integer NOT NULL,
    step_id text NOT NULL,
    agent_name text NOT NULL,
    -- [{type: text|tool_call|tool_result|artifact, ...}]
    parts jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT task_steps_pkey PRIMARY KEY (tenant_id, user_id, task_id, seq),
    CONSTRAINT task_steps_step_id_key UNIQUE (tenant_id, user_id, task_id, step_id),
    CONSTRAINT task_steps_task_fkey FOREIGN KEY (tenant_id, user_id, task_id)
        REFERENCES tasks (tenant_id, user_id, id) ON DELETE CASCADE
);
SELECT mnemo_scope_table('task_steps');

-- Every tool call a task made, so a tool_result can be checked against it.
CREATE TABLE task_tool_calls (
    tenant_id text NOT NULL,
    user_id text NOT NULL,
    task_id uuid NOT NULL,
    tool_call_id text NOT NULL,
    seq integer NOT NULL,
    part_index integer NOT NULL,
    tool_name text NOT NULL,
    CONSTRAINT task_tool_calls_pkey PRIMARY KEY (tenant_id, user_id, task_id, tool_call_id),
    CONSTRAINT task_tool_calls_step_fkey FOREIGN KEY (tenant_id, user_id, task_id, seq)
        REFERENCES task_steps (tenant_id, user_id, task_id, seq) ON DELETE CASCADE
);
SELECT mnemo_scope_table('task_tool_calls');

-- Searchable text of steps: text parts and tool results, in chunks of at most 20,000 characters.
CREATE TABLE task_step_texts (
    tenant_id text NOT NULL,
    user_id text NOT NULL,
    task_id uuid NOT NULL,
    seq integer NOT NULL,
    part_index integer NOT NULL,
    chunk integer NOT NULL,
    -- step_text or tool_result
    kind text NOT NULL,
    -- Character offset of the chunk in its part.
    char_offset integer NOT NULL,
    content text NOT NULL,
    CONSTRAINT task_step_texts_pkey PRIMARY KEY (tenant_id, user_id, task_id, seq, part_index, chunk),
    CONSTRAINT task_step_texts_step_fkey FOREIGN KEY (tenant_id, user_id, task_id, seq)
        REFERENCES task_steps (tenant_id, user_id, task_id, seq) ON DELETE CASCADE,
    CONSTRAINT task_step_texts_kind_check CHECK (kind IN ('step_text', 'tool_result'))
);
SELECT mnemo_scope_table('task_step_texts');
CREATE INDEX task_step_texts_search_idx ON task_step_texts USING gin (mnemo_task_doc(content));

-- Artifacts: blobs kept out of the history. EXTERNAL storage (out of line, uncompressed) lets a
-- Range read fetch only the TOAST chunks it needs.
CREATE TABLE task_artifacts (
    tenant_id text NOT NULL,
    user_id text NOT NULL,
    task_id uuid NOT NULL,
    id uuid NOT NULL,
    name text,
    mime_type text NOT NULL,
    size bigint NOT NULL,
    sha256 text NOT NULL,
    content bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT task_artifacts_pkey PRIMARY KEY (tenant_id, user_id, task_id, id),
    CONSTRAINT task_artifacts_task_fkey FOREIGN KEY (tenant_id, user_id, task_id)
        REFERENCES tasks (tenant_id, user_id, id) ON DELETE CASCADE,
    CONSTRAINT task_artifacts_size_check CHECK (size = octet_length(content))
);
SELECT mnemo_scope_table('task_artifacts');
ALTER TABLE task_artifacts ALTER COLUMN content SET STORAGE EXTERNAL;

-- The configuration snapshot a task started with (its team.json); written once.
CREATE TABLE task_configs (
    tenant_id text NOT NULL,
    user_id text NOT NULL,
    task_id uuid NOT NULL,
    config jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT task_configs_pkey PRIMARY KEY (tenant_id, user_id, task_id),
    CONSTRAINT task_configs_task_fkey FOREIGN KEY (tenant_id, user_id, task_id)
        REFERENCES tasks (tenant_id, user_id, id) ON DELETE CASCADE
);
SELECT mnemo_scope_table('task_configs');

-- Smart-wait jobs linked to a task.
CREATE TABLE task_waits (
    tenant_id text NOT NULL,
    user_id text NOT NULL,
    task_id uuid NOT NULL,
    id uuid NOT NULL,
    target_type text NOT NULL,
    target_id text NOT NULL,
    criteria text NOT NULL,
    timeout_seconds bigint,
    poll_interval double precision,
    status text NOT NULL DEFAULT 'watching',
    result_message text,
    created_at timestamptz NOT NULL DEFAULT now(),
    resolved_at timestamptz,
    CONSTRAINT task_waits_pkey PRIMARY KEY (tenant_id, user_id, task_id, id),
    CONSTRAINT task_waits_task_fkey FOREIGN KEY (tenant_id, user_id, task_id)
        REFERENCES tasks (tenant_id, user_id, id) ON DELETE CASCADE,
    CONSTRAINT task_waits_status_check
        CHECK (status IN ('watching', 'resolved', 'timeout', 'cancelled', 'error'))
);
SELECT mnemo_scope_table('task_waits');
