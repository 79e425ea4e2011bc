-- Raw equivalent of GET /api/chat/sessions/{id}/messages?order=desc&limit=10 on a random one of the
-- first 100 sessions of one user (`-D user=...`): the one call the request sends, which acts as
-- the user and reads the session with its newest page (limit + 1 rows), outside any transaction.
\set s random(0, 99)
SELECT * FROM mnemo_read_messages(NULL, 's' || :s, NULL, NULL, 11, true, 'bench', :user);
