#!/usr/bin/env bash
# "Where was I?" on a short and on a long task history: the mean time of POST /api/tasks/{id}/query
# on a task with 10 messages and on one with 100,032, then on the long one with its stored digest
# state removed (so that the digest reads every message, as it did before the state existed).
#
#   bench/digest-flat.sh            # builds the release binary, uses the scripts/pg server
#
# The long history is written straight into the database (100,031 messages), then one more
# message through the API, whose checkpoint folds them all once.
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/pg)"
PSQL="${MNEMO_PG_BIN:+$MNEMO_PG_BIN/}psql"
[ -n "${BENCH_NO_BUILD:-}" ] || cargo build --release --locked --quiet --bin mnemo
BIN="${CARGO_TARGET_DIR:-target}/release/mnemo"
export MNEMO_JWT_SECRET="bench-secret-bench-secret-bench-secret-42"
export MNEMO_LISTEN="127.0.0.1:${BENCH_PORT:-8097}"
RUST_LOG=warn "$BIN" serve >/tmp/mnemo-digest-bench.log 2>&1 &
SERVER=$!
trap 'kill $SERVER' EXIT
for _ in $(seq 50); do curl -sf "http://$MNEMO_LISTEN/readyz" >/dev/null && break; sleep 0.2; done
USER_ID="digest-$(date +%s)"
TOKEN="$("$BIN" token --sub "$USER_ID" --tenant bench)"
export MNEMO_LISTEN TOKEN
api() { curl -sf -H "authorization: Bearer $TOKEN" -H 'content-type: application/json' "$@"; }
new_task() {
    api -d '{"name":"deploy","plan":["Build image","Push image to registry","SSH into server","Run container"]}' \
        "http://$MNEMO_LISTEN/api/tasks" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])'
}
SHORT="$(new_task)"
LONG="$(new_task)"
for i in $(seq 1 10); do
    api -o /dev/null -d "{\"message\":\"step 1 done, built v1.$i\"}" "http://$MNEMO_LISTEN/api/tasks/$SHORT/update"
done
echo "writing 100,031 messages into the long task..." >&2
"$PSQL" "$DATABASE_URL" -qX -v ON_ERROR_STOP=1 \
    -c "INSERT INTO task_messages (tenant_id, user_id, task_id, seq, role, content, msg_type)
        SELECT 'bench', '$USER_ID', '$LONG', g, 'agent',
               'checked the logs again, quiet round ' || g || ' on port ' || (8000 + g % 50), 'progress'
        FROM generate_series(1, 100031) g" \
    -c "UPDATE tasks SET message_count = 100031 WHERE id = '$LONG'" \
    -c "ANALYZE task_messages"
api -o /dev/null -d '{"message":"step 2 done, pushed ghcr.io/acme/app:v2"}' "http://$MNEMO_LISTEN/api/tasks/$LONG/update"
time_query() { # task requests
    python3 - "$1" "$2" <<'PY'
import json, os, sys, time, urllib.request
task, n = sys.argv[1], int(sys.argv[2])
url = f"http://{os.environ['MNEMO_LISTEN']}/api/tasks/{task}/query"
headers = {"authorization": f"Bearer {os.environ['TOKEN']}", "content-type": "application/json"}
ask = lambda: urllib.request.urlopen(urllib.request.Request(url, data=b'{"query":"where was I?"}', headers=headers)).read()
ask()
start = time.perf_counter()
for _ in range(n):
    body = json.loads(ask())
mean = (time.perf_counter() - start) / n * 1000
print(f"{mean:8.2f} ms   (messages {body['digest']['message_count']}, inferred {body['digest']['inferred']})")
PY
}
echo "10 messages                          $(time_query "$SHORT" 200)"
echo "100,032 messages                     $(time_query "$LONG" 200)"
"$PSQL" "$DATABASE_URL" -qX -c "DELETE FROM task_digests WHERE task_id = '$LONG'"
echo "100,032 messages, no stored state    $(time_query "$LONG" 5)"
