-- The histories of `scripts/bench --scale`: one user (psql -v user=...) of tenant `bench` with
-- `sessions` chat sessions of 1,000 messages each (a batch record per session) and `memories`
-- memories of one chunk each. The defaults, 1,000 sessions (1,000,000 messages) and 100,000
-- memories, are the 100x history; `-v sessions=10 -v memories=1000` is the small user's, a
-- hundredth of it. Runs as the superuser (no row-level security in the way), in one transaction,
-- then ANALYZE. Message times lie before the bench's own (2026-11-21), so windows and pages read
-- what the bench writes on top of this history.
\set ON_ERROR_STOP on
\if :{?sessions}
\else
\set sessions 1000
\endif
\if :{?memories}
\else
\set memories 100000
\endif
-- `-v analyze=0` skips the closing ANALYZE (a hundredth more rows leaves the statistics as
-- they were, and the ANALYZE of the tables is most of a small load's time).
\if :{?analyze}
\else
\set analyze 1
\endif
BEGIN;
-- Each session's running summary is current (covers its 1,000 messages), as the summary job
-- would have left it.
INSERT INTO agent_sessions (tenant_id, user_id, session_id, agent_name, created_at,
                            last_activity_at, version, message_count, summary,
                            summary_message_count, summary_updated_at)
SELECT 'bench', :'user', 's' || s, 'assistant', timestamptz '2026-01-01' + s * interval '1 minute',
       timestamptz '2026-06-01' + s * interval '1 minute', 1000, 1000,
       'The user and the assistant went through the nightly build of session ' || s || '.',
       1000, timestamptz '2026-06-01'
FROM generate_series(0, :sessions - 1) s;

INSERT INTO conversation_messages (tenant_id, user_id, session_id, message_id, sender, text, sent_at)
SELECT 'bench', :'user', 's' || (i % :sessions), 'h' || (i / :sessions),
       CASE WHEN i % 2 = 0 THEN 'user' ELSE 'ai' END,
       'history ' || i || ': ' || (ARRAY['deploy', 'timeout', 'cache', 'migration', 'index',
                                        'rollback', 'latency', 'quota'])[1 + i % 8]
           || ' of the nightly build, the integration tests and the database step; '
           || (ARRAY['retry it', 'looks fine', 'needs a fix', 'ask the team'])[1 + (i / 8) % 4],
       timestamptz '2026-01-01' + (i / :sessions) * interval '1 minute'
           + (i % :sessions) * interval '1 ms'
FROM generate_series(0, :sessions * 1000 - 1) i;

INSERT INTO recent_conversation_history (tenant_id, user_id, id, session_id, start_timestamp,
                                         end_timestamp, message_count, new_count, duplicate_count)
SELECT 'bench', :'user', gen_random_uuid(), 's' || s, timestamptz '2026-01-01',
       timestamptz '2026-06-01', 1000, 1000, 0
FROM generate_series(0, :sessions - 1) s;

-- Ids as the service makes them (UUIDv7: the creation time's milliseconds first, so the newest
-- memories are the highest ids and lie together at the end of the table), built by hand for
-- servers without `uuidv7()`; random ids would scatter a user's newest chunks over the table.
CREATE TEMP TABLE scale_memories ON COMMIT DROP AS
SELECT (lpad(to_hex(extract(epoch FROM timestamptz '2026-01-01')::int8 * 1000 + i * 1000), 12, '0')
        || '7' || substr(md5(random()::text), 1, 3) || '8' || substr(md5(random()::text), 1, 15))::uuid AS id,
       i,
       'detail ' || i || ': ' || (ARRAY['deploy', 'timeout', 'cache', 'migration', 'index',
                                       'rollback', 'latency', 'quota'])[1 + i % 8]
           || ' notes of run ' || (i % 977) || ', build ok, tests passed' AS content
FROM generate_series(0, :memories - 1) i;

INSERT INTO agent_memories (tenant_id, user_id, id, memory_key, memory_type, summary,
                            size_bytes, line_count, token_count, content_sha256, chunk_count,
                            created_at, updated_at, asks, ends_asking)
SELECT 'bench', :'user', id, 'detail-' || i, 'text', left(content, 80), octet_length(content), 1,
       octet_length(content) / 4, encode(sha256(convert_to(content, 'UTF8')), 'hex'), 1,
       timestamptz '2026-01-01' + i * interval '1 second', timestamptz '2026-01-01' + i * interval '1 second',
       coalesce(mnemo_only_asks(content), false), coalesce(mnemo_ends_asking(content), false)
FROM scale_memories;

INSERT INTO agent_memory_chunks (tenant_id, user_id, memory_id, byte_start, byte_len, line_start,
                                 line_end, content)
SELECT 'bench', :'user', id, 0, octet_length(content), 1, 1, content
FROM scale_memories;
COMMIT;

\if :analyze
ANALYZE agent_sessions;
ANALYZE conversation_messages;
ANALYZE recent_conversation_history;
ANALYZE agent_memories;
ANALYZE agent_memory_chunks;
\endif
