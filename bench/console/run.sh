#!/usr/bin/env bash
# The console benchmark: how long each console page (and each customer portal page, and
# the usage analytics of the admin and account APIs) takes to serve with a large
# database. Seeds a fresh database (bench/console/seed.sql: 100,000 accounts and
# 1,000,000 ledger rows this month by default, with the analytics rollup accounting
# would have written for them), starts the release gateway on it, signs in, and requests
# each page CONSOLE_REQUESTS times one after another, printing the median, 95th
# percentile and worst time per page as measured by curl on loopback (the server's time
# plus a loopback round trip). Stops the gateway and drops the database on exit
# (CONSOLE_KEEP=1 keeps the database, and reuses it next time when it holds as many
# accounts and ledger rows as asked).
#
#   bench/console/run.sh
#   CONSOLE_CALLS=10000000 bench/console/run.sh     10,000,000 ledger rows this month
#   CONSOLE_ACCOUNTS=10000 CONSOLE_CALLS=100000 CONSOLE_REQUESTS=10 bench/console/run.sh   quick run
#
# Environment: CONSOLE_ACCOUNTS (default 100000), CONSOLE_CALLS (default 1000000),
# CONSOLE_REQUESTS (per page, default 30), CONSOLE_PORT (default 19180, and the next
# port for metrics), CONSOLE_PROFILE (cargo profile of the gateway, default release;
# `dev` reuses a debug build), CONSOLE_DATABASE (default tollgate_console_bench).
set -euo pipefail
cd "$(dirname "$0")/../.."

ACCOUNTS=${CONSOLE_ACCOUNTS:-100000}
CALLS=${CONSOLE_CALLS:-1000000}
REQUESTS=${CONSOLE_REQUESTS:-30}
PORT=${CONSOLE_PORT:-19180}
PROFILE=${CONSOLE_PROFILE:-release}
DATABASE=${CONSOLE_DATABASE:-tollgate_console_bench}
TOKEN=console-bench-token
BASE=http://127.0.0.1:$PORT

say() { printf '[console bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# shellcheck source=scripts/ensure-postgres.sh
source scripts/ensure-postgres.sh
PG="postgres://postgres@127.0.0.1:${PGPORT:-5432}"
psql_at() { psql -X -q -v ON_ERROR_STOP=1 "$PG/$1" "${@:2}"; }

say "building the gateway ($PROFILE)"
cargo build --locked --profile "$PROFILE" --bin tollgate >&2
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
bin="$target_dir/$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE")/tollgate"

