-- Task memory: tasks, plan versions and their items, actions and action logs, the
-- append-only execution log, task messages and context snapshots.
--
-- Ordering: the execution log, messages and snapshots carry a per-task sequence number taken from a
-- counter on the task row. The counter is bumped by an UPDATE that holds the task's row lock until
-- commit, so concurrent appends to one task serialize and their sequence numbers never interleave.

CREATE TABLE tasks (
    tenant_id text NOT NULL,
    user_id text NOT NULL,
    id uuid NOT NULL,
    name text NOT NULL,
    original_user_task text,
    -- Coarse status: active, paused, completed, failed, cancelled.
    status text NOT NULL DEFAULT 'active',
    -- Fine-grained lifecycle phase (RECEIVED, PLANNING, ... see src/tasks/lifecycle.rs).
    phase text NOT NULL DEFAULT 'RECEIVED',
    metadata jsonb NOT NULL DEFAULT '{}',
    final_answer text,
    -- {failedAtStage, failedStepNarrative, errorMessage}
    error_summary jsonb,
    running_summary text,
    -- How many messages the running summary covers; the refresh runs when enough arrived since.
    summary_message_count integer NOT NULL DEFAULT 0,
    summary_updated_at timestamptz,
    -- The active plan version (0: no plan yet).
    plan_version integer NOT NULL DEFAULT 0,
    -- Per-task counters behind the sequence numbers (see the header).
    event_count bigint NOT NULL DEFAULT 0,
    message_count integer NOT NULL DEFAULT 0,
    snapshot_count integer NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(),
    plan_generated_at timestamptz,
    execution_started_at timestamptz,
    synthesis_started_at timestamptz,
    completed_at timestamptz,
    -- lastUpdatedAt: every change a client makes.
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT tasks_pkey PRIMARY KEY (tenant_id, user_id, id),
    CONSTRAINT tasks_status_check CHECK (status IN ('active', 'paused', 'completed', 'failed', 'cancelled')),
    CONSTRAINT tasks_name_check CHECK (length(name) > 0)
);
SELECT mnemo_scope_table('tasks');
CREATE INDEX tasks_status_idx ON tasks (tenant_id, user_id, status, id);
CREATE INDEX tasks_phase_idx ON tasks (tenant_id, user_id, phase, id);

-- Every plan a task ever had; a replan adds version N+1 and keeps the others.
CREATE TABLE task_plans (
    tenant_id text NOT NULL,
    user_id text NOT NULL,
    task_id uuid NOT NULL,
    version integer NOT NULL,
    -- The plan as the client sent it (a list of titles, or of stages).
    plan jsonb NOT NULL,
    reason text,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT task_plans_pkey PRIMARY KEY (tenant_id, user_id, task_id, version),
    CONSTRAINT task_plans_task_fkey FOREIGN KEY (tenant_id, user_id, task_id)
        REFERENCES tasks (tenant_id, user_id, id) ON DELETE CASCADE
);
SELECT mnemo_scope_table('task_plans');

-- The steps of each plan version. Ordinals are 1-based ("Step 1").
CREATE TABLE task_plan_items (
    tenant_id text NOT NULL,
    user_id text NOT NULL,
    task_id uuid NOT NULL,
    version integer NOT NULL,
    ordinal integer NOT NULL,
    id uuid NOT NULL,
    stage integer,
    title text NOT NULL,
    tool text,
    input jsonb,
    narrative text,
    status text NOT NULL DEFAULT 'pending',
    started_at timestamptz,
    completed_at timestamptz,
    duration_seconds double precision,
    -- The item of the previous version this one took its status from on a replan.
    rebased_from integer,
    CONSTRAINT task_plan_items_pkey PRIMARY KEY (tenant_id, user_id, task_id, version, ordinal),
    CONSTRAINT task_plan_items_plan_fkey FOREIGN KEY (tenant_id, user_id, task_id, version)
        REFERENCES task_plans (tenant_id, user_id, task_id, version) ON DELETE CASCADE,
    CONSTRAINT task_plan_items_status_check
        CHECK (status IN ('pending', 'active', 'completed', 'failed', 'skipped'))
);
SELECT mnemo_scope_table('task_plan_items');
CREATE UNIQUE INDEX task_plan_items_id_idx ON task_plan_items (tenant_id, user_id, id);

