-- The key details a task's digest state has seen, one row each, rather than a list inside the
-- state.
--
-- The state counts each key detail of a task's messages once, remembering the hash of each of
-- the latest 4,096 it saw; a detail met again after that counts as new. Those hashes were a list
-- in the state's JSON, 90 KB once full, and every "where was I?" read the whole state to fold
-- in the few messages written since the last checkpoint: on a long task the question cost twice
-- the PostgreSQL time it cost on a short one. Now a hash is a row, numbered in the order first
-- seen (the state's `details_seen` at that moment); a fold reads the rows of the hashes its
-- messages hold, a checkpoint adds the new ones and removes those that fell out of the latest
-- 4,096, and the state itself stays a few kilobytes.
--
-- States stored before keep their list until their next checkpoint, which writes it here; the
-- service reads either.
CREATE TABLE task_digest_seen (
    tenant_id text   NOT NULL,
    user_id   text   NOT NULL,
    task_id   uuid   NOT NULL,
    -- The detail's number: the state's `details_seen` when it was first seen.
    n         bigint NOT NULL,
    -- The detail's hash (64 bits, stored as a signed integer).
    hash      bigint NOT NULL,
    CONSTRAINT task_digest_seen_pkey PRIMARY KEY (tenant_id, user_id, task_id, n),
    CONSTRAINT task_digest_seen_state_fkey FOREIGN KEY (tenant_id, user_id, task_id)
        REFERENCES task_digests (tenant_id, user_id, task_id) ON DELETE CASCADE
);
SELECT mnemo_scope_table('task_digest_seen');
-- A fold's lookup: the latest number of each of its hashes.
CREATE INDEX task_digest_seen_hash ON task_digest_seen (tenant_id, user_id, task_id, hash, n);
