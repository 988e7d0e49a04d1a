#!/usr/bin/env bash
# The gateway benchmark, in one run: a direct upstream, nginx as a plain reverse proxy,
# tollgate in local unlimited mode and tollgate in full mode (metering, throttling
# against a local Cloudflare KV server, 10,000 seeded accounts, a few exhausted), the
# latter twice: usage events through the in-process queue, and through NATS JetStream
# (a nats-server of the run's own, the gateway publishing and consuming), all
# driven by the same load generator (examples/loadgen.rs): closed loop at fixed
# concurrency, then a fixed rate of 1/BENCH_RATE_DIVISOR of nginx's closed-loop maximum,
# each in BENCH_ROUNDS interleaved rounds (each target's median round counts). Samples
# the CPU time of every target's processes over each measured window, and PostgreSQL's
# over each run until the ledger holds its calls, from /proc. Prints one table, the
# targets' checks, and writes the figures as JSON under bench/results/. Installs nginx and
# nats-server when missing, cleans up every process it started.
#
#   bench/run.sh                       3 rounds of 10 s per phase and target
#   BENCH_ROUNDS=1 BENCH_DURATION=1 BENCH_WARMUP=0.5 BENCH_RESULTS=/tmp bench/run.sh   smoke run
#
# Environment: BENCH_DURATION (seconds measured per phase, round and target, default 10),
# BENCH_ROUNDS (rounds per phase, default 3),
# BENCH_WARMUP (seconds before measuring, default 2), BENCH_CONCURRENCY (connections,
# default 64), BENCH_ACCOUNTS (default 10000), BENCH_EXHAUSTED (default 10),
# BENCH_PORT_BASE (default 19100: ports BASE..BASE+6 and BASE+12..BASE+14),
# BENCH_RESULTS (folder of the JSON, default bench/results), BENCH_KEEP=1 keeps the
# run folder (logs, raw figures) after success, BENCH_DB_PARAMS (query string of the
# gateways' database.url, default sslmode=disable: PostgreSQL is on loopback, where TLS
# only costs CPU; set it empty to measure sqlx's default, TLS when the server offers it),
# BENCH_RATE_DIVISOR (the fixed rate is nginx's closed-loop req/s over this, default 3),
# BENCH_TOLLGATE (a prebuilt tollgate binary to run instead of building this tree's, e.g.
# main's, to compare two builds back to back; the examples are still built here),
# BENCH_PG_BASELINE_US (PostgreSQL µs of CPU per accounted call to compare with, e.g.
# an earlier run's figure: the check says whether this run halved it).
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${BENCH_DURATION:-10}
ROUNDS=${BENCH_ROUNDS:-3}
WARMUP=${BENCH_WARMUP:-2}
CONCURRENCY=${BENCH_CONCURRENCY:-64}
ACCOUNTS=${BENCH_ACCOUNTS:-10000}
EXHAUSTED=${BENCH_EXHAUSTED:-10}
BASE=${BENCH_PORT_BASE:-19100}
RESULTS=${BENCH_RESULTS:-bench/results}
DB_PARAMS=${BENCH_DB_PARAMS-sslmode=disable}
DB_QUERY=${DB_PARAMS:+?$DB_PARAMS}
RATE_DIVISOR=${BENCH_RATE_DIVISOR:-3}
PG_BASELINE_US=${BENCH_PG_BASELINE_US:-}
FREE_CALLS=3000
is_number() { [[ $1 =~ ^[0-9]+([.][0-9]+)?$ ]] && awk -v v="$1" 'BEGIN { exit !(v > 0) }'; }
STARTED_AT=$(date -u +%Y-%m-%dT%H:%M:%SZ)

UPSTREAM_PORT=$BASE
NGINX_PORT=$((BASE + 1))
LOCAL_PORT=$((BASE + 2))
FULL_PORT=$((BASE + 3))
KV_PORT=$((BASE + 4))
FULLJS_PORT=$((BASE + 5))
NATS_PORT=$((BASE + 6))
LOCAL_METRICS=$((BASE + 12))
FULL_METRICS=$((BASE + 13))
FULLJS_METRICS=$((BASE + 14))
ADMIN_TOKEN=bench-admin-token

