-- The group archive statement planned for the size of its group. `mnemo_write_archives` runs on
-- a generic plan, which knows no parameter's value. It took the group's archives from
-- `generate_subscripts` and each archive's messages from `generate_series` over the archive's
-- span, and PostgreSQL counts a thousand rows for either function when it cannot see the
-- arguments: a million messages. For that many it planned the join of the upserted messages
-- back to their archives as a hash join in 32 batches, and a batched hash join writes its
-- batches to temporary files, created and removed on every call, whatever the group's size
-- (`temp read=22 written=22` for 16 one-message archives under `EXPLAIN (ANALYZE, BUFFERS)`).
--
-- The archives and messages now come from `unnest ... WITH ORDINALITY` over the argument
-- arrays, which PostgreSQL counts at ten rows each without a value. A message's archive is
-- found with `width_bucket` over the archives' ends in the message columns (cumulative, so
-- sorted: an archive with no message repeats the end before it and is skipped). Every answer
-- and every row written stays the same; the join is one batch in memory.
--
-- Measured with pgbench at one client on the statement's call (`synchronous_commit = off`, the
-- old and new functions picked at random in one run, three runs): 16 one-message archives to 16
-- sessions 5.7-11.2 ms a call before, 3.1-3.4 ms after; 4 archives 1.9-2.3 ms before, 1.2 ms
-- after.
CREATE OR REPLACE FUNCTION mnemo_write_archives(
    p_sessions text[], p_agents text[], p_batches uuid[], p_starts timestamptz[],
    p_ends timestamptz[], p_received int[], p_message_ends int[], p_ids text[],
    p_senders text[], p_texts text[], p_sent_at timestamptz[], p_tool_calls jsonb[],
    p_tool_call_ids text[], p_edited_at timestamptz[], p_deletion_ends int[],
    p_deleted_ids text[], p_deleted_edited_at timestamptz[], p_queue boolean, p_tenant text,
    p_user text)
RETURNS TABLE (version bigint, new_ids text[], updated_ids text[], deleted_ids text[],
               archived_at timestamptz, message_count int, summary_covers int)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    m int := 1;
    d int := 1;
    r record;
