-- A session's messages: the planner multiplied the selectivities of tenant, user and session as
-- if independent and expected one row per session, so for the newest messages of a session it
-- read the whole session by primary key and sorted it (5 ms at 5,000 messages, growing with the
-- session) instead of reading the newest few backwards from `conversation_messages_by_time`
-- (0.06 ms whatever the length). Extended statistics tell it that a session id determines its
-- user and tenant.
CREATE STATISTICS conversation_messages_session_stats (dependencies, ndistinct)
    ON tenant_id, user_id, session_id FROM conversation_messages;
ANALYZE conversation_messages;