BENCH_TAG=bench
# shellcheck source=bench/lib.sh
source bench/lib.sh
is_number "$RATE_DIVISOR" || die "BENCH_RATE_DIVISOR must be a positive number, got '$RATE_DIVISOR'"
[ -z "$PG_BASELINE_US" ] || is_number "$PG_BASELINE_US" ||
    die "BENCH_PG_BASELINE_US must be a positive number, got '$PG_BASELINE_US'"

# --- tools --------------------------------------------------------------------------
if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
    [ "$(id -u)" = 0 ] || die "nginx is missing; install Debian's nginx package (needs root)"
    say "installing nginx from Debian"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nginx >/dev/null
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
# JetStream full mode runs a nats-server of its own (its store in the run folder).
if ! command -v nats-server >/dev/null 2>&1 && [ ! -x /usr/sbin/nats-server ]; then
    [ "$(id -u)" = 0 ] || die "nats-server is missing; install Debian's nats-server package (needs root)"
    say "installing nats-server from Debian"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nats-server >/dev/null
fi
NATS_SERVER=$(command -v nats-server || echo /usr/sbin/nats-server)
command -v curl >/dev/null 2>&1 || die "curl is missing"
[ -r /proc/self/stat ] || die "/proc is missing: CPU time cannot be sampled"
CLK_TCK=$(getconf CLK_TCK 2>/dev/null) || die "getconf CLK_TCK failed"

# shellcheck source=scripts/ensure-postgres.sh
source scripts/ensure-postgres.sh
PGPORT=${PGPORT:-5432}
psql_admin() { psql -X -q -h 127.0.0.1 -p "$PGPORT" -U postgres -d postgres -v ON_ERROR_STOP=1 "$@"; }
DB_LOCAL=tollgate_bench_local
DB_FULL=tollgate_bench_full
DB_FULLJS=tollgate_bench_fulljs
psql_db() {
    local db=$1
    shift
    psql -X -q -h 127.0.0.1 -p "$PGPORT" -U postgres -d "$db" -v ON_ERROR_STOP=1 "$@"
}
psql_full() { psql_db "$DB_FULL" "$@"; }

TARGET_DIR=${CARGO_TARGET_DIR:-target}
if [ -n "${BENCH_TOLLGATE:-}" ]; then
    [ -f "$BENCH_TOLLGATE" ] && [ -x "$BENCH_TOLLGATE" ] ||
        die "BENCH_TOLLGATE=$BENCH_TOLLGATE is not an executable file"
    TOLLGATE=$(cd "$(dirname "$BENCH_TOLLGATE")" && pwd)/$(basename "$BENCH_TOLLGATE")
    say "building the release examples (tollgate itself: $TOLLGATE)"
    cargo build --release --locked --quiet --examples
else
    say "building release binaries"
    cargo build --release --locked --quiet --bin tollgate --examples
    TOLLGATE=$TARGET_DIR/release/tollgate
fi
EX=$TARGET_DIR/release/examples

