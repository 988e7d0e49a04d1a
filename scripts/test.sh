#!/usr/bin/env bash
# Runs the whole test suite: unit tests, and integration tests against real
# PostgreSQL (each test makes its own database and drops it). Starts PostgreSQL
# when none answers.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/ensure-postgres.sh
source scripts/ensure-postgres.sh
cargo test --locked --all-targets "$@"
