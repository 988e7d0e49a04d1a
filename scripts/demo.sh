#!/usr/bin/env bash
# Runs tollgate end to end on this machine: PostgreSQL (started when none answers),
# a local demo upstream, the gateway with metering and in-memory throttling, and a
# freshly signed-up demo account. Prints a ready `curl`, then serves until Ctrl-C.
#
#   scripts/demo.sh              full mode (metering + throttling, memory marker store)
#   scripts/demo.sh --local      local unlimited mode (TOLLGATE_PROFILE=local)
#   scripts/demo.sh --jetstream  full mode as a fleet: NATS (started when none answers),
#                                a `serve` that only publishes, a `tollgate worker`
#   scripts/demo.sh --check      start, make one call, print it, stop (for CI and smoke tests)
set -euo pipefail
cd "$(dirname "$0")/.."

MODE=full
CHECK=0
JETSTREAM=0
for arg in "$@"; do
    case "$arg" in
        --local) MODE=local ;;
        --jetstream) JETSTREAM=1 ;;
        --check) CHECK=1 ;;
        *) echo "usage: scripts/demo.sh [--local | --jetstream] [--check]" >&2; exit 2 ;;
    esac
done

GATEWAY_ADDR=${TOLLGATE_DEMO_ADDR:-127.0.0.1:8080}
UPSTREAM_ADDR=${TOLLGATE_DEMO_UPSTREAM:-127.0.0.1:9000}
METRICS_ADDR=${TOLLGATE_DEMO_METRICS:-127.0.0.1:9090}
WORKER_METRICS_ADDR=${TOLLGATE_DEMO_WORKER_METRICS:-127.0.0.1:9091}

