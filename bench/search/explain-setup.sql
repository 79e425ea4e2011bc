-- Shared by the explain-*.sql files of scripts/bench-search: a question of five words (ranks 1,
-- 40, 150, 800 and 3000 of the vocabulary: a stopword, a common, two middling and a rare word)
-- and a random unit query vector of :dims dimensions, as psql variables :'question' and :'qvec'.
SELECT string_agg(word, ' ' ORDER BY id) AS question
FROM bench_search_vocab WHERE id IN (1, 40, 150, 800, 3000) \gset
SELECT l2_normalize(array_agg(random_normal())::vector)::text AS qvec
FROM generate_series(1, :dims) \gset
\echo question: :question
