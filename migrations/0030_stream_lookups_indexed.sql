-- A memory's stream is its agent and thread, where either may be absent. Searches look up the
-- memory before and after a hit in its stream, and the indexer the one before a memory it embeds
-- with context; those lookups compared `coalesce(agent_id, '')`. Under row-level security
-- PostgreSQL uses a condition as an index condition only when it can prove the condition leaks
-- nothing about rows the policy hides, and it proves that for CASE but not for COALESCE: the
-- stream's columns were tested row by row on every memory of the user before or after the hit,
-- so a lookup in a small stream read through the interleaved memories of every other agent and
-- thread. `mnemo_or_empty` is the same value written as a CASE, and `mnemo_same_stream` the
-- comparison every such lookup makes; PostgreSQL inlines both, so the lookup is one probe of the
-- index below whatever the other streams hold.
CREATE FUNCTION mnemo_or_empty(t text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN t IS NULL THEN '' ELSE t END;

-- Whether two memories, by their agents and threads, are in the same stream.
CREATE FUNCTION mnemo_same_stream(agent_a text, thread_a text, agent_b text, thread_b text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN mnemo_or_empty(agent_a) = mnemo_or_empty(agent_b)
   AND mnemo_or_empty(thread_a) = mnemo_or_empty(thread_b);

CREATE INDEX agent_memories_stream ON agent_memories
    (tenant_id, user_id, mnemo_or_empty(agent_id), mnemo_or_empty(thread_id), created_at, id);
DROP INDEX agent_memories_sequence;
