-- Whether a conversation message asks, stored with it, as a memory's is. A conversation search
-- lifts its candidates by their neighbours (see the conversation search's `neighbours`), and
-- asked, for every candidate message, whether its text only asks, and for every message read
-- around the candidates, whether it ends with a question: two SQL function calls a row, each
-- reading the text (out of line when it is long), about a sixth of the neighbour statement on
-- a chat turn's recall. Both are facts of the text, known when it is written.
--
-- Generated columns, so that every way a message is written or its text changed (an archive, a
-- group of archives, an edit, an import) keeps them right without saying so. The expressions are
-- `mnemo_ends_asking` and `mnemo_only_asks` written with built-in functions only: those two read
-- the text as bytes, which is stable rather than immutable, and a generated column needs an
-- immutable expression. The answers are the same (in UTF-8 the trailing blanks and `?` are single
-- bytes, so trimming characters and trimming bytes agree; a test compares them), computed once
-- per write, where the search computed them for every candidate of every search.
ALTER TABLE conversation_messages
    ADD COLUMN ends_asking boolean NOT NULL
        GENERATED ALWAYS AS (rtrim(text, E' \t\r\n') LIKE '%?') STORED,
    ADD COLUMN asks boolean NOT NULL
        GENERATED ALWAYS AS (rtrim(text, E' \t\r\n') LIKE '%?' AND text !~ '[.!](\s|$)') STORED;