work=$(mktemp -d)
gateway=
cleanup() {
    [ -n "$gateway" ] && kill "$gateway" 2>/dev/null && wait "$gateway" 2>/dev/null
    if [ "${CONSOLE_KEEP:-}" != 1 ]; then
        psql_at postgres -c "DROP DATABASE IF EXISTS $DATABASE" >/dev/null 2>&1 || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

export TOLLGATE__DATABASE__URL="$PG/$DATABASE?sslmode=disable"
seeded=$(psql_at postgres -Atc "SELECT 1 FROM pg_database WHERE datname = '$DATABASE'")
# A kept database is reused when it holds as many accounts and ledger rows as asked, and
# the analytics rollup (seeds older than it have none).
if [ "$seeded" = 1 ] && [ "${CONSOLE_KEEP:-}" = 1 ] &&
    [ "$(psql_at "$DATABASE" -Atc "SELECT (SELECT count(*) FROM account) || ' ' ||
        (SELECT count(*) FROM subscription_tracking) || ' ' || EXISTS (SELECT FROM usage_rollup)" \
        2>/dev/null)" = "$ACCOUNTS $CALLS true" ]; then
    say "reusing the seeded database $DATABASE"
    "$bin" migrate >&2
else
    psql_at postgres -c "DROP DATABASE IF EXISTS $DATABASE" >/dev/null
    "$bin" migrate >&2
    say "seeding $ACCOUNTS accounts and $CALLS ledger rows"
    start=$(date +%s)
    psql_at "$DATABASE" -v accounts="$ACCOUNTS" -v calls="$CALLS" -f bench/console/seed.sql >/dev/null
    say "seeded in $(($(date +%s) - start)) s"
fi

TOLLGATE__SERVER__LISTEN=127.0.0.1:$PORT \
    TOLLGATE__SERVER__METRICS_LISTEN=127.0.0.1:$((PORT + 1)) \
    TOLLGATE__ADMIN__TOKEN=$TOKEN \
    TOLLGATE__UPSTREAM__SHARED_SECRET=console-bench-secret \
    TOLLGATE__THROTTLE__STORE=memory \
    RUST_LOG=warn "$bin" serve >"$work/gateway.log" 2>&1 &
gateway=$!
for _ in $(seq 1 100); do
    curl -sf "$BASE/healthz" >/dev/null 2>&1 && break
    sleep 0.2
done
curl -sf "$BASE/healthz" >/dev/null || { cat "$work/gateway.log" >&2; exit 1; }

jar="$work/cookies"
csrf=$(curl -s -c "$jar" "$BASE/console/sign-in" | sed -n 's/.*name="csrf" value="\([0-9a-f]*\)".*/\1/p')
status=$(curl -s -o /dev/null -w '%{http_code}' -b "$jar" -c "$jar" \
    --data-urlencode "csrf=$csrf" --data-urlencode "token=$TOKEN" "$BASE/console/sign-in")
[ "$status" = 303 ] || { echo "sign-in answered $status" >&2; exit 1; }

heavy=1
typical=$((ACCOUNTS / 2))
pages=(
    "overview|/console/"
    "accounts, first page|/console/accounts"
    "accounts, exhausted only|/console/accounts?exhausted=on"
    "accounts, search by email (one match)|/console/accounts?q=bench-$((ACCOUNTS - 1))@"
    "accounts, search by email (no match)|/console/accounts?q=nobody-here"
    "accounts, search by id|/console/accounts?q=$typical"
    "account, the busiest|/console/accounts/$heavy"
    "account, a typical one|/console/accounts/$typical"
)
# Times `path` REQUESTS times with the curl arguments after it (the session).
time_page() {
    local name=$1 path=$2
    shift 2
    code=$(curl -s -o /dev/null -w '%{http_code}' "$@" "$BASE$path")
    [ "$code" = 200 ] || { echo "$path answered $code" >&2; exit 1; }
    for _ in $(seq 1 "$REQUESTS"); do
        curl -s -o /dev/null -w '%{time_total}\n' "$@" "$BASE$path"
    done | sort -n | awk -v name="$name" '
        { t[NR] = $1 * 1000 }
        END {
            p95 = int(NR * 0.95 + 0.5); if (p95 < 1) p95 = 1; if (p95 > NR) p95 = NR
            printf "| %s | %.1f | %.1f | %.1f |\n", name, t[int((NR + 1) / 2)], t[p95], t[NR]
        }'
}

printf '| page | median ms | p95 ms | max ms |\n|---|---:|---:|---:|\n'
for entry in "${pages[@]}"; do
    time_page "${entry%%|*}" "${entry#*|}" -b "$jar"
done

# The customer portal's pages, for the busiest and a typical customer: a login session of
# each made in the database (the seeded accounts have no real password).
for who in heavy typical; do
    id=${!who}
    psql_at "$DATABASE" -c "INSERT INTO account_session (account_id, token_hash, expires_at)
        VALUES ($id, sha256(convert_to('tgs_portalbench$id', 'UTF8')), now() + interval '1 hour')
        ON CONFLICT (token_hash) DO UPDATE SET expires_at = EXCLUDED.expires_at" >/dev/null
    for page in "overview|/portal/" "keys|/portal/keys" "plans|/portal/plans"; do
        time_page "portal ${page%%|*}, the $([ "$who" = heavy ] && echo busiest || echo "typical one")" \
            "${page#*|}" -H "Cookie: tollgate_portal=tgs_portalbench$id"
    done
done

# Usage analytics over the longest range, 93 days, ending on the month's last day (the
# seeded ledger fills the whole month, whatever the day the benchmark runs): the admin
# API by route, day and key, then the account API by route with the customer's login
# session (the portal's cookie holds the same token the account API takes as a bearer).
to=$(psql_at "$DATABASE" -Atc "SELECT (date_trunc('month', now() AT TIME ZONE 'UTC') + interval '1 month - 1 day')::date")
from=$(psql_at "$DATABASE" -Atc "SELECT '$to'::date - 92")
for who in heavy typical; do
    id=${!who}
    label=$([ "$who" = heavy ] && echo busiest || echo "typical one")
    for by in route day key; do
        time_page "analytics by $by, 93 days, the $label (admin)" \
            "/admin/v1/accounts/$id/analytics?from=$from&to=$to&group_by=$by" -H "Authorization: Bearer $TOKEN"
    done
    time_page "analytics by route, 93 days, the $label (account)" \
        "/account/v1/analytics?from=$from&to=$to&group_by=route" -H "Authorization: Bearer tgs_portalbench$id"
done

# The overview reuses the sums of the days before today for a minute; what the first view
# of each minute adds is summing them again, timed here on the whole seeded month.
month_sum=$(psql_at "$DATABASE" -At -c '\timing on' -c "
    SELECT count(*) FROM (
        SELECT day_start, sum(calls), sum(used) FROM (
            SELECT day_start, calls, used FROM usage_daily_closed
            WHERE day_start >= date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
            UNION ALL
            SELECT day_start, day_calls, day_used FROM usage_counter
            WHERE day_start >= date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
        ) days GROUP BY day_start) d" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p')
printf '\nsumming a whole month of usage_daily (%s rows), the overview'"'"'s read once a minute: %s ms\n' \
    "$(psql_at "$DATABASE" -Atc 'SELECT count(*) FROM usage_daily')" "$month_sum"

# What the analytics read: its rollup rows, against the ledger's and the rollup's size.
rollup_rows() {
    psql_at "$DATABASE" -Atc "SELECT count(*) FROM usage_rollup
        WHERE account_id = $1 AND day BETWEEN '$from' AND '$to'"
}
printf 'analytics %s to %s: %s rollup rows read for the busiest account, %s for the typical one (ledger %s rows, usage_rollup %s rows)\n' \
    "$from" "$to" "$(rollup_rows "$heavy")" "$(rollup_rows "$typical")" \
    "$(psql_at "$DATABASE" -Atc 'SELECT count(*) FROM subscription_tracking')" \
    "$(psql_at "$DATABASE" -Atc 'SELECT count(*) FROM usage_rollup')"
