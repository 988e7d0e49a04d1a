#!/usr/bin/env bash
# Makes sure a NATS server with JetStream answers on 127.0.0.1:${NATS_PORT:-4222}, starting
# one when nothing answers: `nats-server -js`, its store and log under .tollgate/nats.
# Installs Debian's nats-server package when the binary is missing and we are root.
# Prints one clear line and exits non-zero when no such server can be had.
# Source it (exports TOLLGATE_TEST_NATS_URL, and NATS_SERVER: the binary) or run it.
set -euo pipefail

NATS_HOST_ADDR=127.0.0.1
NATS_PORT=${NATS_PORT:-4222}
ROOT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NATS_DIR="$ROOT_DIR/.tollgate/nats"

nats_server_bin() {
    command -v nats-server 2>/dev/null ||
        { [ -x /usr/sbin/nats-server ] && echo /usr/sbin/nats-server; } ||
        true
}

# The server's INFO line, empty when nothing speaks NATS on the port.
nats_info() {
    timeout 2 bash -c "exec 3<>/dev/tcp/$NATS_HOST_ADDR/$NATS_PORT && head -n1 <&3" 2>/dev/null || true
}

nats_fail() {
    echo "error: $*" >&2
    return 1
}

NATS_SERVER=$(nats_server_bin)
if [ -z "$NATS_SERVER" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq >/dev/null 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nats-server >/dev/null 2>&1 || true
    NATS_SERVER=$(nats_server_bin)
    # The package's own service (where systemd runs it) has no JetStream: ours replaces it.
    if [ -n "$NATS_SERVER" ] && command -v systemctl >/dev/null 2>&1; then
        systemctl stop nats-server >/dev/null 2>&1 || true
    fi
fi

info=$(nats_info)
if [ -z "$info" ]; then
    [ -n "$NATS_SERVER" ] ||
        nats_fail "no NATS answers on $NATS_HOST_ADDR:$NATS_PORT and no nats-server binary could be installed (Debian package nats-server)"
    mkdir -p "$NATS_DIR"
    setsid "$NATS_SERVER" -js -a "$NATS_HOST_ADDR" -p "$NATS_PORT" -sd "$NATS_DIR/store" \
        -l "$NATS_DIR/nats-server.log" -P "$NATS_DIR/nats-server.pid" </dev/null >/dev/null 2>&1 &
    for _ in $(seq 1 100); do
        info=$(nats_info)
        [ -n "$info" ] && break
        sleep 0.1
    done
    [ -n "$info" ] ||
        nats_fail "nats-server did not start on $NATS_HOST_ADDR:$NATS_PORT (see $NATS_DIR/nats-server.log)"
fi
case "$info" in
*'"jetstream":true'*) ;;
*) nats_fail "the NATS server on $NATS_HOST_ADDR:$NATS_PORT runs without JetStream; restart it with -js" ;;
esac

export NATS_SERVER
export TOLLGATE_TEST_NATS_URL=${TOLLGATE_TEST_NATS_URL:-nats://$NATS_HOST_ADDR:$NATS_PORT}
