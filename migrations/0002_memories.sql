-- Detail memory: large tool outputs stored once, referenced by placeholders, read in
-- pages, grepped and searched.
--
-- The memory row carries the description and the totals; the content itself lives in
-- agent_memory_chunks, split on line boundaries into pieces of at most 16 KiB. Each chunk knows
-- its byte offset and its first line, so a page read fetches only the one or two chunks it
-- overlaps, and a full-text hit maps straight to a line range (a tsvector is capped at 1 MB, so
-- whole-content vectors would not work for big logs anyway).

-- The text search view of memory text. The default parser reads `/payments` or `/var/log/app`
-- as one file-path token, so a search for `payments` would miss most paths and URLs in logs;
-- slashes and backslashes become spaces first (length-preserving, so offsets still agree).
-- Queries go through mnemo_memory_query, which applies the same mapping.
CREATE FUNCTION mnemo_memory_search_text(body text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT translate(body, '/\', '  ') $$;

CREATE FUNCTION mnemo_memory_tsv(body text) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT to_tsvector('english'::regconfig, mnemo_memory_search_text(body)) $$;

CREATE FUNCTION mnemo_memory_query(query text) RETURNS tsquery
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT websearch_to_tsquery('english'::regconfig, mnemo_memory_search_text(query)) $$;

CREATE TABLE agent_memories (
    tenant_id        text        NOT NULL,
    user_id          text        NOT NULL,
    id               uuid        NOT NULL,
    memory_key       text        NOT NULL,
    agent_id         text,
    thread_id        text,
    memory_type      text        NOT NULL,
    summary          text        NOT NULL,
    content_metadata jsonb       NOT NULL DEFAULT '{}',
    size_bytes       bigint      NOT NULL,
    line_count       bigint      NOT NULL,
    token_count      bigint      NOT NULL,
    content_sha256   text        NOT NULL,
    chunk_count      integer     NOT NULL,
    version          integer     NOT NULL DEFAULT 1,
    is_active        boolean     NOT NULL DEFAULT true,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    summary_tsv      tsvector    GENERATED ALWAYS AS (mnemo_memory_tsv(summary)) STORED,
    CONSTRAINT agent_memories_pkey PRIMARY KEY (tenant_id, user_id, id),
    CONSTRAINT agent_memories_key_unique UNIQUE (tenant_id, user_id, memory_key),
    CONSTRAINT agent_memories_key_format CHECK (memory_key ~ '^[A-Za-z0-9._:-]{1,128}$'),
    CONSTRAINT agent_memories_metadata_object CHECK (jsonb_typeof(content_metadata) = 'object'),
    CONSTRAINT agent_memories_totals CHECK (size_bytes > 0 AND line_count > 0 AND token_count >= 0
                                            AND chunk_count > 0)
);
SELECT mnemo_scope_table('agent_memories');

CREATE INDEX agent_memories_thread ON agent_memories (tenant_id, user_id, thread_id, id);
CREATE INDEX agent_memories_agent ON agent_memories (tenant_id, user_id, agent_id, id);
CREATE INDEX agent_memories_created ON agent_memories (tenant_id, user_id, created_at);
-- GIN cannot lead with the text scope columns without btree_gin (not assumed available); the RLS
-- policy filters the bitmap result, and the scope btree indexes serve every other lookup.
CREATE INDEX agent_memories_metadata ON agent_memories USING gin (content_metadata jsonb_path_ops);
CREATE INDEX agent_memories_summary_tsv ON agent_memories USING gin (summary_tsv);

CREATE TABLE agent_memory_chunks (
    tenant_id   text    NOT NULL,
    user_id     text    NOT NULL,
    memory_id   uuid    NOT NULL,
    -- Byte offset of the chunk in the content, and its length in bytes.
    byte_start  bigint  NOT NULL,
    byte_len    integer NOT NULL,
    -- Line number (1-based) of the chunk's first byte, and of its last byte. A line longer than a
    -- chunk continues in the next chunk, which then starts with the same line number.
    line_start  bigint  NOT NULL,
    line_end    bigint  NOT NULL,
    content     text    NOT NULL,
    tsv         tsvector GENERATED ALWAYS AS (mnemo_memory_tsv(content)) STORED,
    CONSTRAINT agent_memory_chunks_pkey PRIMARY KEY (tenant_id, user_id, memory_id, byte_start),
    CONSTRAINT agent_memory_chunks_memory_fkey FOREIGN KEY (tenant_id, user_id, memory_id)
        REFERENCES agent_memories (tenant_id, user_id, id) ON DELETE CASCADE,
    CONSTRAINT agent_memory_chunks_ranges CHECK (byte_start >= 0 AND byte_len > 0
                                                 AND line_start >= 1 AND line_end >= line_start)
);
SELECT mnemo_scope_table('agent_memory_chunks');

CREATE INDEX agent_memory_chunks_lines
    ON agent_memory_chunks (tenant_id, user_id, memory_id, line_end, byte_start);
CREATE INDEX agent_memory_chunks_tsv ON agent_memory_chunks USING gin (tsv);
