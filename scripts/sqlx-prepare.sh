#!/usr/bin/env bash
# The query data of sqlx's build-time checked statements (.sqlx/), against a database
# migrated to this tree's migrations/:
#   scripts/sqlx-prepare.sh           writes .sqlx/ anew (run after changing a query!)
#   scripts/sqlx-prepare.sh --check   fails when the committed .sqlx/ is stale (CI)
# Installs sqlx-cli (the version of Cargo.lock's sqlx) when missing, starts PostgreSQL
# when none answers, and drops the database it made.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/ensure-postgres.sh
source scripts/ensure-postgres.sh

version=$(awk '/^name = "sqlx"$/ { getline; gsub(/"/, "", $3); print $3; exit }' Cargo.lock)
if ! cargo sqlx --version 2>/dev/null | grep -q "$version"; then
    echo "installing sqlx-cli $version (once)" >&2
    cargo install sqlx-cli --version "$version" --locked --no-default-features \
        --features postgres,rustls >&2 \
        || { echo "error: sqlx-cli $version could not be installed" >&2; exit 1; }
fi

db="tollgate_sqlx_$$"
base=${TOLLGATE_TEST_DATABASE_URL%/*}
url="$base/$db"
psql_url="$base/postgres"
psql "$psql_url" -qc "CREATE DATABASE $db" >/dev/null
trap 'psql "$psql_url" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null' EXIT
# The migrations applied with psql, each in one transaction as `tollgate migrate` does:
# the binary itself needs the query data to build.
for migration in $(ls migrations/V*__*.sql | sort -V); do
    psql "$url" -q -v ON_ERROR_STOP=1 -1 -f "$migration" >/dev/null \
        || { echo "error: $migration failed to apply" >&2; exit 1; }
done
DATABASE_URL=$url cargo sqlx prepare --workspace "$@"
