# Sourced by the benchmark scripts: the pid of the PostgreSQL postmaster behind a database URL,
# whose CPU time from /proc counts the backends it has reaped (and its live children, the rest
# of the cluster). The postmaster is the checkpointer's parent.
#
#   . scripts/lib/postmaster.sh
#   POSTMASTER="$(postmaster_pid "$PSQL" "$DATABASE_URL")"

postmaster_pid() {
    local psql="$1" url="$2" checkpointer
    checkpointer="$("$psql" "$url" -tAXc "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'")"
    awk '/^PPid:/ {print $2}' "/proc/$checkpointer/status"
}
