-- Brings the 100x user of `scripts/bench --scale` (psql -v user=...) back to the memories
-- `bench/scale-load.sql` gave it: the memories the bench's own scenarios stored since (every key
-- but the loaded `detail-N` ones) go, with their chunks, vectors and queued embeddings.
--
-- Without this the 100x history grew with every run: `memory-store` alone leaves some 15,000
-- memories a run, and after a few runs the user's newest 5,000 chunks, the sample a keyword
-- search counts its terms in, were all the bench's own 1 KB texts, which hold none of the
-- questions' words. Each run then measured a different, larger user. Messages are left as they
-- are: the conversation scenarios add to the loaded sessions, whose counts and summaries would
-- have to be rewritten, and the message sample is the newest messages whatever they hold.
-- Runs as the superuser. Prints how many memories went.
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
COMMIT;
-- Vacuumed at once, so that the newest-first scans of the sample do not step over the removed
-- rows' index entries until autovacuum comes round.
SELECT :removed > 0 AS removed_any \gset
\if :removed_any
VACUUM agent_memories, agent_memory_chunks, embedding_outbox;
\endif
\echo :removed
