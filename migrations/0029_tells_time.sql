-- Whether a text says when or how long: a relative or named time ("yesterday", "last Sunday",
-- "two weeks ago", "in October", "the 15th"), a year, a weekday, or a span of minutes to years.
-- A search by a question asking when or how long ("When did Nadia run the race?") looks for such
-- a text. A date or clock stamp opening the text (a header such as "2024-03-02 Maya:" or
-- "1:56 pm on 8 May, 2023 Caroline:", which every text of a log carries alike) is left out
-- first, so that only what the text itself says counts.
-- "May" and "March" count only after a word that makes them months ("in May", "early March").
CREATE OR REPLACE FUNCTION mnemo_tells_time(t text) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN regexp_replace(
           left(t, 4000),
           '^\s*[[(]?\s*(\d{4}-\d{2}-\d{2}([t ]\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?(z|[+-]\d{2}:?\d{2})?)?'
           || '|(\d{1,2}:\d{2}(:\d{2})?\s*([ap]\.?m\.?)?\s*(on\s+)?)?'
           || '(\d{1,2}(st|nd|rd|th)?\s+[[:alpha:]]{3,9}\.?,?\s+\d{4}'
           || '|[[:alpha:]]{3,9}\.?\s+\d{1,2}(st|nd|rd|th)?,?\s+\d{4}))\s*[])]?',
           ' ', 'i')
       ~* ('\m(yesterday|today|tonight|tomorrow|ago|fortnight|weekends?|mornings?|afternoons?'
           || '|evenings?|nights?|(mon|tues|wednes|thurs|fri|satur|sun)days?|minutes?|hours?|days?|weeks?|months?|years?'
           || '|january|february|april|june|july|august|september|october|november|december'
           || '|(in|of|early|late|mid|last|next|this|since|until|by)\s+(may|march)'
           || '|\d{1,2}(st|nd|rd|th)|(19|20)\d{2})\M');
