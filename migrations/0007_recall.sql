-- Semantic search: an outbox of what to embed, and the vectors of memory chunks.
--
-- No model runs on a write path. A write that changes searchable text adds a row to
-- embedding_outbox in its own transaction; the background indexer claims rows (FOR UPDATE SKIP
-- LOCKED, so replicas share the work), embeds the text and stores the vectors. Keyword search
-- sees a write at once, semantic search once the indexer has run.

CREATE TABLE embedding_outbox (
    tenant_id   text        NOT NULL,
    user_id     text        NOT NULL,
    id          bigint      GENERATED ALWAYS AS IDENTITY,
    -- What to embed: 'memory' = the chunks of agent_memories row memory_id; 'message' = the
    -- conversation message (session_id, message_id).
    kind        text        NOT NULL,
    memory_id   uuid,
    session_id  text,
    message_id  text,
    enqueued_at timestamptz NOT NULL DEFAULT now(),
    -- Failed attempts so far; the next one waits until not_before (exponential backoff).
    attempts    integer     NOT NULL DEFAULT 0,
    not_before  timestamptz NOT NULL DEFAULT now(),
    last_error  text,
    CONSTRAINT embedding_outbox_pkey PRIMARY KEY (tenant_id, user_id, id),
    CONSTRAINT embedding_outbox_kind CHECK (
        (kind = 'memory' AND memory_id IS NOT NULL)
        OR (kind = 'message' AND session_id IS NOT NULL AND message_id IS NOT NULL))
);
SELECT mnemo_scope_table('embedding_outbox');
CREATE INDEX embedding_outbox_due ON embedding_outbox (not_before, id);
CREATE INDEX embedding_outbox_memory ON embedding_outbox (tenant_id, user_id, memory_id)
    WHERE kind = 'memory';
CREATE INDEX embedding_outbox_message
    ON embedding_outbox (tenant_id, user_id, session_id, message_id) WHERE kind = 'message';

-- The indexer works for every tenant. Like the retention sweeper it does not use the request
-- path; it switches to this role, whose own policies let it work the outbox, read the text to
-- embed and write vectors, and nothing else.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'mnemo_indexer') THEN
        BEGIN
            CREATE ROLE mnemo_indexer NOLOGIN NOBYPASSRLS;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;
        END;
    END IF;
    IF NOT pg_has_role(current_user, 'mnemo_indexer', 'MEMBER') THEN
        EXECUTE format('GRANT mnemo_indexer TO %I', current_user);
    END IF;
END
$$;
GRANT USAGE ON SCHEMA public TO mnemo_indexer;
GRANT SELECT, INSERT, UPDATE, DELETE ON embedding_outbox TO mnemo_indexer;
GRANT SELECT ON agent_memories, agent_memory_chunks, conversation_messages TO mnemo_indexer;
CREATE POLICY indexer_work ON embedding_outbox FOR ALL TO mnemo_indexer
    USING (true) WITH CHECK (true);
CREATE POLICY indexer_read ON agent_memories FOR SELECT TO mnemo_indexer USING (true);
CREATE POLICY indexer_read ON agent_memory_chunks FOR SELECT TO mnemo_indexer USING (true);
CREATE POLICY indexer_read ON conversation_messages FOR SELECT TO mnemo_indexer USING (true);

-- Conversation messages become searchable by words: the same text-search view as memories.
ALTER TABLE conversation_messages
    ADD COLUMN tsv tsvector GENERATED ALWAYS AS (mnemo_memory_tsv(text)) STORED;
CREATE INDEX conversation_messages_tsv ON conversation_messages USING gin (tsv);
-- Search hits name messages by their seq; this finds them without walking the caller's rows.
CREATE INDEX conversation_messages_by_seq ON conversation_messages (tenant_id, user_id, seq);

-- Vectors need the pgvector extension, which a deployment may not have: keyword search works
-- without it. This creates the extension (when available and allowed) and the vector table; it
-- runs here and again when a server with an embedder starts, and answers whether the table
-- exists.
--
-- memory_vectors holds one vector per chunk and model, message_vectors one per message and model. The column has no fixed dimension, so
-- a model change needs no migration: each model gets a partial HNSW index over
-- `embedding::vector(N)` (made by the server for its model), and searches compare only vectors
-- of the server's model. Deleting or replacing a chunk deletes its vectors.
CREATE FUNCTION mnemo_create_vector_tables() RETURNS boolean
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
        tenant_id   text        NOT NULL,
        user_id     text        NOT NULL,
        memory_id   uuid        NOT NULL,
        byte_start  bigint      NOT NULL,
        model       text        NOT NULL,
        embedding   vector      NOT NULL,
        embedded_at timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT memory_vectors_pkey
            PRIMARY KEY (tenant_id, user_id, memory_id, byte_start, model),
        CONSTRAINT memory_vectors_chunk_fkey FOREIGN KEY (tenant_id, user_id, memory_id, byte_start)
            REFERENCES agent_memory_chunks (tenant_id, user_id, memory_id, byte_start)
            ON DELETE CASCADE
    );
    PERFORM mnemo_scope_table('memory_vectors');
    GRANT SELECT, INSERT, DELETE ON memory_vectors TO mnemo_indexer;
    CREATE POLICY indexer_write ON memory_vectors FOR ALL TO mnemo_indexer
        USING (true) WITH CHECK (true);

    CREATE TABLE message_vectors (
        tenant_id   text        NOT NULL,
        user_id     text        NOT NULL,
        session_id  text        NOT NULL,
        message_id  text        NOT NULL,
        model       text        NOT NULL,
        embedding   vector      NOT NULL,
        embedded_at timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT message_vectors_pkey
            PRIMARY KEY (tenant_id, user_id, session_id, message_id, model),
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
SELECT mnemo_create_vector_tables();
