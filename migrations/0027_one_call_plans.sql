-- Every function a request calls in one statement runs its statements with generic plans only,
-- planned once per connection. Left to choose, PostgreSQL's plan cache compares a statement's
-- generic plan with the plans it makes for each call's values, and once a database had grown
-- (2.6 million messages) it judged the archive statement's generic plan dearer (a set-returning
-- `unnest` of a parameter is estimated at a hundred rows; the call's arrays hold a few) and
-- planned every archive anew: 10% of PostgreSQL's samples in the planner, and about 950 µs of
-- PostgreSQL CPU an append against 540 µs with generic plans. The generic plans are the ones
-- `bench/explain/*.generic.txt` shows (index lookups throughout); the message page already runs
-- this way.
ALTER FUNCTION mnemo_read_memory SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION mnemo_read_notes SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION mnemo_write_memory SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION mnemo_write_archive SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION mnemo_write_archives SET plan_cache_mode = force_generic_plan;
