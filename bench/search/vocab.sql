-- The vocabulary of scripts/bench-search: :vocab words, most frequent first. The first ranks are
-- real English words (stopwords among them, as in real text), the rest made-up words of two or
-- three syllables. Texts and questions draw rank r with probability about 1/r.
DROP TABLE IF EXISTS bench_search_vocab;
CREATE TABLE bench_search_vocab (id int PRIMARY KEY, word text NOT NULL UNIQUE);
WITH common AS (
    SELECT row_number() OVER () AS id, w
    FROM unnest(string_to_array(
        'the of and to a in is it that for on with as was be at by this error from user build '
        'have not are or service request deploy test log server data file we you they will can '
        'when what which there their if but all new config timeout failed release database '
        'query cache memory agent session message customer report', ' ')) AS w
), syllables AS (
    SELECT array['ka','lo','mi','ren','tas','vor','pel','dun','sti','bra','gon','hal','jet',
                 'kir','lum','nor','pra','quen','ros','sul','tev','wil','yar','zor','bel','cor',
                 'dra','fen','gris','hom','ist','lan','mar','nev','ost','pin','rud','sen','tor',
                 'ul'] AS s
)
INSERT INTO bench_search_vocab (id, word)
SELECT id, w FROM common
UNION ALL
SELECT (SELECT count(*) FROM common) + k + 1,
       s[1 + k % 40] || s[1 + (k / 40) % 40] || CASE WHEN k >= 1600 THEN s[1 + (k / 1600 + k) % 40] ELSE '' END
FROM syllables, generate_series(0, :vocab - (SELECT count(*) FROM common)::int - 1) AS k;
