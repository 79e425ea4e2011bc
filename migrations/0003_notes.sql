-- Long-term notes: one Markdown document per (tenant, user, agent_name), with a version
-- that every write increments (the ETag of the REST form), and the last N revisions of it.
--
-- Writers lock the notes row (SELECT ... FOR UPDATE, inserting a version-0 row first when there is
-- none), so concurrent appends run one after another. A version-0 row holds no notes: it is the
-- lock placeholder of a first write and reads as "never written".
CREATE TABLE agent_long_term_memory (
    tenant_id  text        NOT NULL,
    user_id    text        NOT NULL,
    agent_name text        NOT NULL,
    notes      text        NOT NULL DEFAULT '',
    version    bigint      NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT agent_long_term_memory_pkey PRIMARY KEY (tenant_id, user_id, agent_name),
    CONSTRAINT agent_long_term_memory_agent_name_check
        CHECK (agent_name ~ '^[A-Za-z0-9._-]{1,64}$'),
    CONSTRAINT agent_long_term_memory_version_check CHECK (version >= 0)
);
SELECT mnemo_scope_table('agent_long_term_memory');

-- One row per version: the notes as that write left them. Pruned on write to the newest N
-- (MNEMO_NOTES_REVISIONS_KEPT); versions of one agent are contiguous, so "version <= new - N" is
-- exactly the ones to drop.
CREATE TABLE agent_long_term_memory_revisions (
    tenant_id     text        NOT NULL,
    user_id       text        NOT NULL,
    agent_name    text        NOT NULL,
    version       bigint      NOT NULL,
    operation     text        NOT NULL,
    restored_from bigint,
    notes         text        NOT NULL,
    size_bytes    integer     NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT agent_long_term_memory_revisions_pkey
        PRIMARY KEY (tenant_id, user_id, agent_name, version),
    CONSTRAINT agent_long_term_memory_revisions_notes_fkey
        FOREIGN KEY (tenant_id, user_id, agent_name)
        REFERENCES agent_long_term_memory (tenant_id, user_id, agent_name) ON DELETE CASCADE,
    CONSTRAINT agent_long_term_memory_revisions_operation_check CHECK (operation IN (
        'overwrite', 'append', 'prepend', 'delete_section_by_header',
        'replace_section_by_header', 'delete_all_notes', 'restore'))
);
SELECT mnemo_scope_table('agent_long_term_memory_revisions');