# --- processes ----------------------------------------------------------------------
RUN=$(mktemp -d /tmp/tollgate-bench.XXXXXX)
PIDS=()
cleanup() {
    local status=$?
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for _ in $(seq 1 100); do
        local alive=0
        for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        [ "$alive" = 0 ] && break
        sleep 0.1
    done
    for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [ "$status" = 0 ] && [ "${BENCH_KEEP:-0}" != 1 ]; then
        rm -rf "$RUN"
        for db in "${DB_LOCAL:-}" "${DB_FULL:-}" "${DB_FULLJS:-}"; do
            [ -n "$db" ] && psql_admin -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
        done
    else
        say "run folder (logs, raw figures): $RUN"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ports_free BENCH_PORT_BASE $UPSTREAM_PORT $NGINX_PORT $LOCAL_PORT $FULL_PORT $KV_PORT \
    $FULLJS_PORT $NATS_PORT $LOCAL_METRICS $FULL_METRICS $FULLJS_METRICS

say "starting the demo upstream on 127.0.0.1:$UPSTREAM_PORT"
"$EX/demo_upstream" "127.0.0.1:$UPSTREAM_PORT" >"$RUN/upstream.log" 2>&1 &
PIDS+=($!)
UPSTREAM_PID=$!
wait_http "http://127.0.0.1:$UPSTREAM_PORT/vedic/v1/ping" $! "$RUN/upstream.log"

say "starting nginx on 127.0.0.1:$NGINX_PORT"
mkdir -p "$RUN/nginx/logs"
cat >"$RUN/nginx/nginx.conf" <<CONF
worker_processes 2;
pid $RUN/nginx/nginx.pid;
error_log $RUN/nginx/logs/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $RUN/nginx/body;
    proxy_temp_path $RUN/nginx/proxy;
    fastcgi_temp_path $RUN/nginx/fastcgi;
    uwsgi_temp_path $RUN/nginx/uwsgi;
    scgi_temp_path $RUN/nginx/scgi;
    keepalive_requests 1000000;
    keepalive_timeout 75s;
    upstream api {
        server 127.0.0.1:$UPSTREAM_PORT;
        keepalive 128;
        keepalive_requests 1000000;
    }
    server {
        listen 127.0.0.1:$NGINX_PORT;
        location / {
            proxy_pass http://api;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering on;
        }
    }
}
CONF
"$NGINX" -p "$RUN/nginx" -c "$RUN/nginx/nginx.conf" -g 'daemon off;' >"$RUN/nginx/logs/stdout.log" 2>&1 &
PIDS+=($!)
NGINX_PID=$! # the master: its CPU samples take in its workers
wait_http "http://127.0.0.1:$NGINX_PORT/vedic/v1/ping" $! "$RUN/nginx/logs/error.log"

say "starting the fake Cloudflare KV on 127.0.0.1:$KV_PORT"
"$EX/fake_kv" "127.0.0.1:$KV_PORT" >"$RUN/kv.out" 2>"$RUN/kv.log" &
PIDS+=($!)
KV_PID=$!
for _ in $(seq 1 100); do
    [ -s "$RUN/kv.out" ] && break
    kill -0 "$KV_PID" 2>/dev/null || die "the fake KV exited (log: $RUN/kv.log)"
    sleep 0.1
done
KV_API_BASE=$(head -n1 "$RUN/kv.out")
[ -n "$KV_API_BASE" ] || die "the fake KV printed no api_base"

say "starting nats-server -js on 127.0.0.1:$NATS_PORT"
"$NATS_SERVER" -js -a 127.0.0.1 -p "$NATS_PORT" -sd "$RUN/nats" -l "$RUN/nats.log" &
PIDS+=($!)
NATS_PID=$!
for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$NATS_PORT") 2>/dev/null && break
    sleep 0.1
done

say "creating a fresh database $DB_FULL (and $DB_LOCAL, $DB_FULLJS: copies once seeded)"
for db in $DB_LOCAL $DB_FULL $DB_FULLJS; do
    psql_admin -c "DROP DATABASE IF EXISTS $db WITH (FORCE)"
done
export TOLLGATE__UPSTREAM__BASE_URL="http://127.0.0.1:$UPSTREAM_PORT"
export TOLLGATE__UPSTREAM__SHARED_SECRET=bench-shared-secret
export TOLLGATE__ADMIN__TOKEN=$ADMIN_TOKEN
TOLLGATE__DATABASE__URL="postgres://postgres@127.0.0.1:$PGPORT/$DB_FULL$DB_QUERY" "$TOLLGATE" migrate >"$RUN/migrate-full.log"

say "seeding $ACCOUNTS accounts with keys ($EXHAUSTED exhausted this month) into $DB_FULL"
KEYS=$RUN/keys.txt
# One month-start expression for every row, as tollgate computes it (UTC).
MONTH="date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'"
psql_full -v accounts="$ACCOUNTS" -v free_calls="$FREE_CALLS" -v keys="$KEYS" -f bench/seed-accounts.sql
psql_full <<SQL
BEGIN;
-- The first accounts used their whole month: ledger rows and counters agree.
-- The month's ledger partition (migration V13; a build from before it, run through
-- BENCH_TOLLGATE, has a ledger of one table).
DO \$seed\$ BEGIN
    IF to_regproc('subscription_tracking_add_month') IS NOT NULL THEN
        PERFORM subscription_tracking_add_month(now());
    END IF;
