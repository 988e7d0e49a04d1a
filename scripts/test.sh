#!/usr/bin/env bash
# Runs the whole test suite: unit tests, integration tests against real PostgreSQL
# (each test makes its own database and drops it) and NATS JetStream (each test makes
# its own stream and deletes it), the console in headless Chromium, and a smoke run of the
# accounting benchmark. Starts PostgreSQL and NATS when none answers, and installs
# Chromium and chromedriver, and promtool, when they are missing. Ends with one line
# totalling every test binary's results.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/ensure-postgres.sh
source scripts/ensure-postgres.sh
# shellcheck source=scripts/ensure-nats.sh
source scripts/ensure-nats.sh
# The console's browser tests drive Debian's headless Chromium through chromedriver.
# shellcheck source=scripts/ensure-chromium.sh
source scripts/ensure-chromium.sh
# The metrics test lints the exposition with Prometheus's promtool.
# shellcheck source=scripts/ensure-promtool.sh
source scripts/ensure-promtool.sh

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --locked --workspace --lib --bins --tests --benches "$@" 2>&1 | tee "$log" || status=$?
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "all tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
