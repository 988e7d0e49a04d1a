#!/usr/bin/env bash
# Instructions per call of the gateway, under valgrind's callgrind: a figure that does not
# move with the machine's load, unlike wall-clock throughput. For tollgate in local mode
# (keys checked, nothing metered) and in full mode (metering, throttling against a local
# Cloudflare KV server, accounting into PostgreSQL in-process), it starts tollgate under
# callgrind twice, drives SMALL and then LARGE keep-alive calls through it (curl, one
# connection, seeded keys in turn, after a warmup that fills the key cache), stops it
# and prints
#
#   instructions per call = (Ir(LARGE) - Ir(SMALL)) / (LARGE - SMALL)
#
# which removes startup, warmup and shutdown, then the top functions of the LARGE run,
# inclusive and self (callgrind_annotate). Cleans up every process and database it made.
#
#   bench/callgrind.sh                         both modes, 500 and 2000 calls
#   BENCH_TOLLGATE=/tmp/old/tollgate bench/callgrind.sh   measure another build
#
# Environment: CALLGRIND_MODES (default "local full"), CALLGRIND_SMALL (default 500),
# CALLGRIND_LARGE (default 2000), CALLGRIND_WARMUP (calls before either count, default
# 200), CALLGRIND_LINGER_MS (full mode's usage_check.batch_linger_ms, default 250: under
# callgrind calls arrive some fifty times slower, and batches of the size the default 10 ms
# gather at full speed need the longer wait), CALLGRIND_TOP (functions listed, default 25), CALLGRIND_PORT_BASE (default 19400:
# ports BASE..BASE+3), CALLGRIND_OUT (folder of the callgrind.out files, kept; default a
# fresh folder under /tmp), BENCH_TOLLGATE (a prebuilt tollgate binary; default: build
# this tree's release binaries with line tables into CARGO_TARGET_DIR or target/).
set -euo pipefail
cd "$(dirname "$0")/.."

MODES=${CALLGRIND_MODES:-local full}
SMALL=${CALLGRIND_SMALL:-500}
LARGE=${CALLGRIND_LARGE:-2000}
WARMUP=${CALLGRIND_WARMUP:-200}
TOP=${CALLGRIND_TOP:-25}
LINGER_MS=${CALLGRIND_LINGER_MS:-250}
BASE=${CALLGRIND_PORT_BASE:-19400}
ACCOUNTS=64
UPSTREAM_PORT=$BASE
KV_PORT=$((BASE + 1))
GATEWAY_PORT=$((BASE + 2))
METRICS_PORT=$((BASE + 3))
DB=tollgate_callgrind_$$

BENCH_TAG=callgrind
# shellcheck source=bench/lib.sh
source bench/lib.sh

for tool in valgrind callgrind_annotate curl psql; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool is missing (Debian: valgrind, curl, postgresql-client)"
done
[ "$LARGE" -gt "$SMALL" ] || die "CALLGRIND_LARGE ($LARGE) must exceed CALLGRIND_SMALL ($SMALL)"

# shellcheck source=scripts/ensure-postgres.sh
source scripts/ensure-postgres.sh
PGPORT=${PGPORT:-5432}
psql_admin() { psql -X -q -h 127.0.0.1 -p "$PGPORT" -U postgres -d postgres -v ON_ERROR_STOP=1 "$@"; }
psql_db() { psql -X -q -h 127.0.0.1 -p "$PGPORT" -U postgres -d "$DB" -v ON_ERROR_STOP=1 "$@"; }

TARGET=${CARGO_TARGET_DIR:-target}
EX=$TARGET/release/examples
if [ -n "${BENCH_TOLLGATE:-}" ]; then
    [ -x "$BENCH_TOLLGATE" ] || die "BENCH_TOLLGATE=$BENCH_TOLLGATE is not an executable"
    TOLLGATE=$BENCH_TOLLGATE
    # The helpers need not match the measured build.
    if [ ! -x "$EX/demo_upstream" ] || [ ! -x "$EX/fake_kv" ]; then
        say "building the helper examples"
        cargo build --release --locked --quiet --example demo_upstream --example fake_kv
    fi
else
    say "building release binaries with line tables into $TARGET"
    CARGO_PROFILE_RELEASE_DEBUG=line-tables-only \
        cargo build --release --locked --quiet --bin tollgate --example demo_upstream --example fake_kv
    TOLLGATE=$TARGET/release/tollgate
fi

OUT=${CALLGRIND_OUT:-$(mktemp -d /tmp/tollgate-callgrind.XXXXXX)}
mkdir -p "$OUT"
RUN=$(mktemp -d /tmp/tollgate-callgrind-run.XXXXXX)
PIDS=()
stop() {
    local pid=$1
    kill -TERM "$pid" 2>/dev/null || return 0
    for _ in $(seq 1 600); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}
