-- The digest's state of a task ("where was I?"): what it needs from the task's messages up to
-- `through_seq`, folded and kept in bounded size. A digest reads it and only the messages written
-- since, so its cost does not grow with the task's history. Written every 64th message.
CREATE TABLE task_digests (
    tenant_id   text        NOT NULL,
    user_id     text        NOT NULL,
    task_id     uuid        NOT NULL,
    through_seq integer     NOT NULL,
    state       jsonb       NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT task_digests_pkey PRIMARY KEY (tenant_id, user_id, task_id),
    CONSTRAINT task_digests_task_fkey FOREIGN KEY (tenant_id, user_id, task_id)
        REFERENCES tasks (tenant_id, user_id, id) ON DELETE CASCADE
);
SELECT mnemo_scope_table('task_digests');