END \$seed\$;
INSERT INTO subscription_tracking (transaction_id, account_id, subscription_id, key_id,
                                   occurred_at, method, route, upstream_status)
SELECT gen_random_uuid(), s.account_id, s.id, k.id, $MONTH + interval '1 second', 'GET',
       '/vedic/v1/seed', 200
FROM subscription s JOIN api_key k ON k.account_id = s.account_id,
     generate_series(1, $FREE_CALLS)
WHERE s.account_id <= $EXHAUSTED;
INSERT INTO usage_counter (account_id, month_start, used)
SELECT id, $MONTH, $FREE_CALLS FROM account WHERE id <= $EXHAUSTED;
-- Every other account has its counter rows, at zero, as a month in progress has them, so
-- that the ANALYZE below gives PostgreSQL the counters' real size. Planned while those
-- tables still looked empty, the per-account counter reads are cached as sequential
-- scans on every pooled connection and stay so, as the tables grow, until the next
-- ANALYZE (autovacuum does that in production; see docs/operating.md).
INSERT INTO usage_counter (account_id, month_start, used)
SELECT id, $MONTH, 0 FROM account WHERE id > $EXHAUSTED;
-- And today's day, at zero: on the monthly row since migration V16, in its own table before.
DO \$seed\$ BEGIN
    IF to_regclass('usage_daily_closed') IS NOT NULL THEN
        UPDATE usage_counter SET day_start = date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    ELSE
        INSERT INTO usage_daily (account_id, day_start, calls, used)
        SELECT id, date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', 0, 0 FROM account;
    END IF;
END \$seed\$;
COMMIT;
ANALYZE;
SQL
[ "$(wc -l <"$KEYS")" = "$ACCOUNTS" ] || die "expected $ACCOUNTS keys in $KEYS"
LEDGER_BASE=$(psql_full -At -c "SELECT count(*) FROM subscription_tracking")

start_gateway() {
    local name=$1 port=$2 metrics=$3 db=$4
    shift 4
    env "$@" \
        TOLLGATE__SERVER__LISTEN="127.0.0.1:$port" \
        TOLLGATE__SERVER__METRICS_LISTEN="127.0.0.1:$metrics" \
        TOLLGATE__DATABASE__URL="postgres://postgres@127.0.0.1:$PGPORT/$db$DB_QUERY" \
        "$TOLLGATE" serve >"$RUN/gateway-$name.log" 2>&1 &
    PIDS+=($!)
    printf -v "GATEWAY_PID_$name" %s $!
    wait_http "http://127.0.0.1:$port/readyz" $! "$RUN/gateway-$name.log"
}

say "starting tollgate local mode on 127.0.0.1:$LOCAL_PORT"
# Local mode authenticates keys too: give it the same accounts and keys.
psql_admin -c "DROP DATABASE IF EXISTS $DB_LOCAL WITH (FORCE)" \
    -c "CREATE DATABASE $DB_LOCAL TEMPLATE $DB_FULL" \
    -c "DROP DATABASE IF EXISTS $DB_FULLJS WITH (FORCE)" \
    -c "CREATE DATABASE $DB_FULLJS TEMPLATE $DB_FULL"
start_gateway local "$LOCAL_PORT" "$LOCAL_METRICS" "$DB_LOCAL" TOLLGATE_PROFILE=local

say "starting tollgate full mode on 127.0.0.1:$FULL_PORT (KV at $KV_API_BASE)"
start_gateway full "$FULL_PORT" "$FULL_METRICS" "$DB_FULL" \
    TOLLGATE__THROTTLE__STORE=cloudflare \
    TOLLGATE__CLOUDFLARE__API_BASE="$KV_API_BASE" \
    TOLLGATE__CLOUDFLARE__ACCOUNT_ID=test-account \
    TOLLGATE__CLOUDFLARE__NAMESPACE_ID=test-namespace \
    TOLLGATE__CLOUDFLARE__API_TOKEN=test-token
