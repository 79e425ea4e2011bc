-- Session rows without a hot index entry.
--
-- Every archive updates its session row (activity time, version, and the message count kept by
-- a trigger). With `last_activity_at` in two indexes each of those updates wrote new entries into
-- every index of the table and left dead ones behind for the next archive's conflict check to
-- step over; with no indexed column changing and room on the page, PostgreSQL updates the row
-- in place on its page (a HOT update) and no index is touched.
--
-- The session list orders a user's sessions by activity with a top-N sort over the user's rows
-- (found through the primary key), and the retention sweeper finds expired sessions with a scan
-- of this table; both are cheaper than an index write on every archive.
DROP INDEX agent_sessions_by_activity;
DROP INDEX agent_sessions_by_last_activity;

-- Room on each page for the new row versions of HOT updates (pruned again by later accesses).
ALTER TABLE agent_sessions SET (fillfactor = 50);
