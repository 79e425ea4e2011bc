-- Brings the 100x user of `scripts/bench --scale` (psql -v user=...) back to the history
-- `bench/scale-load.sql` and `bench/scale-load-tasks.sql` gave it.
--
-- The memories the bench's own scenarios stored since (every key but the loaded `detail-N` ones)
-- go, with their chunks, vectors and queued embeddings. Without this the 100x history grew with
-- every run: `memory-store` alone leaves some 15,000 memories a run, and after a few runs the
-- user's newest 5,000 chunks, the sample a keyword search counts its terms in, were all the
-- bench's own 1 KB texts, which hold none of the questions' words. Each run then measured a
-- different, larger user. Messages are left as they are: the conversation scenarios add to the
-- loaded sessions, whose counts and summaries would have to be rewritten, and the message sample
-- is the newest messages whatever they hold.
--
-- The loaded task loses the messages and events written to it since its load (`task-events`
-- appends some 100,000 events a run, `task-query` one message; the lifecycle sweeper may have
-- added a note pausing it): those past the counts its metadata keeps go, with their queued
-- embeddings and vectors, its counters return to those counts, and it is active again, changed
-- now. Its digest state goes as well: it took in the one message `task-query` posted, which is
-- gone, and with the count back at one short of a multiple of 64 the next run's message folds
-- every message again, as on the first run.
--
-- The session the context turns talk in (`ctx`, `scripts/bench`'s `context-one`) is the bench's
-- own, not part of the loaded history: it goes whole, with its messages, digests and queued
-- embeddings, so that each run's turns start it afresh, as the small side's new user does.
-- Without this it grew by some 400 messages a run, and its questions, the newest messages of
-- the user, filled more of the message sample run after run than on the small side.
--
-- Runs as the superuser. Prints what went.
\set ON_ERROR_STOP on
BEGIN;
CREATE TEMP TABLE scale_reset_gone ON COMMIT DROP AS
    SELECT id FROM agent_memories
    WHERE tenant_id = 'bench' AND user_id = :'user' AND memory_key NOT LIKE 'detail-%';
DELETE FROM embedding_outbox o USING scale_reset_gone g
WHERE o.tenant_id = 'bench' AND o.user_id = :'user' AND o.memory_id = g.id;
SELECT to_regclass('memory_vectors') IS NOT NULL AS has_vectors \gset
\if :has_vectors
DELETE FROM memory_vectors v USING scale_reset_gone g
WHERE v.tenant_id = 'bench' AND v.user_id = :'user' AND v.memory_id = g.id;
\endif
-- The chunks go with their memories (ON DELETE CASCADE).
DELETE FROM agent_memories m USING scale_reset_gone g
WHERE m.tenant_id = 'bench' AND m.user_id = :'user' AND m.id = g.id;
SELECT count(*) AS removed FROM scale_reset_gone \gset

DELETE FROM embedding_outbox
WHERE tenant_id = 'bench' AND user_id = :'user' AND session_id = 'ctx';
-- Its messages, digests and vectors go with it (ON DELETE CASCADE).
WITH gone AS (
    DELETE FROM agent_sessions
    WHERE tenant_id = 'bench' AND user_id = :'user' AND session_id = 'ctx'
    RETURNING message_count)
SELECT coalesce(sum(message_count), 0) AS removed_turns FROM gone \gset

\set task '00000000-0000-7000-8000-5ca1e0000001'
SELECT coalesce(max((metadata->>'bench_loaded_messages')::int), -1) AS loaded_messages,
       coalesce(max((metadata->>'bench_loaded_events')::bigint), -1) AS loaded_events
FROM tasks WHERE tenant_id = 'bench' AND user_id = :'user' AND id = :'task' \gset
SELECT :loaded_messages >= 0 AS has_task \gset
\if :has_task
WITH gone AS (
    DELETE FROM task_messages
    WHERE tenant_id = 'bench' AND user_id = :'user' AND task_id = :'task' AND seq > :loaded_messages
    RETURNING 1)
SELECT count(*) AS removed_messages FROM gone \gset
WITH gone AS (
    DELETE FROM task_events
    WHERE tenant_id = 'bench' AND user_id = :'user' AND task_id = :'task' AND seq > :loaded_events
    RETURNING 1)
SELECT count(*) AS removed_events FROM gone \gset
DELETE FROM embedding_outbox
WHERE tenant_id = 'bench' AND user_id = :'user' AND kind = 'task' AND task_id = :'task'
  AND ((task_source = 'message' AND task_seq > :loaded_messages)
       OR (task_source = 'event' AND task_seq > :loaded_events));
SELECT to_regclass('task_vectors') IS NOT NULL AS has_task_vectors \gset
\if :has_task_vectors
DELETE FROM task_vectors
WHERE tenant_id = 'bench' AND user_id = :'user' AND task_id = :'task'
  AND ((source = 'message' AND seq > :loaded_messages) OR (source = 'event' AND seq > :loaded_events));
\endif
DELETE FROM task_digests WHERE tenant_id = 'bench' AND user_id = :'user' AND task_id = :'task';
UPDATE tasks SET message_count = :loaded_messages, event_count = :loaded_events,
                 summary_message_count = :loaded_messages, status = 'active', updated_at = now()
WHERE tenant_id = 'bench' AND user_id = :'user' AND id = :'task';
\else
\set removed_messages 0
\set removed_events 0
\endif
COMMIT;
-- Vacuumed at once, so that the newest-first scans of the sample do not step over the removed
-- rows' index entries until autovacuum comes round.
SELECT :removed > 0 AS removed_any \gset
\if :removed_any
VACUUM agent_memories, agent_memory_chunks, embedding_outbox;
\endif
-- Likewise the task's appends (its newest messages are what a digest reads) and the context
-- turns' messages (the newest of the user's, which its message searches read first).
SELECT :removed_messages + :removed_events + :removed_turns > 0 AS removed_task_items \gset
\if :removed_task_items
VACUUM task_messages, task_events, conversation_messages, embedding_outbox;
\endif
\echo :removed memories, :removed_messages task messages, :removed_events task events and :removed_turns messages of the context session
