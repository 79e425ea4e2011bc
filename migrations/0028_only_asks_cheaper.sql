-- Whether a text only asks, as before, with its first test made a comparison of the last
-- character: the regular expression `\?$` read the whole text to find its end, on every
-- neighbour a search looks up (two per candidate). The answers are the same.
CREATE OR REPLACE FUNCTION mnemo_only_asks(t text) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN right(rtrim(t, E' \t\r\n'), 1) = '?' AND rtrim(t, E' \t\r\n') !~ '[.!](\s|$)';
