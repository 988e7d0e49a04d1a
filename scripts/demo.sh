#!/usr/bin/env bash
# Runs tollgate end to end on this machine: PostgreSQL (started when none answers),
# a local demo upstream, the gateway with metering and in-memory throttling, and a
# freshly signed-up demo account. Prints a ready `curl`, then serves until Ctrl-C.
#
#   scripts/demo.sh            full mode (metering + throttling, memory marker store)
#   scripts/demo.sh --local    local unlimited mode (TOLLGATE_PROFILE=local)
#   scripts/demo.sh --check    start, make one call, print it, stop (for CI and smoke tests)
set -euo pipefail
cd "$(dirname "$0")/.."

MODE=full
CHECK=0
for arg in "$@"; do
    case "$arg" in
        --local) MODE=local ;;
        --check) CHECK=1 ;;
        *) echo "usage: scripts/demo.sh [--local] [--check]" >&2; exit 2 ;;
    esac
done

GATEWAY_ADDR=${TOLLGATE_DEMO_ADDR:-127.0.0.1:8080}
UPSTREAM_ADDR=${TOLLGATE_DEMO_UPSTREAM:-127.0.0.1:9000}
METRICS_ADDR=${TOLLGATE_DEMO_METRICS:-127.0.0.1:9090}
DATABASE=${TOLLGATE_DEMO_DATABASE:-tollgate_demo}
# The plan catalogue ([[plans]] cannot come from environment variables).
DEMO_CONFIG=scripts/demo.toml
ADMIN_TOKEN=demo-admin-token
LOG_DIR=.tollgate/demo
mkdir -p "$LOG_DIR"

# shellcheck source=scripts/ensure-postgres.sh
source scripts/ensure-postgres.sh

echo "building tollgate and the demo upstream..."
cargo build --quiet --locked --bin tollgate --example demo_upstream

PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

target/debug/examples/demo_upstream "$UPSTREAM_ADDR" >"$LOG_DIR/upstream.log" 2>&1 &
PIDS+=($!)

export TOLLGATE__DATABASE__URL="postgres://postgres@127.0.0.1:${PGPORT:-5432}/$DATABASE"
export TOLLGATE__SERVER__LISTEN="$GATEWAY_ADDR"
export TOLLGATE__SERVER__METRICS_LISTEN="$METRICS_ADDR"
export TOLLGATE__UPSTREAM__BASE_URL="http://$UPSTREAM_ADDR"
export TOLLGATE__UPSTREAM__SHARED_SECRET=demo-shared-secret
export TOLLGATE__ADMIN__TOKEN=$ADMIN_TOKEN
export TOLLGATE__THROTTLE__STORE=memory
export TOLLGATE__BILLING__STRIPE_WEBHOOK_SECRET=whsec_demo
if [ "$MODE" = local ]; then export TOLLGATE_PROFILE=local; fi

target/debug/tollgate migrate --config "$DEMO_CONFIG"
target/debug/tollgate serve --config "$DEMO_CONFIG" >"$LOG_DIR/gateway.log" 2>&1 &
PIDS+=($!)

for _ in $(seq 1 100); do
    curl -fsS "http://$GATEWAY_ADDR/readyz" >/dev/null 2>&1 && break
    if ! kill -0 "${PIDS[1]}" 2>/dev/null; then
        echo "error: the gateway exited; see $LOG_DIR/gateway.log:" >&2
        tail -n 5 "$LOG_DIR/gateway.log" >&2
        exit 1
    fi
    sleep 0.2
done

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

logs in $LOG_DIR/
TEXT

if [ "$CHECK" = 1 ]; then
    echo
    curl -fsS -H "X-API-Key: $API_KEY" "http://$GATEWAY_ADDR/vedic/v1/horoscope/daily?sign=leo"
    echo
    sleep 0.5
    curl -fsS -H "X-API-Key: $API_KEY" "http://$GATEWAY_ADDR/account/v1/usage"
    echo
    exit 0
fi
echo "Ctrl-C stops everything."
wait
