-- Conversational context for recall.
--
-- A short reply ("Yes, last Saturday!") says little on its own: what it answers is in the text
-- written just before it. So a chunk or message gets a second vector, of the text before it and
-- itself together (`with_context`); a search keeps the closer of the two. And a hit borrows part
-- of the score of its neighbours in the same stream, which needs "the memory before / after this
-- one in its agent's thread" to be an index lookup.

CREATE INDEX agent_memories_sequence ON agent_memories
    (tenant_id, user_id, (coalesce(agent_id, '')), (coalesce(thread_id, '')), created_at, id);

DO $$
BEGIN
    IF to_regclass('memory_vectors') IS NOT NULL THEN
        ALTER TABLE memory_vectors ADD COLUMN with_context boolean NOT NULL DEFAULT false;
        ALTER TABLE memory_vectors DROP CONSTRAINT memory_vectors_pkey,
            ADD CONSTRAINT memory_vectors_pkey
                PRIMARY KEY (tenant_id, user_id, memory_id, byte_start, model, with_context);
    END IF;
    IF to_regclass('message_vectors') IS NOT NULL THEN
        ALTER TABLE message_vectors ADD COLUMN with_context boolean NOT NULL DEFAULT false;
        ALTER TABLE message_vectors DROP CONSTRAINT message_vectors_pkey,
            ADD CONSTRAINT message_vectors_pkey
                PRIMARY KEY (tenant_id, user_id, session_id, message_id, model, with_context);
    END IF;
END
$$;

-- The same tables as before, with the context flag, for databases that get pgvector later.
CREATE OR REPLACE FUNCTION mnemo_create_vector_tables() RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF to_regclass('memory_vectors') IS NOT NULL THEN
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
        CONSTRAINT memory_vectors_chunk_fkey FOREIGN KEY (tenant_id, user_id, memory_id, byte_start)
            REFERENCES agent_memory_chunks (tenant_id, user_id, memory_id, byte_start)
            ON DELETE CASCADE
    );
    PERFORM mnemo_scope_table('memory_vectors');
    GRANT SELECT, INSERT, DELETE ON memory_vectors TO mnemo_indexer;
    CREATE POLICY indexer_write ON memory_vectors FOR ALL TO mnemo_indexer
        USING (true) WITH CHECK (true);

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
    RETURN true;
END
$$;
