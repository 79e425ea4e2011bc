-- Whether a text only asks: it ends with a question mark and no sentence in it ends otherwise
-- ("How often do you play?", not "I quit. Did you hear?"). A search by a question looks for a
-- statement; a text that only asks holds none, and its answer is the text written after it.
CREATE FUNCTION mnemo_only_asks(t text) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN rtrim(t, E' \t\r\n') ~ '\?$' AND rtrim(t, E' \t\r\n') !~ '[.!](\s|$)';
