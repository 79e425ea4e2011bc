-- One batch of scripts/bench-search's memories: numbers :a to :b - 1, memory n belonging to user
-- u(n % :users) of tenant `bench`, one chunk each (30 to 60 words) with a summary of 4 to 6 words,
-- and one random unit vector of :dims dimensions for the model :'model'.
\set ON_ERROR_STOP on
BEGIN;
SET LOCAL synchronous_commit = off;
CREATE TEMP TABLE batch ON COMMIT DROP AS
SELECT r.i, md5('bench-memory-' || r.i)::uuid AS id, 'u' || (r.i % :users) AS user_id,
       string_agg(v.word, ' ' ORDER BY r.j) FILTER (WHERE r.j <= 4 + r.i % 3) AS summary,
       string_agg(v.word, ' ' ORDER BY r.j) FILTER (WHERE r.j > 4 + r.i % 3) AS content,
       count(*) FILTER (WHERE r.j > 4 + r.i % 3) AS words
FROM (SELECT i, j, least(:vocab, floor(exp(random() * ln(:vocab))))::int AS k
      FROM generate_series(:a, :b - 1) AS i,
           generate_series(1, 4 + i % 3 + 30 + (hashint4(i) & 63) % 31) AS j) AS r
JOIN bench_search_vocab v ON v.id = r.k
GROUP BY r.i;
INSERT INTO agent_memories (tenant_id, user_id, id, memory_key, agent_id, memory_type, summary,
                            size_bytes, line_count, token_count, content_sha256, chunk_count,
                            created_at, updated_at, asks, ends_asking)
SELECT 'bench', user_id, id, 'bench-' || i, 'agent-' || (i % 3), 'text', summary,
       octet_length(content), 1, words * 4 / 3, encode(sha256(convert_to(content, 'UTF8')), 'hex'),
       1, timestamptz '2026-01-01' + i * interval '10 seconds',
       timestamptz '2026-01-01' + i * interval '10 seconds',
       coalesce(mnemo_only_asks(content), false), coalesce(mnemo_ends_asking(content), false)
FROM batch;
INSERT INTO agent_memory_chunks (tenant_id, user_id, memory_id, byte_start, byte_len, line_start,
                                 line_end, content)
SELECT 'bench', user_id, id, 0, octet_length(content), 1, 1, content FROM batch;
INSERT INTO memory_vectors (tenant_id, user_id, memory_id, byte_start, model, embedding)
SELECT 'bench', b.user_id, b.id, 0, :'model',
       (SELECT l2_normalize(array_agg(random_normal())::vector)
        FROM generate_series(1, :dims) WHERE b.i IS NOT NULL)
FROM batch b;
COMMIT;