cleanup() {
    local status=$?
    for pid in "${PIDS[@]}"; do stop "$pid"; done
    psql_admin -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1 || true
    if [ "$status" = 0 ]; then rm -rf "$RUN"; else say "logs: $RUN"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM


ports_free CALLGRIND_PORT_BASE $UPSTREAM_PORT $KV_PORT $GATEWAY_PORT $METRICS_PORT

"$EX/demo_upstream" "127.0.0.1:$UPSTREAM_PORT" >"$RUN/upstream.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$UPSTREAM_PORT/vedic/v1/ping" $! "$RUN/upstream.log"
"$EX/fake_kv" "127.0.0.1:$KV_PORT" >"$RUN/kv.out" 2>"$RUN/kv.log" &
PIDS+=($!)
for _ in $(seq 1 100); do
    [ -s "$RUN/kv.out" ] && break
    sleep 0.1
done
KV_API_BASE=$(head -n1 "$RUN/kv.out")
[ -n "$KV_API_BASE" ] || die "the fake KV printed no api_base (log: $RUN/kv.log)"

export TOLLGATE__UPSTREAM__BASE_URL="http://127.0.0.1:$UPSTREAM_PORT"
export TOLLGATE__UPSTREAM__SHARED_SECRET=callgrind-shared-secret
export TOLLGATE__DATABASE__URL="postgres://postgres@127.0.0.1:$PGPORT/$DB?sslmode=disable"
export TOLLGATE__SERVER__LISTEN="127.0.0.1:$GATEWAY_PORT"
export TOLLGATE__SERVER__METRICS_LISTEN="127.0.0.1:$METRICS_PORT"
"$TOLLGATE" migrate >"$RUN/migrate.log" 2>&1 || die "tollgate migrate failed (log: $RUN/migrate.log)"

# Accounts and keys as bench/run.sh seeds them: a free subscription and this month's grant.
KEYS=$RUN/keys.txt
psql_db -v accounts="$ACCOUNTS" -v free_calls=3000 -v keys="$KEYS" -f bench/seed-accounts.sql
mapfile -t KEY_LIST <"$KEYS"
[ "${#KEY_LIST[@]}" = "$ACCOUNTS" ] || die "expected $ACCOUNTS keys in $KEYS"

# A curl config of COUNT calls over one keep-alive connection, keys in turn.
calls_config() {
    local count=$1 file=$2 i
    : >"$file"
    for ((i = 0; i < count; i++)); do
        [ "$i" = 0 ] || echo next >>"$file"
        printf 'url = "http://127.0.0.1:%s/vedic/v1/horoscope/daily?sign=leo"\nheader = "x-api-key: %s"\noutput = /dev/null\nwrite-out = "%%{http_code}\\n"\n' \
            "$GATEWAY_PORT" "${KEY_LIST[$((i % ACCOUNTS))]}" >>"$file"
    done
}
calls_config "$WARMUP" "$RUN/warmup.curl"
calls_config "$SMALL" "$RUN/small.curl"
calls_config "$LARGE" "$RUN/large.curl"

drive() {
    local config=$1 count=$2 ok
    ok=$(curl -s -K "$config" | grep -c '^200$' || true)
    [ "$ok" = "$count" ] || die "$ok of $count calls answered 200 (log: $RUN/gateway.log)"
}

# One gateway under callgrind: warmup, COUNT calls, SIGTERM (graceful: the usage queue
# drains), and the run's total instructions.
measure() {
    local mode=$1 count=$2 config=$3 out=$OUT/callgrind.out.$1.$2 pid
    shift 3
    env "$@" valgrind --tool=callgrind --callgrind-out-file="$out" \
        "$TOLLGATE" serve >"$RUN/gateway.log" 2>&1 &
    pid=$!
    PIDS+=("$pid")
    wait_http "http://127.0.0.1:$GATEWAY_PORT/readyz" "$pid" "$RUN/gateway.log" 120
    drive "$RUN/warmup.curl" "$WARMUP"
    drive "$config" "$count"
    stop "$pid"
    [ -s "$out" ] || die "callgrind wrote no profile (log: $RUN/gateway.log)"
    callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); ir = $1 } END { print ir }'
}

for mode in $MODES; do
    case $mode in
    local) vars=(TOLLGATE_PROFILE=local) ;;
    full)
        vars=(TOLLGATE__THROTTLE__STORE=cloudflare
            TOLLGATE__CLOUDFLARE__API_BASE="$KV_API_BASE"
            TOLLGATE__CLOUDFLARE__ACCOUNT_ID=test-account
            TOLLGATE__CLOUDFLARE__NAMESPACE_ID=test-namespace
            TOLLGATE__CLOUDFLARE__API_TOKEN=test-token
            TOLLGATE__USAGE_CHECK__BATCH_LINGER_MS="$LINGER_MS")
        ;;
    *) die "unknown mode $mode (local or full)" ;;
    esac
    say "$mode mode: $SMALL calls under callgrind"
    small_ir=$(measure "$mode" "$SMALL" "$RUN/small.curl" "${vars[@]}")
    say "$mode mode: $LARGE calls under callgrind"
    large_ir=$(measure "$mode" "$LARGE" "$RUN/large.curl" "${vars[@]}")
    per_call=$(((large_ir - small_ir) / (LARGE - SMALL)))
    echo "== $mode mode: $per_call instructions per call (Ir $small_ir at $SMALL calls, $large_ir at $LARGE)"
    echo "-- top inclusive ($OUT/callgrind.out.$mode.$LARGE)"
    callgrind_annotate --inclusive=yes "$OUT/callgrind.out.$mode.$LARGE" 2>/dev/null |
        grep -E '^ *[0-9,]+ ' | grep -v 'PROGRAM TOTALS' | head -n "$TOP" || true
    echo "-- top inclusive, tollgate's own functions"
    callgrind_annotate --inclusive=yes "$OUT/callgrind.out.$mode.$LARGE" 2>/dev/null |
        grep -E '^ *[0-9,]+ .*:tollgate::' | head -n "$TOP" || true
    echo "-- top self"
    callgrind_annotate "$OUT/callgrind.out.$mode.$LARGE" 2>/dev/null |
        grep -E '^ *[0-9,]+ ' | grep -v 'PROGRAM TOTALS' | head -n "$TOP" || true
done
say "profiles kept in $OUT"
