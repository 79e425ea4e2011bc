-- A session's running summary refreshed in two calls. A refresh read where the summary stood,
-- the digest's state and the messages since, in a transaction of its own (BEGIN, the scope
-- statement, three reads, ROLLBACK), and stored the new summary in another (BEGIN, the scope
-- statement, the write, COMMIT): nine round trips, and the pool's release checks. With a summary
-- due every 20 messages, that was a fifth of the CPU an append cost in all (turning summaries
-- off took appends to 1,000 sessions from 91 / 223 to 67 / 178 µs of server / PostgreSQL CPU).
-- Now the read is one call of `mnemo_read_summary_due` and the write one call of
-- `mnemo_write_summary`, each acting as the caller first, as the other one-call functions do;
-- the write answers whether the next refresh is due, and its commit does not wait for the disk.

-- Where session $1's summary stands (its text, the messages the session holds, how many the
-- summary covers, and the digest's state with the last message it folded), one row; and when
-- $2 or more messages arrived since it, the messages since, oldest first, one per row: those
-- after the digest's last (at most the number that arrived since, and $3), or without a digest
-- the last $3; only those archived within $4 days when $4 is set. No row: no such session.
-- The messages are read newest first along the session's time index, through the session row
-- (as a page of messages is), so a refresh reads the few new ones however long the session.
CREATE FUNCTION mnemo_read_summary_due(
    p_session text, p_every int, p_max bigint, p_retention_days int, p_tenant text,
    p_user text)
RETURNS TABLE (summary text, message_count int, covers int, through_seq bigint, state jsonb,
               sender text, text text, seq bigint)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
    PERFORM mnemo_act_as(p_tenant, p_user);
    RETURN QUERY
    SELECT s.summary, s.message_count, s.summary_message_count, d.through_seq, d.state,
           m.sender, m.text, m.seq
    FROM agent_sessions s
    LEFT JOIN session_digests d
        ON d.tenant_id = s.tenant_id AND d.user_id = s.user_id AND d.session_id = s.session_id
    LEFT JOIN LATERAL (
        SELECT c.sender, c.text, c.sent_at, c.seq FROM conversation_messages c
        WHERE c.tenant_id = s.tenant_id AND c.user_id = s.user_id
          AND c.session_id = s.session_id
          -- Only read when due: a filter on the session row alone, tested before the scan.
          AND s.message_count - s.summary_message_count >= $2
          AND ($4::int IS NULL OR c.archived_at >= now() - make_interval(days => $4::int))
          -- `+ 0`: not through the (tenant, user, seq) index, which reads every message the
          -- user archived since, in all sessions, where the session's time index reads the
          -- few new ones.
          AND (d.through_seq IS NULL OR c.seq + 0 > d.through_seq)
        ORDER BY c.sent_at DESC, c.seq DESC
        LIMIT CASE WHEN d.through_seq IS NULL THEN $3
                   ELSE least(s.message_count - s.summary_message_count, $3) END
    ) m ON true
    WHERE s.session_id = $1
    ORDER BY m.sent_at, m.seq;
END
$$;

-- Stores session $1's running summary $2 covering its first $3 messages, with the digest's
-- state $5 folded through the message numbered $4, unless a summary covering as many or more
-- is stored already (a slower refresh never overwrites a newer one). `stored`: whether it was;
-- `uncovered`: then, the messages archived since the ones it covers (so the refresher knows
-- whether the next refresh is due without reading again), else null.
CREATE FUNCTION mnemo_write_summary(
    p_session text, p_summary text, p_covers int, p_through bigint, p_state jsonb,
    p_tenant text, p_user text)
RETURNS TABLE (stored boolean, uncovered int)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
    PERFORM mnemo_act_as(p_tenant, p_user);
    -- The summary and its digest state are made from the stored messages, so the commit need
    -- not wait for the disk: a crash that loses it leaves the summary as it was, still covering
    -- fewer messages, and the next archive makes a refresh due again. (The setting lasts until
    -- the call's own transaction ends; a later commit that waits for the disk makes it durable
    -- too.)
    PERFORM set_config('synchronous_commit', 'off', true);
    RETURN QUERY
    WITH s AS (
        UPDATE agent_sessions
        SET summary = $2, summary_message_count = $3, summary_updated_at = now()
        WHERE session_id = $1 AND summary_message_count < $3
        RETURNING tenant_id, user_id, session_id, message_count
    ), d AS (
        INSERT INTO session_digests (tenant_id, user_id, session_id, through_seq, state)
        SELECT s.tenant_id, s.user_id, s.session_id, $4, $5 FROM s
        ON CONFLICT (tenant_id, user_id, session_id)
        DO UPDATE SET through_seq = EXCLUDED.through_seq, state = EXCLUDED.state,
                      updated_at = now()
    )
    SELECT count(*) > 0, max(s.message_count) - $3 FROM s;
END
$$;
