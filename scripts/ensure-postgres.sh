#!/usr/bin/env bash
# Makes sure a PostgreSQL server answers on 127.0.0.1:${PGPORT:-5432} with trust auth
# for user postgres, starting one when nothing answers:
#   1. a Debian cluster, through pg_ctlcluster;
#   2. otherwise a private cluster (initdb + pg_ctl) under .tollgate/pgdata.
# Installs Debian's postgresql package when no server binaries exist and we are root.
# Prints one clear line and exits non-zero when no server can be had.
# Source it (exports TOLLGATE_TEST_DATABASE_URL) or run it.
set -euo pipefail

PGHOST_ADDR=127.0.0.1
PGPORT=${PGPORT:-5432}
ROOT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PRIVATE_DIR="$ROOT_DIR/.tollgate/pgdata"

pg_bin() {
    local name=$1 found
    found=$(command -v "$name" 2>/dev/null || true)
    if [ -z "$found" ]; then
        found=$(ls -d /usr/lib/postgresql/*/bin/"$name" 2>/dev/null | sort -V | tail -n1 || true)
    fi
    echo "$found"
}

answers() {
    local ready
    ready=$(pg_bin pg_isready)
    if [ -n "$ready" ]; then
        "$ready" -q -h "$PGHOST_ADDR" -p "$PGPORT" >/dev/null 2>&1
    else
        (exec 3<>"/dev/tcp/$PGHOST_ADDR/$PGPORT") 2>/dev/null
    fi
}

wait_ready() {
    for _ in $(seq 1 60); do
        answers && return 0
        sleep 0.5
    done
    return 1
}

start_debian_cluster() {
    command -v pg_ctlcluster >/dev/null 2>&1 || return 1
    command -v pg_lsclusters >/dev/null 2>&1 || return 1
    local line version name
    line=$(pg_lsclusters --no-header 2>/dev/null | awk -v port="$PGPORT" '$3 == port {print $1, $2; exit}')
    [ -n "$line" ] || return 1
    read -r version name <<<"$line"
    pg_ctlcluster --skip-systemctl-redirect "$version" "$name" start >/dev/null 2>&1 || return 1
    wait_ready
}

start_private_cluster() {
    local initdb pg_ctl as_user=()
    initdb=$(pg_bin initdb)
    pg_ctl=$(pg_bin pg_ctl)
    if [ -z "$initdb" ] || [ -z "$pg_ctl" ]; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
            apt-get update -qq >/dev/null 2>&1 || true
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null 2>&1 || return 1
            start_debian_cluster && return 0
            initdb=$(pg_bin initdb)
            pg_ctl=$(pg_bin pg_ctl)
        fi
        [ -n "$initdb" ] && [ -n "$pg_ctl" ] || return 1
    fi
    mkdir -p "$PRIVATE_DIR"
    if [ "$(id -u)" = 0 ]; then
        # initdb refuses to run as root.
        id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
        chown -R postgres "$ROOT_DIR/.tollgate"
        as_user=(runuser -u postgres --)
    fi
    if [ ! -f "$PRIVATE_DIR/PG_VERSION" ]; then
        "${as_user[@]}" "$initdb" -D "$PRIVATE_DIR" -U postgres --auth=trust >/dev/null || return 1
    fi
    "${as_user[@]}" "$pg_ctl" -D "$PRIVATE_DIR" -l "$ROOT_DIR/.tollgate/postgres.log" \
        -o "-p $PGPORT -k /tmp -c listen_addresses=$PGHOST_ADDR" start >/dev/null || return 1
    wait_ready
}

if ! answers; then
    if ! start_debian_cluster && ! start_private_cluster; then
        echo "error: no PostgreSQL answers on $PGHOST_ADDR:$PGPORT and none could be started (see .tollgate/postgres.log)" >&2
        # shellcheck disable=SC2317
        return 1 2>/dev/null || exit 1
    fi
fi

export TOLLGATE_TEST_DATABASE_URL=${TOLLGATE_TEST_DATABASE_URL:-postgres://postgres@$PGHOST_ADDR:$PGPORT/postgres}
