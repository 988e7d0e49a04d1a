#!/usr/bin/env bash
# The fuzz and fault suite, from one command:
#   1. the property tests (`cargo test --lib prop`);
#   2. a gateway with a local upstream, like scripts/demo.sh but on its own ports and its
#      own database (PostgreSQL is started when none answers);
#   3. schemathesis (installed into .tollgate/venv when missing) against the gateway's
#      /openapi.json with every check, each operation with the credential its `security`
#      names: the admin token, a session from a real login (the account of the document's
#      login example, signed up first), or an API key of that account;
#   4. per operation, how many cases reached a 2xx (every operation should).
# Ends with one summary line; exits non-zero when a property test failed, the gateway
# answered a 5xx, or an answer broke the document (undocumented status, body not matching
# its schema, valid data refused, invalid data accepted, ...). Stops everything it started.
#
#   scripts/fuzz.sh                      defaults below
#   FUZZ_EXAMPLES=50 scripts/fuzz.sh     fewer test cases per operation and phase
#
# FUZZ_EXAMPLES   test cases per operation (schemathesis --max-examples)       [50]
# FUZZ_TIMEOUT    wall-clock bound of the schemathesis run, in seconds        [900]
# FUZZ_SEED       schemathesis seed, to replay a run                         [random]
# FUZZ_WORKERS    concurrent schemathesis workers                               [1]
#                 (more than one can trip "AST constructor recursion depth mismatch",
#                 a thread-safety bug of some CPython 3.11 builds, as a run error)
# FUZZ_ADDR, FUZZ_UPSTREAM_ADDR, FUZZ_METRICS_ADDR, FUZZ_DATABASE            [below]
# Extra arguments are passed to `schemathesis run` (e.g. --include-tag admin).
# Reports: .tollgate/fuzz/ (schemathesis output, JSON report, gateway log).
set -euo pipefail
cd "$(dirname "$0")/.."

EXAMPLES=${FUZZ_EXAMPLES:-50}
TIMEOUT=${FUZZ_TIMEOUT:-900}
GATEWAY_ADDR=${FUZZ_ADDR:-127.0.0.1:18480}
UPSTREAM_ADDR=${FUZZ_UPSTREAM_ADDR:-127.0.0.1:18490}
METRICS_ADDR=${FUZZ_METRICS_ADDR:-127.0.0.1:18491}
DATABASE=${FUZZ_DATABASE:-tollgate_fuzz}
BASE="http://$GATEWAY_ADDR"
OUT=.tollgate/fuzz
VENV=.tollgate/venv
mkdir -p "$OUT"
rm -f "$OUT/report.json"

PIDS=()
PG_STARTED=0
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    if [ "$PG_STARTED" = 1 ]; then stop_postgres; fi
}

