-- One batch of scripts/bench-search's messages: numbers :a to :b - 1, message n belonging to user
-- u(n % :users), in that user's session s((n / :users) % :sessions), alternately from `user` and
-- `ai`, 10 to 40 words, with one random unit vector of :dims dimensions for the model :'model'.
\set ON_ERROR_STOP on
BEGIN;
SET LOCAL synchronous_commit = off;
CREATE TEMP TABLE batch ON COMMIT DROP AS
SELECT r.i, 'u' || (r.i % :users) AS user_id, 's' || ((r.i / :users) % :sessions) AS session_id,
       'm' || r.i AS message_id, string_agg(v.word, ' ' ORDER BY r.j) AS text
FROM (SELECT i, j, least(:vocab, floor(exp(random() * ln(:vocab))))::int AS k
      FROM generate_series(:a, :b - 1) AS i,
           generate_series(1, 10 + (hashint4(i) & 63) % 31) AS j) AS r
JOIN bench_search_vocab v ON v.id = r.k
GROUP BY r.i;
INSERT INTO conversation_messages (tenant_id, user_id, session_id, message_id, sender, text,
                                   sent_at)
SELECT 'bench', user_id, session_id, message_id,
       CASE WHEN i % 2 = 0 THEN 'user' ELSE 'ai' END, text,
       timestamptz '2026-01-01' + i * interval '10 seconds'
FROM batch ORDER BY i;
INSERT INTO message_vectors (tenant_id, user_id, session_id, message_id, model, embedding)
SELECT 'bench', b.user_id, b.session_id, b.message_id, :'model',
       (SELECT l2_normalize(array_agg(random_normal())::vector)
        FROM generate_series(1, :dims) WHERE b.i IS NOT NULL)
FROM batch b;
COMMIT;