RECONCILED=$(curl -fsS -X POST -H "Authorization: Bearer $ADMIN_TOKEN" \
    "http://127.0.0.1:$FULL_PORT/admin/v1/reconcile")
say "reconciliation: $RECONCILED"

say "starting tollgate full mode over JetStream on 127.0.0.1:$FULLJS_PORT"
start_gateway fulljs "$FULLJS_PORT" "$FULLJS_METRICS" "$DB_FULLJS" \
    TOLLGATE__THROTTLE__STORE=cloudflare \
    TOLLGATE__CLOUDFLARE__API_BASE="$KV_API_BASE" \
    TOLLGATE__CLOUDFLARE__ACCOUNT_ID=test-account \
    TOLLGATE__CLOUDFLARE__NAMESPACE_ID=test-namespace \
    TOLLGATE__CLOUDFLARE__API_TOKEN=test-token \
    TOLLGATE__USAGE_CHECK__TRANSPORT=jetstream \
    TOLLGATE__NATS__URL="nats://127.0.0.1:$NATS_PORT"
curl -fsS -o /dev/null -X POST -H "Authorization: Bearer $ADMIN_TOKEN" \
    "http://127.0.0.1:$FULLJS_PORT/admin/v1/reconcile"

# A key must work through both gateways before any figure counts.
ONE_KEY=$(sed -n "$((EXHAUSTED + 1))p" "$KEYS")
for port in $LOCAL_PORT $FULL_PORT $FULLJS_PORT; do
    code=$(curl -s -o /dev/null -w '%{http_code}' -H "x-api-key: $ONE_KEY" \
        "http://127.0.0.1:$port/vedic/v1/horoscope/daily?sign=leo")
    [ "$code" = 200 ] || die "a seeded key got $code from 127.0.0.1:$port"
done
# The probe call above was metered too (by each full mode): the ledger check counts it.
PROBES=1

# PostgreSQL's CPU time is that of its postmaster and every process under it: found from
# postmaster.pid in the data directory, else as the parent of a gateway's pooled backend.
PG_DATA=$(psql_admin -At -c "SHOW data_directory")
PG_POSTMASTER=$(head -n1 "$PG_DATA/postmaster.pid" 2>/dev/null || true)
if [ -z "$PG_POSTMASTER" ]; then
    backend=$(psql_admin -At -c "SELECT pid FROM pg_stat_activity
        WHERE datname = '$DB_FULL' AND backend_type = 'client backend' LIMIT 1")
    PG_POSTMASTER=$(awk '{ sub(/.*\) /, ""); print $2 }' "/proc/$backend/stat" 2>/dev/null || true)
fi
case "$(cat "/proc/${PG_POSTMASTER:-none}/comm" 2>/dev/null)" in
postgres | postmaster) ;;
*) die "PostgreSQL's postmaster is not a process of this host (pid '${PG_POSTMASTER:-}'): its CPU cannot be sampled" ;;
esac
"$EX/cpu_sample" --clk-tck "$CLK_TCK" "$PG_POSTMASTER" >/dev/null ||
    die "cannot read PostgreSQL's CPU time from /proc/$PG_POSTMASTER"
say "PostgreSQL: postmaster $PG_POSTMASTER ($PG_DATA)"

# --- load ---------------------------------------------------------------------------
metric_sum() {
    curl -fsS "http://127.0.0.1:$1/metrics" |
        awk -v name="$2" '$1 == name || index($1, name "{") == 1 { s += $2 } END { printf "%d\n", s }'
}

