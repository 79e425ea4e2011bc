#!/usr/bin/env bash
# A long history searched on connections whose plans small users made: the mean time of a keyword
# search (`POST /api/memories/search`, then `POST /api/chat/search`) of the 100x user of
# `scripts/bench --scale` (bench/scale-load.sql: 100,000 memories, 1,000,000 messages), after a
# user with four memories and four messages has searched on every pooled connection first.
#
#   bench/kept-plans.sh                                  # builds the release binary
#   BENCH_SERVER_BIN=/tmp/mnemo-old bench/kept-plans.sh  # another build, for before/after
#
# Run `scripts/bench --scale` once before, to load the 100x user into `mnemo_bench`. A pooled
# connection keeps the plan it made for a prepared statement; most users are small, so a long
# history usually meets plans made for someone else. The server runs with two pooled
# connections, and the small user's searches go two at a time, so that both hold its plans.
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(MNEMO_PG_DB=mnemo_bench scripts/pg)"
PSQL="${MNEMO_PG_BIN:+$MNEMO_PG_BIN/}psql"
[ -n "${BENCH_NO_BUILD:-}${BENCH_SERVER_BIN:-}" ] || cargo build --release --locked --quiet --bin mnemo
BIN="${BENCH_SERVER_BIN:-${CARGO_TARGET_DIR:-target}/release/mnemo}"
BIG_USER=bench-hist
loaded="$("$PSQL" "$DATABASE_URL" -tAXc "SELECT count(*) FROM agent_memories WHERE tenant_id = 'bench' AND user_id = '$BIG_USER'" 2>/dev/null || echo 0)"
[ "$loaded" -gt 0 ] || { echo "bench/kept-plans.sh: no 100x user; run scripts/bench --scale first" >&2; exit 1; }

export MNEMO_JWT_SECRET="bench-secret-bench-secret-bench-secret-42"
export MNEMO_LISTEN="127.0.0.1:${BENCH_PORT:-8098}"
export MNEMO_DB_MAX_CONNECTIONS=2
RUST_LOG=warn "$BIN" serve >/tmp/mnemo-kept-plans.log 2>&1 &
SERVER=$!
trap 'kill $SERVER' EXIT
for _ in $(seq 50); do curl -sf "http://$MNEMO_LISTEN/readyz" >/dev/null && break; sleep 0.2; done
curl -sf "http://$MNEMO_LISTEN/readyz" >/dev/null || { cat /tmp/mnemo-kept-plans.log; exit 1; }
SMALL="$("$BIN" token --sub "kept-plans-$(date +%s%N)" --tenant bench)"
BIG="$("$BIN" token --sub "$BIG_USER" --tenant bench)"
api() { # TOKEN PATH BODY
    curl -sf -o /dev/null -H "authorization: Bearer $1" -H 'content-type: application/json' \
        "http://$MNEMO_LISTEN$2" -d "$3"
}
for i in 1 2 3 4; do
    api "$SMALL" /api/memories "{\"content\": \"we decided about the cache and the queue in step $i\", \"description\": \"note $i\"}"
done
api "$SMALL" /api/chat/session/archive_messages '{"session_id": "kept", "messages_batch": [
    {"id": "k1", "text": "what did we decide about the cache?", "sender": "user", "timestamp": "2026-11-21T12:00:00Z"},
    {"id": "k2", "text": "the cache stays in front of the queue", "sender": "ai", "timestamp": "2026-11-21T12:00:01Z"},
    {"id": "k3", "text": "and the queue in step 4?", "sender": "user", "timestamp": "2026-11-21T12:00:02Z"},
    {"id": "k4", "text": "the queue moves to step 5", "sender": "ai", "timestamp": "2026-11-21T12:00:03Z"}]}'

for path in /api/memories/search /api/chat/search; do
    body='{"query": "what did we decide about the cache and the queue?", "mode": "keyword"}'
    for _ in $(seq 8); do
        api "$SMALL" "$path" "$body" & a=$!
        api "$SMALL" "$path" "$body" & b=$!
        wait "$a" "$b"
    done
    start=$(date +%s%N)
    for i in $(seq 20); do
        api "$BIG" "$path" "{\"query\": \"what did we decide about the cache and the queue in step $i?\", \"mode\": \"keyword\"}"
    done
    end=$(date +%s%N)
    printf '%-22s the 100x user, after a small one: %6.1f ms a search (20 searches, one at a time)\n' \
        "$path" "$(echo "($end - $start) / 20000000" | bc -l)"
done
