# Sourced by the steps in scripts/test.d: runs the debug mnemo on a free local port for one step.
#
#   . scripts/lib/test-server.sh
#   test_server_database NAME     # optional: a fresh database NAME on the DATABASE_URL server
#   test_server_start LABEL       # builds, starts, waits for /readyz; sets BIN, URL, SERVER, LOG
#   TOKEN="$("$BIN" token --sub someone --tenant t --ttl 1h)"
#
# The server gets a throwaway HS256 secret and no model or embedder unless the caller exported
# them (MNEMO_LLM_*, MNEMO_EMBEDDER) after sourcing. test_server_start installs an EXIT trap that
# stops the server and drops the database of test_server_database; a step that needs more
# cleanup defines `test_server_cleanup_extra` before that. Messages start with "LABEL: ".

if [ -z "${DATABASE_URL:-}" ]; then
    PG_ENV="$(scripts/pg)"
    eval "$PG_ENV"
fi
export DATABASE_URL
unset MNEMO_LLM_BASE_URL MNEMO_LLM_MODEL MNEMO_LLM_API_KEY MNEMO_HISTORY_RETENTION_DAYS \
    MNEMO_EMBEDDER MNEMO_EMBEDDING_MODEL MNEMO_RATE_LIMIT_TENANT_PER_SEC MNEMO_RATE_LIMIT_USER_PER_SEC

TEST_SERVER_DB=""
SERVER=""
STUB_LLM=""

# psql of the server scripts/pg runs (MNEMO_PG_BIN or .data/pg-bin), else the one on PATH.
test_server_psql() {
    local bin="${MNEMO_PG_BIN:-}"
    if [ -z "$bin" ] && [ -f .data/pg-bin ]; then bin="$(cat .data/pg-bin)"; fi
    if [ -n "$bin" ] && [ -x "$bin/psql" ]; then
        echo "$bin/psql"
    else
        command -v psql || { echo "psql not found (set MNEMO_PG_BIN or run scripts/pg)" >&2; return 1; }
    fi
}

# A database of its own, dropped and made anew, on the server DATABASE_URL names; the server
# started next uses it, so what a step writes never meets other tests' data.
test_server_database() {
    local psql
    psql="$(test_server_psql)"
    TEST_SERVER_DB="$1"
    "$psql" "${DATABASE_URL%/*}/postgres" -X -q -v ON_ERROR_STOP=1 \
        -c "DROP DATABASE IF EXISTS $TEST_SERVER_DB WITH (FORCE)" \
        -c "CREATE DATABASE $TEST_SERVER_DB" >/dev/null
}

test_server_stop() {
    if [ -n "$SERVER" ]; then
        kill "$SERVER" 2>/dev/null || true
        wait "$SERVER" 2>/dev/null || true
        SERVER=""
    fi
    if [ -n "$STUB_LLM" ]; then
        kill "$STUB_LLM" 2>/dev/null || true
        wait "$STUB_LLM" 2>/dev/null || true
        STUB_LLM=""
    fi
    if declare -F test_server_cleanup_extra >/dev/null; then test_server_cleanup_extra; fi
    if [ -n "$TEST_SERVER_DB" ]; then
        local psql
        psql="$(test_server_psql)" || return 0
        # (a step may have just restarted PostgreSQL: a few tries)
        for _ in $(seq 1 25); do
            "$psql" "${DATABASE_URL%/*}/postgres" -X -q \
                -c "DROP DATABASE IF EXISTS $TEST_SERVER_DB WITH (FORCE)" >/dev/null 2>&1 && break
            sleep 0.2
        done
    fi
}

# A stand-in chat model (tests/schemathesis/stub_llm.py) on a free local port, so that POST
# /api/chat runs end to end; the server started next uses it.
test_server_stub_llm() {
    local port_file
    port_file="$(mktemp -t mnemo-stub-llm-XXXXXX)"
    python3 tests/schemathesis/stub_llm.py "$port_file" &
    STUB_LLM=$!
    trap test_server_stop EXIT
    for _ in $(seq 1 100); do
        [ -s "$port_file" ] && break
        sleep 0.1
    done
    export MNEMO_LLM_BASE_URL="http://127.0.0.1:$(cat "$port_file")/v1" MNEMO_LLM_MODEL=stub
    rm -f "$port_file"
}

test_server_free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

test_server_start() {
    local label="$1" port
    # The binary `cargo test --all-targets` builds (features unified with the dev-dependencies'):
    # `cargo build --bin mnemo` would build 45 crates a second time, with other features, into
    # the same target directory.
    cargo test --locked --quiet --all-targets --no-run
    BIN="${CARGO_TARGET_DIR:-target}/debug/mnemo"
    port="$(test_server_free_port)"
    URL="http://127.0.0.1:$port"
    LOG="$(mktemp -t "mnemo-$label-XXXXXX.log")"
    local db_url="$DATABASE_URL"
    if [ -n "$TEST_SERVER_DB" ]; then db_url="${DATABASE_URL%/*}/$TEST_SERVER_DB"; fi
    MNEMO_JWT_SECRET="$label-$(python3 -c 'import secrets; print(secrets.token_hex(24))')"
    export MNEMO_JWT_SECRET
    DATABASE_URL="$db_url" MNEMO_LISTEN="127.0.0.1:$port" "$BIN" serve >"$LOG" 2>&1 &
    SERVER=$!
    trap test_server_stop EXIT
    for _ in $(seq 1 300); do
        if python3 -c "import urllib.request, sys; urllib.request.urlopen(sys.argv[1], timeout=1)" \
            "$URL/readyz" 2>/dev/null; then
            return 0
        fi
        if ! kill -0 "$SERVER" 2>/dev/null; then
            echo "$label: mnemo did not start; its log:" >&2
            cat "$LOG" >&2
            exit 1
        fi
        sleep 0.2
    done
    echo "$label: mnemo was not ready after 60 s; its log:" >&2
    tail -n 50 "$LOG" >&2
    exit 1
}
