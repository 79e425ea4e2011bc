-- How many sessions the appends spread over (`-D sessions=...` for append.pgbench.sql).
SELECT 'sessions=1000';
