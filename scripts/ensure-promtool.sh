#!/usr/bin/env bash
# Makes sure Prometheus's promtool is installed (/usr/bin/promtool): the metrics test runs
# `promtool check metrics` on a scrape of the metrics listener. Installs Debian's
# `prometheus` package (which ships promtool) with apt-get when it is missing and we are
# root. Prints one clear line and fails when it cannot be had. Source it (exports
# PROMTOOL) or run it.
set -euo pipefail

PROMTOOL=${PROMTOOL:-/usr/bin/promtool}

promtool_fail() {
    echo "error: $*" >&2
    return 1
}

if [ ! -x "$PROMTOOL" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq >/dev/null 2>&1 || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            prometheus >/dev/null 2>&1 || true
    fi
    [ -x "$PROMTOOL" ] ||
        promtool_fail "no $PROMTOOL, and Debian's prometheus package (which ships it) could not be installed"
fi

export PROMTOOL
