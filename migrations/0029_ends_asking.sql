-- Whether a text ends with a question ("How often do you play?", and "I quit. Did you hear?"
-- too): the text written after it likely answers, whatever the text said before its question.
-- A search lifts that next text by the asking one's score; only a text that asks and says
-- nothing else (`mnemo_only_asks`) also loses a share of its own.
CREATE FUNCTION mnemo_ends_asking(t text) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN right(rtrim(t, E' \t\r\n'), 1) = '?';