# After a full-mode phase: scrape the counters and count the ledger, once it holds every
# published event (bounded by 120 s; drive already waited after each run, so this is a
# check). Ledger rows are counted above the seed. Over JetStream "published" is what the
# proxy queued, "acked" what the stream took. The report's lag is each run's, from drive.
account_phase() {
    local phase=$1 target=$2 metrics=$3 db=$4 start published ledger lag now deadline
    start=$(date +%s.%N)
    deadline=$((SECONDS + 120))
    published=$(metric_sum "$metrics" tollgate_usage_events_published_total)
    while :; do
        ledger=$(($(psql_db "$db" -At -c "SELECT count(*) FROM subscription_tracking") - LEDGER_BASE))
        [ "$ledger" -ge "$published" ] && break
        [ "$SECONDS" -ge "$deadline" ] && { say "the ledger did not catch up within 120 s"; break; }
        sleep 0.02
    done
    now=$(date +%s.%N)
    lag=$(awk -v a="$start" -v b="$now" 'BEGIN { printf "%.3f", b - a }')
    cat >"$RUN/accounting-$phase-$target.json" <<JSON
{"published": $published, "accounted": $(metric_sum "$metrics" tollgate_usage_events_accounted_total),
 "acked": $(metric_sum "$metrics" tollgate_jetstream_publish_acks_total),
 "publish_failures": $(metric_sum "$metrics" tollgate_jetstream_publish_failures_total),
 "dropped": $(metric_sum "$metrics" tollgate_usage_events_dropped_total),
 "ledger_rows": $ledger, "probe_calls": $PROBES, "lag_s": $lag}
JSON
    say "$target after $phase: published $published, ledger $ledger, lag ${lag}s"
}

# Answers of one loadgen output that came from the upstream (not 401, 429, 502-504,
# which the gateway answers itself), warmup and drain included: the calls to meter.
all_answers() {
    { grep -o '"total_by_status":{[^}]*}' "$1" || true; } | { grep -o '"[0-9]*":[0-9]*' || true; } |
        tr -d '"' | awk -F: '{ s += $2 } END { printf "%d\n", s }'
}

upstream_answers() {
    { grep -o '"total_by_status":{[^}]*}' "$1" || true; } | { grep -o '"[0-9]*":[0-9]*' || true; } |
        tr -d '"' | awk -F: '$1 !~ /^(401|429|502|503|504)$/ { s += $2 } END { printf "%d\n", s }'
}

# Syscalls and context switches of a target's own processes over a whole run (warmup
# included), counted by the kernel (`perf stat`: the raw_syscalls:sys_enter tracepoint
# and the context-switches software event, every thread of the processes), when perf
# can count them here; the report divides them by the run's answers.
PERF_EVENTS=raw_syscalls:sys_enter,context-switches
if [ "${BENCH_PERF:-1}" = 1 ] && command -v perf >/dev/null 2>&1 &&
    perf stat -x, -e "$PERF_EVENTS" -o /dev/null true >/dev/null 2>&1; then
    PERF=1
else
    PERF=0
fi
target_pids() {
    local pid
    case $1 in
    upstream) pid=$UPSTREAM_PID ;;
    nginx) pid=$NGINX_PID ;;
    local) pid=$GATEWAY_PID_local ;;
    full) pid=$GATEWAY_PID_full ;;
    fulljs) pid=$GATEWAY_PID_fulljs ;;
    esac
    { echo "$pid"; pgrep -P "$pid" || true; } | paste -sd,
}
# "syscalls context_switches" of a perf stat -x, output file.
perf_counts() {
    awk -F, '$3 == "raw_syscalls:sys_enter" { s = $1 } $3 == "context-switches" { c = $1 }
        END { printf "%d %d\n", s, c }' "$1"
}

ledger_rows() { psql_db "$1" -At -c "SELECT count(*) FROM subscription_tracking"; }

# The processes whose CPU time loadgen samples over the measured window, by target: the
# target itself (nginx: its master and workers), and beside it the upstream every proxy
# calls, the KV server of the full modes and, over JetStream, nats-server.
cpu_args() {
    local up="--cpu upstream=$UPSTREAM_PID" kv="--cpu kv=$KV_PID"
    case $1 in
    upstream) echo "--cpu target=$UPSTREAM_PID" ;;
    nginx) echo "--cpu target=$NGINX_PID $up" ;;
    local) echo "--cpu target=$GATEWAY_PID_local $up" ;;
    full) echo "--cpu target=$GATEWAY_PID_full $up $kv" ;;
    fulljs) echo "--cpu target=$GATEWAY_PID_fulljs --cpu nats=$NATS_PID $up $kv" ;;
    esac
}