BEGIN
    PERFORM mnemo_act_as(p_tenant, p_user);
    IF coalesce(cardinality(p_sessions), 0) > 1 AND coalesce(cardinality(p_deleted_ids), 0) = 0
       AND (SELECT count(*) = count(DISTINCT (p_sessions[w.i], m.id))
            FROM unnest(p_ids) WITH ORDINALITY AS m(id, k),
                 LATERAL (SELECT width_bucket(m.k::int - 1, p_message_ends) + 1 AS i) w)
    THEN
        FOR r IN
            WITH archives AS (
                -- Each archive and its place among the group's archives to the same session.
                SELECT a.i::int AS i, a.session,
                       row_number() OVER (PARTITION BY a.session ORDER BY a.i) AS place,
                       count(*) OVER (PARTITION BY a.session) AS of_session
                FROM unnest(p_sessions) WITH ORDINALITY AS a(session, i)
            ), incoming AS (
                -- Each message, and its archive: the one whose span of the message columns
                -- holds it, the number of archives that end before it, plus one.
                SELECT w.i, p_sessions[w.i] AS session, m.ord, m.id, m.sender, m.text,
                       m.sent_at, m.tool_calls, m.tool_call_id, m.edited_at
                FROM unnest(p_ids, p_senders, p_texts, p_sent_at, p_tool_calls, p_tool_call_ids,
                            p_edited_at)
                         WITH ORDINALITY AS m(id, sender, text, sent_at, tool_calls, tool_call_id,
                                              edited_at, ord),
                     LATERAL (SELECT width_bucket(m.ord::int - 1, p_message_ends) + 1 AS i) w
            ), upserted AS (
                -- The archive statement's upsert, for every message of the group in order (so
                -- each archive's messages take their `seq` after the archive before it).
                INSERT INTO conversation_messages AS c
                    (tenant_id, user_id, session_id, message_id, sender, text, sent_at, tool_calls,
                     tool_call_id, edited_at)
                SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user'), m.session,
                       m.id, m.sender, m.text, m.sent_at, m.tool_calls, m.tool_call_id, m.edited_at
                FROM incoming m
                ORDER BY m.ord
                ON CONFLICT (tenant_id, user_id, session_id, message_id) DO UPDATE
                SET sender = EXCLUDED.sender, text = EXCLUDED.text, tool_calls = EXCLUDED.tool_calls,
                    tool_call_id = EXCLUDED.tool_call_id, edited_at = EXCLUDED.edited_at
                WHERE (c.sender, c.text, c.tool_calls, c.tool_call_id)
                      IS DISTINCT FROM (EXCLUDED.sender, EXCLUDED.text, EXCLUDED.tool_calls, EXCLUDED.tool_call_id)
                  AND (c.edited_at IS NULL OR EXCLUDED.edited_at >= c.edited_at)
                RETURNING c.session_id, c.message_id, c.seq, c.archived_at, c.sent_at,
                          c.xmax = 0 AS fresh
            ), written AS (
                SELECT m.i, m.sender, m.text, u.session_id, u.message_id, u.seq, u.archived_at,
                       u.sent_at, u.fresh
                FROM upserted u JOIN incoming m ON m.session = u.session_id AND m.id = u.message_id
            ), counts AS (
                SELECT a.i, a.session, a.place, a.of_session,
                       count(w.message_id) FILTER (WHERE w.fresh)::int AS new,
                       count(w.message_id) FILTER (WHERE NOT w.fresh)::int AS updated,
                       coalesce(array_agg(w.message_id ORDER BY w.seq) FILTER (WHERE w.fresh), '{}')
                           AS new_ids,
                       coalesce(array_agg(w.message_id ORDER BY w.seq) FILTER (WHERE NOT w.fresh), '{}')
                           AS updated_ids,
                       max(w.archived_at) FILTER (WHERE w.fresh) AS archived_at
                FROM archives a LEFT JOIN written w ON w.i = a.i
                GROUP BY a.i, a.session, a.place, a.of_session
            ), session AS (
                -- Each session's one row change, for all its archives: created by the first
                -- (its agent), and its version moved on once per archive (a new session starts
                -- at version 1, so it ends at the number of its archives), its count of
                -- messages raised by all their new ones. Sessions in a fixed order, so that two
                -- groups that share sessions take their locks alike.
                INSERT INTO agent_sessions AS s
                    (tenant_id, user_id, session_id, agent_name, message_count, version)
                SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user'), c.session,
                       (array_agg(p_agents[c.i] ORDER BY c.i))[1], sum(c.new)::int, count(*)
                FROM counts c
                GROUP BY c.session
                ORDER BY c.session
                ON CONFLICT (tenant_id, user_id, session_id)
                DO UPDATE SET last_activity_at = now(), version = s.version + EXCLUDED.version,
                              message_count = s.message_count + EXCLUDED.message_count
                RETURNING s.session_id, s.version, s.message_count, s.summary_message_count
            ), queued AS (
                INSERT INTO embedding_outbox (tenant_id, user_id, kind, session_id, message_id)
                SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user'), 'message',
                       q.session_id, q.message_id
                FROM (
                    SELECT w.session_id, w.message_id FROM written w
                    WHERE NOT w.fresh OR (w.sender IN ('user', 'ai') AND w.text <> '')
                    UNION
                    SELECT w.session_id, n.message_id
                    FROM written w
                    JOIN LATERAL (
                        SELECT p.message_id FROM conversation_messages p
                        WHERE p.tenant_id = current_setting('mnemo.tenant')
                          AND p.user_id = current_setting('mnemo.user')
                          AND p.session_id = w.session_id
                          AND (p.sent_at, p.seq) > (w.sent_at, w.seq)
                          AND p.sender IN ('user', 'ai') AND p.text <> ''
                        ORDER BY p.sent_at, p.seq LIMIT 1
                    ) n ON true
                    WHERE NOT w.fresh
                ) q
                WHERE p_queue
            ), batch AS (
                INSERT INTO recent_conversation_history
                    (tenant_id, user_id, id, session_id, start_timestamp, end_timestamp,
                     message_count, new_count, duplicate_count, updated_count, deleted_count)
                SELECT current_setting('mnemo.tenant'), current_setting('mnemo.user'),
                       p_batches[c.i], c.session, p_starts[c.i], p_ends[c.i], p_received[c.i],
                       c.new, p_received[c.i] - c.new - c.updated, c.updated, 0
                FROM counts c
            )
            -- Each archive's answer, as the session stood just after it: the session's final
            -- version less the group's later archives to it, its count less their new messages.
            SELECT c.i, c.session, s.version - (c.of_session - c.place) AS version, c.new_ids,
                   c.updated_ids, c.archived_at,
                   s.message_count - coalesce(sum(c.new) OVER (
                       PARTITION BY c.session ORDER BY c.place
                       ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING), 0)::int AS message_count,
                   s.summary_message_count
            FROM counts c JOIN session s ON s.session_id = c.session
            ORDER BY c.i
        LOOP
            IF NOT p_queue AND cardinality(r.updated_ids) > 0
               AND to_regclass('message_vectors') IS NOT NULL THEN
                EXECUTE 'DELETE FROM message_vectors WHERE session_id = $1 AND message_id = ANY($2)'
                    USING r.session, r.updated_ids;
            END IF;
            version := r.version;
            new_ids := r.new_ids;
            updated_ids := r.updated_ids;
            deleted_ids := '{}';
            archived_at := r.archived_at;
            message_count := r.message_count;
            summary_covers := r.summary_message_count;
            RETURN NEXT;
        END LOOP;
        RETURN;
    END IF;
    FOR i IN 1 .. coalesce(cardinality(p_sessions), 0) LOOP
        RETURN QUERY SELECT * FROM mnemo_write_archive(
            p_sessions[i], p_agents[i], p_ids[m:p_message_ends[i]],
            p_senders[m:p_message_ends[i]], p_texts[m:p_message_ends[i]],
            p_sent_at[m:p_message_ends[i]], p_tool_calls[m:p_message_ends[i]],
            p_tool_call_ids[m:p_message_ends[i]], p_batches[i], p_starts[i], p_ends[i],
            p_received[i], p_queue, p_edited_at[m:p_message_ends[i]],
            p_deleted_ids[d:p_deletion_ends[i]], p_deleted_edited_at[d:p_deletion_ends[i]],
            p_tenant, p_user);
        m := p_message_ends[i] + 1;
        d := p_deletion_ends[i] + 1;
    END LOOP;
END
$$;

-- Replacing the function cleared its settings; its plans stay generic (see the one-call plans).
-- Replacing the function cleared its settings; its plans stay generic.
ALTER FUNCTION mnemo_write_archives SET plan_cache_mode = force_generic_plan;