# Stops the PostgreSQL server scripts/ensure-postgres.sh started for this run.
stop_postgres() {
    local port=${PGPORT:-5432} line version name pg_ctl as_user=()
    if [ -f .tollgate/pgdata/postmaster.pid ]; then
        pg_ctl=$(pg_bin pg_ctl)
        if [ "$(id -u)" = 0 ]; then as_user=(runuser -u postgres --); fi
        "${as_user[@]}" "$pg_ctl" -D .tollgate/pgdata stop -m fast >/dev/null 2>&1 || true
    elif command -v pg_lsclusters >/dev/null 2>&1; then
        line=$(pg_lsclusters --no-header 2>/dev/null | awk -v port="$port" '$3 == port {print $1, $2; exit}')
        if [ -n "$line" ]; then
            read -r version name <<<"$line"
            pg_ctlcluster --skip-systemctl-redirect "$version" "$name" stop >/dev/null 2>&1 || true
        fi
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say() { printf '\n== %s\n' "$*"; }

# --- 1. property tests --------------------------------------------------------------
say "property tests (cargo test --lib prop)"
prop_status=0
cargo test --locked --lib prop 2>&1 | tee "$OUT/proptest.log" || prop_status=$?
prop_counts=$(awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
    END { printf "%d passed, %d failed", p, f }' "$OUT/proptest.log")

# --- 2. PostgreSQL, the gateway and its upstream -------------------------------------
say "gateway on $BASE (database $DATABASE)"
if ! (exec 3<>"/dev/tcp/127.0.0.1/${PGPORT:-5432}") 2>/dev/null; then PG_STARTED=1; fi
# shellcheck source=scripts/ensure-postgres.sh
source scripts/ensure-postgres.sh
cargo build --quiet --locked --bin tollgate --example demo_upstream
target_dir=${CARGO_TARGET_DIR:-target}

export TOLLGATE__DATABASE__URL="postgres://postgres@127.0.0.1:${PGPORT:-5432}/$DATABASE"
export TOLLGATE__SERVER__LISTEN="$GATEWAY_ADDR"
export TOLLGATE__SERVER__METRICS_LISTEN="$METRICS_ADDR"
export TOLLGATE__UPSTREAM__BASE_URL="http://$UPSTREAM_ADDR"
export TOLLGATE__UPSTREAM__SHARED_SECRET=fuzz-shared-secret
export TOLLGATE__THROTTLE__STORE=memory
export TOLLGATE__LOG__FILTER=${TOLLGATE__LOG__FILTER:-warn}
# The account API's abuse limits fit people, not a fuzzer sending thousands of signups and
# logins from one address: raised here, so valid data is not refused for its rate (the
# limits themselves are tested in tests/integration/accounts/limits.rs).
export TOLLGATE__ACCOUNT__SIGNUPS_PER_IP_PER_HOUR=1000000
export TOLLGATE__ACCOUNT__LOGIN_FAILURES_PER_HOUR=1000000
export TOLLGATE__ACCOUNT__MAX_KEYS=1000000
# Likewise the admin token's: its negative-auth checks send wrong tokens by the dozen.
export TOLLGATE__ADMIN__FAILURES_PER_HOUR=1000000
export TOLLGATE__BILLING__STRIPE_WEBHOOK_SECRET=whsec_fuzz
# The demo's plan catalogue, so the document names catalogue plans (codes, subscriptions).
FUZZ_CONFIG=scripts/demo.toml
ADMIN_TOKEN="fuzz-admin-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
export TOLLGATE__ADMIN__TOKEN=$ADMIN_TOKEN
unset TOLLGATE_PROFILE

# A fresh database each run, so a run does not depend on the last one.
if command -v psql >/dev/null 2>&1; then
    psql -q -h 127.0.0.1 -p "${PGPORT:-5432}" -U postgres -d postgres \
        -c "DROP DATABASE IF EXISTS \"$DATABASE\" WITH (FORCE)" >/dev/null
fi

"$target_dir/debug/examples/demo_upstream" "$UPSTREAM_ADDR" >"$OUT/upstream.log" 2>&1 &
PIDS+=($!)
"$target_dir/debug/tollgate" migrate --config "$FUZZ_CONFIG" >"$OUT/migrate.log" 2>&1
"$target_dir/debug/tollgate" serve --config "$FUZZ_CONFIG" >"$OUT/gateway.log" 2>&1 &
gateway_pid=$!
PIDS+=("$gateway_pid")
for _ in $(seq 1 150); do
    curl -fsS "$BASE/readyz" >/dev/null 2>&1 && break
    if ! kill -0 "$gateway_pid" 2>/dev/null; then
        echo "error: the gateway exited; see $OUT/gateway.log:" >&2
        tail -n 5 "$OUT/gateway.log" >&2
        exit 1
    fi
    sleep 0.2
done
curl -fsS "$BASE/readyz" >/dev/null

# The account whose session and API key the account operations use is the one of the
# document's login example, so that example logs in for real. A fresh key is made for
# it, whether the signup is new or the account is left from an earlier run.
curl -fsS "$BASE/openapi.json" >"$OUT/openapi.json"
credentials=$(python3 - "$OUT/openapi.json" <<'PY'
import json, sys
fields = json.load(open(sys.argv[1]))["components"]["schemas"]["LoginRequest"]["properties"]
print(json.dumps({"email": fields["email"]["example"], "password": fields["password"]["example"]}))
PY
)
curl -sS -o /dev/null -X POST "$BASE/account/v1/signup" -H 'content-type: application/json' -d "$credentials"
login=$(curl -fsS -X POST "$BASE/account/v1/login" -H 'content-type: application/json' -d "$credentials")
field() { python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }
TOLLGATE_FUZZ_SESSION=$(field token <<<"$login")
key=$(curl -fsS -X POST "$BASE/account/v1/keys" -H "authorization: Bearer $TOLLGATE_FUZZ_SESSION")
TOLLGATE_FUZZ_API_KEY=$(field api_key <<<"$key")
export TOLLGATE_FUZZ_API_KEY TOLLGATE_FUZZ_SESSION TOLLGATE_FUZZ_ADMIN_TOKEN=$ADMIN_TOKEN

# Values that exist, which schemathesis puts in some cases (scripts/schemathesis.toml's
# dictionaries) so the operations on one thing reach a 2xx, not only a 404: the accounts'
# ids, keys of the fuzzed account other than the one the API-key operations use (revoking
# that one would leave them only 401), and unredeemed codes of a catalogue plan.
accounts=()
for _ in 1 2 3; do
    account=$(curl -fsS -X POST "$BASE/account/v1/signup" -H 'content-type: application/json' \
        -d "{\"email\":\"fuzz-$(date +%s%N)@example.com\",\"password\":\"fuzz password\"}")
    accounts+=("$(field account_id <<<"$account")")
done
keys=()
for _ in $(seq 1 20); do
    key=$(curl -fsS -X POST "$BASE/account/v1/keys" -H "authorization: Bearer $TOLLGATE_FUZZ_SESSION")
    keys+=("$(field key_id <<<"$key")")
done
plan=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["components"]["schemas"]["CodesRequest"]["properties"]["plan"]["enum"][0])' <"$OUT/openapi.json")
codes=$(curl -fsS -X POST "$BASE/admin/v1/codes" -H "authorization: Bearer $ADMIN_TOKEN" \
    -H 'content-type: application/json' -d "{\"plan\":\"$plan\",\"months\":1,\"count\":1000}" |
    python3 -c 'import json, sys; print(json.dumps(json.load(sys.stdin)["codes"]))')
{
    cat scripts/schemathesis.toml
    echo
    echo "[dictionaries.accounts]"
    echo "values = [$(IFS=,; echo "${accounts[*]}")]"
    echo "[dictionaries.keys]"
    echo "values = [$(IFS=,; echo "${keys[*]}")]"
    echo "[dictionaries.codes]"
    echo "values = $codes"
} >"$OUT/schemathesis.toml"
export TOLLGATE_FUZZ_WEBHOOK_SECRET=whsec_fuzz

# --- 3. schemathesis ------------------------------------------------------------------
if [ ! -x "$VENV/bin/schemathesis" ]; then
    say "installing schemathesis into $VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --upgrade pip >/dev/null
    "$VENV/bin/pip" install --quiet 'schemathesis>=4,<5'
fi

# --- 4. the run -----------------------------------------------------------------------
say "schemathesis $("$VENV/bin/schemathesis" --version | awk '{print $NF}'): $EXAMPLES examples per operation, at most ${TIMEOUT}s"
seed_args=()
if [ -n "${FUZZ_SEED:-}" ]; then seed_args=(--seed "$FUZZ_SEED"); fi
st_status=0
timeout --signal=INT --kill-after=60 "$TIMEOUT" \
    env SCHEMATHESIS_HOOKS=fuzz_hooks PYTHONPATH=scripts \
    "$VENV/bin/schemathesis" --config-file "$OUT/schemathesis.toml" --no-color \
    run "$BASE/openapi.json" \
    --checks all \
    --max-examples "$EXAMPLES" \
    --workers "${FUZZ_WORKERS:-1}" \
    --request-timeout 30 \
    --report json,har --report-json-path "$OUT/report.json" --report-har-path "$OUT/cases.har" \
    --report-dir "$OUT" \
    --generation-database "$OUT/examples" \
    "${seed_args[@]}" "$@" 2>&1 | tee "$OUT/schemathesis.log" || st_status=$?

# --- 5. one summary -------------------------------------------------------------------
if [ ! -s "$OUT/report.json" ]; then
    echo "fuzz: schemathesis wrote no report (exit $st_status); see $OUT/schemathesis.log" >&2
    exit 1
fi
summary=$(python3 - "$OUT/report.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
ops = (report.get("operations") or {}).get("tested", 0)
cases = report["test_cases"]["generated"]
server = violations = 0
for group in report["failures"]:
    if group["code"] in ("ST101", "ST102"):   # not_a_server_error
        server += group["count"]
    else:
        violations += group["count"]
errors = sum(e["count"] for e in report["errors"])
print(ops, cases, server, violations, errors, report["stop_reason"])
PY
)
read -r ops cases server violations errors stop_reason <<<"$summary"

# Per operation, the cases that reached a 2xx (from the HAR of every request sent).
echo
echo "cases reaching 2xx per operation:"
unreached=$(python3 - "$OUT/openapi.json" "$OUT/cases.har" <<'PY'
import json, re, sys
from urllib.parse import urlparse
doc = json.load(open(sys.argv[1]))
ops = {}
for path, item in doc["paths"].items():
    pattern = re.compile("^" + re.sub(r"\\{[^}]+\\}", "[^/]+", re.escape(path)) + "$")
    for method in item:
        ops[(method.upper(), path)] = [pattern, 0, 0]
try:
    entries = json.load(open(sys.argv[2]))["log"]["entries"]
except (OSError, ValueError, KeyError):
    entries = []
for entry in entries:
    method = entry["request"]["method"]
    path = urlparse(entry["request"]["url"]).path
    for (m, _), counts in ops.items():
        if m == method and counts[0].match(path):
            counts[1] += 1
            if 200 <= entry["response"]["status"] < 300:
                counts[2] += 1
            break
unreached = 0
for (method, path), (_, total, ok) in sorted(ops.items(), key=lambda kv: kv[0][1]):
    print(f"  {ok:6d} / {total:<6d} {method} {path}", file=sys.stderr)
    unreached += ok == 0
print(unreached)
PY
)

echo
echo "fuzz summary: $ops operations, $cases test cases, $server server errors (5xx), $violations schema violations, $errors run errors (stopped: $stop_reason), $unreached operations never reaching 2xx; property tests: $prop_counts"
if [ "$server" != 0 ] || [ "$violations" != 0 ]; then
    echo "details: $OUT/schemathesis.log, gateway log: $OUT/gateway.log"
fi
[ "$prop_status" = 0 ] && [ "$server" = 0 ] && [ "$violations" = 0 ] && [ "$errors" = 0 ] && [ "$ops" != 0 ]