# One run of the load generator against one target. PostgreSQL's CPU time is sampled
# before the run starts (warmup included: its calls are metered too) and, for a full
# mode, once the ledger holds every call of the run, told by the gateway's own
# accounted counter (counting the ledger itself would cost PostgreSQL CPU in the window;
# the ledger is counted just outside it). For the other targets the window ends with the
# run: their PostgreSQL time should be ~0.
drive() {
    local phase=$1 target=$2 port=$3 round=$4 metrics="" db="" ledger0=0 ledger1=0
    local accounted0=0 accounted calls pg0 pg1 t0 t1 t2 lag deadline sys ctx
    shift 4
    case $target in
    full) metrics=$FULL_METRICS db=$DB_FULL ;;
    fulljs) metrics=$FULLJS_METRICS db=$DB_FULLJS ;;
    esac
    say "$phase: $target (round $round of $ROUNDS)"
    if [ -n "$db" ]; then
        ledger0=$(ledger_rows "$db")
        accounted0=$(($(metric_sum "$metrics" tollgate_usage_events_accounted_total) +
            $(metric_sum "$metrics" tollgate_usage_events_dropped_total)))
    fi
    local out=$RUN/$phase-$target.round$round.json
    t0=$(date +%s.%N)
    pg0=$("$EX/cpu_sample" --clk-tck "$CLK_TCK" "$PG_POSTMASTER")
    local perf_pid=""
    if [ "$PERF" = 1 ]; then
        perf stat -x, -e "$PERF_EVENTS" -p "$(target_pids "$target")" \
            -o "$RUN/perf-$phase-$target.round$round.txt" >/dev/null 2>&1 &
        perf_pid=$!
    fi
    # shellcheck disable=SC2046 # cpu_args yields separate words on purpose
    "$EX/loadgen" --url "http://127.0.0.1:$port" --keys "$KEYS" \
        --concurrency "$CONCURRENCY" --duration "$DURATION" --warmup "$WARMUP" \
        --clk-tck "$CLK_TCK" $(cpu_args "$target") \
        --label "$target" "$@" >"$out" || die "loadgen failed against $target (see above)"
    t1=$(date +%s.%N)
    if [ -n "$perf_pid" ]; then
        kill -INT "$perf_pid" 2>/dev/null || true
        wait "$perf_pid" 2>/dev/null || true
        read -r sys ctx < <(perf_counts "$RUN/perf-$phase-$target.round$round.txt")
        echo "$target $sys $ctx $(all_answers "$out")" >>"$RUN/perf-$phase.txt"
    fi
    calls=$(upstream_answers "$out")
    if [ -n "$db" ]; then
        deadline=$((SECONDS + 120))
        while :; do
            # A dropped event is never accounted: it settles the run's count too.
            accounted=$(($(metric_sum "$metrics" tollgate_usage_events_accounted_total) +
                $(metric_sum "$metrics" tollgate_usage_events_dropped_total)))
            [ $((accounted - accounted0)) -ge "$calls" ] && break
            [ "$SECONDS" -ge "$deadline" ] && { say "$target: the ledger did not catch up within 120 s"; break; }
            sleep 0.01
        done
    fi
    pg1=$("$EX/cpu_sample" --clk-tck "$CLK_TCK" "$PG_POSTMASTER")
    t2=$(date +%s.%N)
    [ -n "$db" ] && ledger1=$(ledger_rows "$db")
    lag=$(awk -v a="$t1" -v b="$t2" 'BEGIN { printf "%.3f", b - a }')
    cat >"$RUN/pg-$phase-$target.round$round.json" <<JSON
{"start": $pg0, "end": $pg1, "window_s": $(awk -v a="$t0" -v b="$t2" 'BEGIN { printf "%.3f", b - a }'),
 "calls": $calls, "rows": $((ledger1 - ledger0)), "metered": $([ -n "$db" ] && echo true || echo false),
 "lag_s": $([ -n "$db" ] && echo "$lag" || echo null)}
JSON
}

rps_of() { grep -o '"rps":[0-9.e+-]*' "$1" | head -n1 | cut -d: -f2; }

