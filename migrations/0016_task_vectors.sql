-- Task history becomes searchable by meaning, like detail memories and conversation messages.
--
-- A write to a task's history (a message, a batch of log events, a snapshot, a step's texts)
-- queues the new items in embedding_outbox in its own transaction; the background indexer embeds
-- them into task_vectors. A step is queued once and brings all of its text chunks.

ALTER TABLE embedding_outbox
    ADD COLUMN task_id uuid,
    -- 'message', 'event', 'snapshot' or 'step' (all text chunks of the step task_seq).
    ADD COLUMN task_source text,
    ADD COLUMN task_seq bigint,
    DROP CONSTRAINT embedding_outbox_kind,
    ADD CONSTRAINT embedding_outbox_kind CHECK (
        (kind = 'memory' AND memory_id IS NOT NULL)
        OR (kind = 'message' AND session_id IS NOT NULL AND message_id IS NOT NULL)
        OR (kind = 'task' AND task_id IS NOT NULL AND task_seq IS NOT NULL
            AND task_source IN ('message', 'event', 'snapshot', 'step')));
CREATE INDEX embedding_outbox_task
    ON embedding_outbox (tenant_id, user_id, task_id, task_source, task_seq) WHERE kind = 'task';

-- The indexer reads the texts it embeds, and nothing else of a task.
GRANT SELECT ON task_messages, task_events, task_snapshots, task_step_texts TO mnemo_indexer;
CREATE POLICY indexer_read ON task_messages FOR SELECT TO mnemo_indexer USING (true);
CREATE POLICY indexer_read ON task_events FOR SELECT TO mnemo_indexer USING (true);
CREATE POLICY indexer_read ON task_snapshots FOR SELECT TO mnemo_indexer USING (true);
CREATE POLICY indexer_read ON task_step_texts FOR SELECT TO mnemo_indexer USING (true);

-- The vector tables, now with task_vectors: each table is made when missing, so a database that
-- had pgvector before gains the new one and a database that gets pgvector later gains all three.
--
-- task_vectors holds one vector per task text item, model and context flag. An item is a message,
-- an event or a snapshot (`part_index` and `char_offset` -1) or one chunk of a step's text or tool
-- result (`source` 'step_text' / 'tool_result', its part and the chunk's character offset). Task
-- history is only ever deleted with its task, and the vectors go with it.
CREATE OR REPLACE FUNCTION mnemo_create_vector_tables() RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF to_regclass('task_vectors') IS NOT NULL THEN
        RETURN true;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector') THEN
        IF NOT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector') THEN
            RETURN false;
        END IF;
        BEGIN
            CREATE EXTENSION IF NOT EXISTS vector;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE NOTICE 'pgvector is installed but this role may not create it: %', SQLERRM;
            RETURN false;
        END;
    END IF;
    IF to_regclass('memory_vectors') IS NULL THEN
        CREATE TABLE memory_vectors (
            tenant_id    text        NOT NULL,
            user_id      text        NOT NULL,
            memory_id    uuid        NOT NULL,
            byte_start   bigint      NOT NULL,
            model        text        NOT NULL,
            with_context boolean     NOT NULL DEFAULT false,
            embedding    vector      NOT NULL,
            embedded_at  timestamptz NOT NULL DEFAULT now(),
            CONSTRAINT memory_vectors_pkey
                PRIMARY KEY (tenant_id, user_id, memory_id, byte_start, model, with_context),
            CONSTRAINT memory_vectors_chunk_fkey
                FOREIGN KEY (tenant_id, user_id, memory_id, byte_start)
                REFERENCES agent_memory_chunks (tenant_id, user_id, memory_id, byte_start)
                ON DELETE CASCADE
        );
        PERFORM mnemo_scope_table('memory_vectors');
        GRANT SELECT, INSERT, DELETE ON memory_vectors TO mnemo_indexer;
        CREATE POLICY indexer_write ON memory_vectors FOR ALL TO mnemo_indexer
            USING (true) WITH CHECK (true);
    END IF;
    IF to_regclass('message_vectors') IS NULL THEN
        CREATE TABLE message_vectors (
            tenant_id    text        NOT NULL,
            user_id      text        NOT NULL,
            session_id   text        NOT NULL,
            message_id   text        NOT NULL,
            model        text        NOT NULL,
            with_context boolean     NOT NULL DEFAULT false,
            embedding    vector      NOT NULL,
            embedded_at  timestamptz NOT NULL DEFAULT now(),
            CONSTRAINT message_vectors_pkey
                PRIMARY KEY (tenant_id, user_id, session_id, message_id, model, with_context),
            CONSTRAINT message_vectors_message_fkey
                FOREIGN KEY (tenant_id, user_id, session_id, message_id)
                REFERENCES conversation_messages (tenant_id, user_id, session_id, message_id)
                ON DELETE CASCADE
        );
        PERFORM mnemo_scope_table('message_vectors');
        GRANT SELECT, INSERT, DELETE ON message_vectors TO mnemo_indexer;
        CREATE POLICY indexer_write ON message_vectors FOR ALL TO mnemo_indexer
            USING (true) WITH CHECK (true);
    END IF;
    CREATE TABLE task_vectors (
        tenant_id    text        NOT NULL,
        user_id      text        NOT NULL,
        task_id      uuid        NOT NULL,
        source       text        NOT NULL,
        seq          bigint      NOT NULL,
        part_index   integer     NOT NULL DEFAULT -1,
        char_offset  integer     NOT NULL DEFAULT -1,
        model        text        NOT NULL,
        with_context boolean     NOT NULL DEFAULT false,
        embedding    vector      NOT NULL,
        embedded_at  timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT task_vectors_pkey PRIMARY KEY
            (tenant_id, user_id, task_id, source, seq, part_index, char_offset, model, with_context),
        CONSTRAINT task_vectors_task_fkey FOREIGN KEY (tenant_id, user_id, task_id)
            REFERENCES tasks (tenant_id, user_id, id) ON DELETE CASCADE,
        CONSTRAINT task_vectors_source_check
            CHECK (source IN ('message', 'event', 'snapshot', 'step_text', 'tool_result'))
    );
    PERFORM mnemo_scope_table('task_vectors');
    GRANT SELECT, INSERT, DELETE ON task_vectors TO mnemo_indexer;
    CREATE POLICY indexer_write ON task_vectors FOR ALL TO mnemo_indexer
        USING (true) WITH CHECK (true);
    RETURN true;
END
$$;
SELECT mnemo_create_vector_tables();
