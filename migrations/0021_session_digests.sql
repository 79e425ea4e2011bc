-- The running summary's state of a session without a model: what the digest needs from the
-- session's messages up to `through_seq`, folded and kept in bounded size (the words and names
-- counted, decaying with age; the questions still open). A refresh reads it and only the messages
-- archived since, so its cost does not grow with the session's history. It lives beside the
-- session row, not in it: the session row is rewritten by every archive, this one only by a refresh.
CREATE TABLE session_digests (
    tenant_id   text        NOT NULL,
    user_id     text        NOT NULL,
    session_id  text        NOT NULL,
    through_seq bigint      NOT NULL,
    state       jsonb       NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT session_digests_pkey PRIMARY KEY (tenant_id, user_id, session_id),
    CONSTRAINT session_digests_session_fkey FOREIGN KEY (tenant_id, user_id, session_id)
        REFERENCES agent_sessions (tenant_id, user_id, session_id) ON DELETE CASCADE
);
SELECT mnemo_scope_table('session_digests');