# Rounds interleave the targets, so a drift in the shared machine's speed touches them
# all alike; each target's figures are those of its median round by throughput.
pick_median_rounds() {
    local phase=$1 target median
    for target in upstream nginx local full fulljs; do
        median=$(for f in "$RUN/$phase-$target".round*.json; do
            printf '%s %s\n' "$(rps_of "$f")" "$f"
        done | sort -g | awk '{ f[NR] = $2 } END { print f[int((NR + 1) / 2)] }')
        cp "$median" "$RUN/$phase-$target.json"
    done
}

TARGETS="upstream:$UPSTREAM_PORT nginx:$NGINX_PORT local:$LOCAL_PORT full:$FULL_PORT fulljs:$FULLJS_PORT"
for round in $(seq 1 "$ROUNDS"); do
    for target in $TARGETS; do
        drive closed "${target%%:*}" "${target##*:}" "$round"
    done
done
pick_median_rounds closed
account_phase closed full "$FULL_METRICS" "$DB_FULL"
account_phase closed fulljs "$FULLJS_METRICS" "$DB_FULLJS"

NGINX_RPS=$(rps_of "$RUN/closed-nginx.json")
RATE=$(awk -v r="$NGINX_RPS" -v d="$RATE_DIVISOR" 'BEGIN { printf "%d", r / d }')
[ "$RATE" -gt 0 ] || die "nginx measured no throughput"
for round in $(seq 1 "$ROUNDS"); do
    for target in $TARGETS; do
        drive rate "${target%%:*}" "${target##*:}" "$round" --rate "$RATE"
    done
done
pick_median_rounds rate
account_phase rate full "$FULL_METRICS" "$DB_FULL"
account_phase rate fulljs "$FULLJS_METRICS" "$DB_FULLJS"

# --- report -------------------------------------------------------------------------
CPU=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
cat >"$RUN/machine.json" <<JSON
{"nproc": $(nproc), "cpu": "$CPU",
 "memory_kib": $(awk '/MemTotal/ {print $2}' /proc/meminfo),
 "kernel": "$(uname -r)", "nginx": "$("$NGINX" -v 2>&1 | cut -d/ -f2)",
 "rustc": "$(rustc --version | cut -d' ' -f2)",
 "commit": "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo -dirty)",
 "started_at": "$STARTED_AT",
 "duration_s": $DURATION, "warmup_s": $WARMUP, "rounds": $ROUNDS, "concurrency": $CONCURRENCY,
 "accounts": $ACCOUNTS, "exhausted_accounts": $EXHAUSTED, "fixed_rate": $RATE,
 "rate_divisor": $RATE_DIVISOR, "clk_tck": $CLK_TCK,
 "tollgate_binary": "$TOLLGATE", "tollgate_sha256": "$(sha256sum "$TOLLGATE" | cut -c1-16)",
 "pg_baseline_us": ${PG_BASELINE_US:-null},
 "database_url_params": "$DB_PARAMS",
 "reconcile": $RECONCILED}
JSON
mkdir -p "$RESULTS"
OUT=$RESULTS/$(date -u +%Y%m%dT%H%M%SZ).json
"$EX/bench_report" --run-dir "$RUN" --out "$OUT" ${PG_BASELINE_US:+--pg-baseline-us "$PG_BASELINE_US"}
if [ "$PERF" = 1 ]; then
    for phase in closed rate; do
        [ -s "$RUN/perf-$phase.txt" ] || continue
        echo
        echo "syscalls and context switches per call, $phase: the target's own processes over every round, warmup included (perf stat)"
        printf '%-28s %12s %12s %12s\n' target calls syscalls ctx-switches
        awk '{ s[$1] += $2; c[$1] += $3; n[$1] += $4 } END {
            split("upstream nginx local full fulljs", order, " ")
            for (i = 1; i <= 5; i++) { t = order[i]; if (n[t] > 0)
                printf "%-28s %12d %12.2f %12.3f\n", t, n[t], s[t] / n[t], c[t] / n[t] } }' "$RUN/perf-$phase.txt"
    done
fi