CREATE TABLE task_actions (
    tenant_id text NOT NULL,
    user_id text NOT NULL,
    id uuid NOT NULL,
    task_id uuid NOT NULL,
    version integer NOT NULL,
    ordinal integer NOT NULL,
    action_type text NOT NULL,
    summary text NOT NULL,
    status text NOT NULL DEFAULT 'completed',
    input_data jsonb,
    output_data jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT task_actions_pkey PRIMARY KEY (tenant_id, user_id, id),
    CONSTRAINT task_actions_item_fkey FOREIGN KEY (tenant_id, user_id, task_id, version, ordinal)
        REFERENCES task_plan_items (tenant_id, user_id, task_id, version, ordinal) ON DELETE CASCADE,
    CONSTRAINT task_actions_type_check
        CHECK (action_type IN ('cli', 'gui', 'wait', 'vision', 'reasoning', 'other')),
    CONSTRAINT task_actions_status_check CHECK (status IN ('started', 'completed', 'failed'))
);
SELECT mnemo_scope_table('task_actions');
CREATE INDEX task_actions_item_idx ON task_actions (tenant_id, user_id, task_id, version, ordinal, id);

CREATE TABLE task_action_logs (
    tenant_id text NOT NULL,
    user_id text NOT NULL,
    id uuid NOT NULL,
    task_id uuid NOT NULL,
    action_id uuid NOT NULL,
    log_type text NOT NULL,
    content text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT task_action_logs_pkey PRIMARY KEY (tenant_id, user_id, id),
    CONSTRAINT task_action_logs_action_fkey FOREIGN KEY (tenant_id, user_id, action_id)
        REFERENCES task_actions (tenant_id, user_id, id) ON DELETE CASCADE
);
SELECT mnemo_scope_table('task_action_logs');
CREATE INDEX task_action_logs_action_idx ON task_action_logs (tenant_id, user_id, action_id, id);

-- The execution log: append-only, ordered by seq.
CREATE TABLE task_events (
    tenant_id text NOT NULL,
    user_id text NOT NULL,
    task_id uuid NOT NULL,
    seq bigint NOT NULL,
    ts timestamptz NOT NULL DEFAULT now(),
    -- A stage number, or a label such as "Initial" or "System".
    stage jsonb,
    sub_task_id text,
    step_narrative text NOT NULL,
    tool_name text,
    status text NOT NULL,
    input_payload jsonb,
    result_data jsonb,
    error_info jsonb,
    duration_ms bigint,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT task_events_pkey PRIMARY KEY (tenant_id, user_id, task_id, seq),
    CONSTRAINT task_events_task_fkey FOREIGN KEY (tenant_id, user_id, task_id)
        REFERENCES tasks (tenant_id, user_id, id) ON DELETE CASCADE
);
SELECT mnemo_scope_table('task_events');

CREATE TABLE task_messages (
    tenant_id text NOT NULL,
    user_id text NOT NULL,
    task_id uuid NOT NULL,
    seq integer NOT NULL,
    role text NOT NULL,
    content text NOT NULL,
    msg_type text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT task_messages_pkey PRIMARY KEY (tenant_id, user_id, task_id, seq),
    CONSTRAINT task_messages_task_fkey FOREIGN KEY (tenant_id, user_id, task_id)
        REFERENCES tasks (tenant_id, user_id, id) ON DELETE CASCADE,
    CONSTRAINT task_messages_role_check CHECK (role IN ('agent', 'system', 'user')),
    CONSTRAINT task_messages_type_check
        CHECK (msg_type IN ('text', 'lifecycle', 'progress', 'wait', 'stuck', 'plan'))
);
SELECT mnemo_scope_table('task_messages');

CREATE TABLE task_snapshots (
    tenant_id text NOT NULL,
    user_id text NOT NULL,
    task_id uuid NOT NULL,
    seq integer NOT NULL,
    label text NOT NULL,
    content text NOT NULL,
    is_summarized boolean NOT NULL DEFAULT false,
    ts timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT task_snapshots_pkey PRIMARY KEY (tenant_id, user_id, task_id, seq),
    CONSTRAINT task_snapshots_task_fkey FOREIGN KEY (tenant_id, user_id, task_id)
        REFERENCES tasks (tenant_id, user_id, id) ON DELETE CASCADE
);
SELECT mnemo_scope_table('task_snapshots');