# Before anything else (PostgreSQL, the build, the logs): a demo already running, or any
# other server, on one of our addresses would answer in place of ours.
address_in_use() {
    local host=${1%:*} port=${1##*:}
    host=${host#[}
    host=${host%]}
    [ "$host" = 0.0.0.0 ] && host=127.0.0.1
    [ "$host" = :: ] && host=::1
    (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null
}
SPECS=("TOLLGATE_DEMO_ADDR=$GATEWAY_ADDR" "TOLLGATE_DEMO_UPSTREAM=$UPSTREAM_ADDR"
    "TOLLGATE_DEMO_METRICS=$METRICS_ADDR")
[ "$JETSTREAM" = 1 ] && SPECS+=("TOLLGATE_DEMO_WORKER_METRICS=$WORKER_METRICS_ADDR")
for spec in "${SPECS[@]}"; do
    var=${spec%%=*} addr=${spec#*=}
    if ! [[ "$addr" =~ ^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):[0-9]+$ ]]; then
        echo "demo: $var=$addr is not HOST:PORT" >&2
        exit 1
    fi
    if address_in_use "$addr"; then
        echo "demo: $addr is already in use (a demo already running?); set $var to a free address" >&2
        exit 1
    fi
done

ADMIN_TOKEN=${TOLLGATE_DEMO_ADMIN_TOKEN:-demo-admin-token}
DATABASE=${TOLLGATE_DEMO_DATABASE:-tollgate_demo}
# The plan catalogue ([[plans]] cannot come from environment variables).
DEMO_CONFIG=scripts/demo.toml
# Each instance its own log folder, named by its gateway's port: a second demo on other
# ports never truncates the first one's logs.
LOG_DIR=.tollgate/demo/${GATEWAY_ADDR##*:}
mkdir -p "$LOG_DIR"

# shellcheck source=scripts/ensure-postgres.sh
source scripts/ensure-postgres.sh
if [ "$JETSTREAM" = 1 ]; then
    # shellcheck source=scripts/ensure-nats.sh
    source scripts/ensure-nats.sh
fi

# Cargo's own progress, so a first build (a few minutes on two cores; seconds once built)
# does not look hung.
echo "building tollgate and the demo upstream (the first build takes a few minutes)..."
cargo build --locked --bin tollgate --example demo_upstream

PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

target/debug/examples/demo_upstream "$UPSTREAM_ADDR" >"$LOG_DIR/upstream.log" 2>&1 &
UPSTREAM_PID=$!
PIDS+=("$UPSTREAM_PID")

export TOLLGATE__DATABASE__URL="postgres://postgres@127.0.0.1:${PGPORT:-5432}/$DATABASE"
export TOLLGATE__SERVER__LISTEN="$GATEWAY_ADDR"
export TOLLGATE__SERVER__METRICS_LISTEN="$METRICS_ADDR"
export TOLLGATE__UPSTREAM__BASE_URL="http://$UPSTREAM_ADDR"
export TOLLGATE__UPSTREAM__SHARED_SECRET=demo-shared-secret
export TOLLGATE__ADMIN__TOKEN=$ADMIN_TOKEN
export TOLLGATE__THROTTLE__STORE=memory
export TOLLGATE__BILLING__STRIPE_WEBHOOK_SECRET=whsec_demo
if [ "$MODE" = local ]; then export TOLLGATE_PROFILE=local; fi
if [ "$JETSTREAM" = 1 ]; then
    MODE="$MODE, JetStream fleet"
    export TOLLGATE__USAGE_CHECK__TRANSPORT=jetstream
    export TOLLGATE__USAGE_CHECK__CONSUME=false
    export TOLLGATE__NATS__URL="$TOLLGATE_TEST_NATS_URL"
    export TOLLGATE__NATS__STREAM=TOLLGATE_DEMO_USAGE
    export TOLLGATE__NATS__SUBJECT=tollgate.demo.usage
    export TOLLGATE__NATS__CONSUMER=tollgate-demo-accounting
fi

target/debug/tollgate migrate --config "$DEMO_CONFIG"
target/debug/tollgate serve --config "$DEMO_CONFIG" >"$LOG_DIR/gateway.log" 2>&1 &
GATEWAY_PID=$!
PIDS+=("$GATEWAY_PID")
if [ "$JETSTREAM" = 1 ]; then
    TOLLGATE__SERVER__METRICS_LISTEN="$WORKER_METRICS_ADDR" \
        target/debug/tollgate worker --config "$DEMO_CONFIG" >"$LOG_DIR/worker.log" 2>&1 &
    WORKER_PID=$!
    PIDS+=("$WORKER_PID")
fi

# Ours: the address was free when the demo started, and our gateway is still alive
# (one that failed to bind exits, and the loop below reports it).
ours_and_ready() {
    kill -0 "$GATEWAY_PID" 2>/dev/null &&
        curl -fsS --max-time 2 "http://$GATEWAY_ADDR/readyz" >/dev/null 2>&1
}
exited() {
    echo "error: the $1 exited during start-up; see $2:" >&2
    tail -n 5 "$2" >&2
    exit 1
}
READY=0
for _ in $(seq 1 100); do
    kill -0 "$GATEWAY_PID" 2>/dev/null || exited gateway "$LOG_DIR/gateway.log"
    kill -0 "$UPSTREAM_PID" 2>/dev/null || exited "demo upstream" "$LOG_DIR/upstream.log"
    if ours_and_ready; then
        READY=1
        break
    fi
    sleep 0.2
done
if [ "$READY" != 1 ]; then
    echo "error: the gateway on $GATEWAY_ADDR did not become ready; see $LOG_DIR/gateway.log" >&2
    exit 1
fi
if [ "$JETSTREAM" = 1 ]; then
    for _ in $(seq 1 100); do
        curl -fsS --max-time 2 "http://$WORKER_METRICS_ADDR/readyz" >/dev/null 2>&1 && break
        if ! kill -0 "$WORKER_PID" 2>/dev/null; then
            echo "error: the worker exited; see $LOG_DIR/worker.log:" >&2
            tail -n 5 "$LOG_DIR/worker.log" >&2
            exit 1
        fi
        sleep 0.2
    done
fi

EMAIL="demo-$(date +%s)-$$@example.com"
SIGNUP=$(curl -fsS -X POST "http://$GATEWAY_ADDR/account/v1/signup" \
    -H 'content-type: application/json' \
    -d "{\"email\":\"$EMAIL\",\"password\":\"demo-password\"}")
API_KEY=$(sed -n 's/.*"api_key":"\([^"]*\)".*/\1/p' <<<"$SIGNUP")
ACCOUNT_ID=$(sed -n 's/.*"account_id":\([0-9]*\).*/\1/p' <<<"$SIGNUP")

cat <<TEXT

tollgate is running ($MODE mode) on http://$GATEWAY_ADDR, metrics on http://$METRICS_ADDR/metrics
demo account $ACCOUNT_ID ($EMAIL / demo-password), API key $API_KEY

  curl -i -H 'X-API-Key: $API_KEY' 'http://$GATEWAY_ADDR/vedic/v1/horoscope/daily?sign=leo'
  curl -s -H 'X-API-Key: $API_KEY' 'http://$GATEWAY_ADDR/account/v1/usage'
  curl -s -H 'Authorization: Bearer $ADMIN_TOKEN' 'http://$GATEWAY_ADDR/admin/v1/accounts/$ACCOUNT_ID/usage'

operator console: http://$GATEWAY_ADDR/console/ (sign in with the admin token $ADMIN_TOKEN)
logs in $LOG_DIR/
TEXT
if [ "$JETSTREAM" = 1 ]; then
    echo "usage events go through NATS ($TOLLGATE__NATS__URL, stream $TOLLGATE__NATS__STREAM);"
    echo "the worker accounts them, metrics on http://$WORKER_METRICS_ADDR/metrics"
fi

if [ "$CHECK" = 1 ]; then
    echo
    curl -fsS -H "X-API-Key: $API_KEY" "http://$GATEWAY_ADDR/vedic/v1/horoscope/daily?sign=leo"
    echo
    sleep 1
    curl -fsS -H "X-API-Key: $API_KEY" "http://$GATEWAY_ADDR/account/v1/usage"
    echo
    exit 0
fi
echo "Ctrl-C stops everything."
wait
