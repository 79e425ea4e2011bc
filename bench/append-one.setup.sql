-- Every client appends to one session (`-D sessions=...` for append.pgbench.sql, which
-- append-one.pgbench.sql links to).
SELECT 'sessions=1';
