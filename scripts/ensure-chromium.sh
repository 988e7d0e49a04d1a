#!/usr/bin/env bash
# Makes sure Debian's headless browser and its WebDriver are installed: /usr/bin/chromium
# and /usr/bin/chromedriver, which the console's browser tests drive (they start
# chromedriver themselves, on a free port). Installs the `chromium` and `chromium-driver`
# packages with apt-get when either is missing and we are root. Prints one clear line and
# fails when they cannot be had. Source it (exports CHROMIUM and CHROMEDRIVER) or run it.
set -euo pipefail

CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
CHROMEDRIVER=${CHROMEDRIVER:-/usr/bin/chromedriver}

chromium_fail() {
    echo "error: $*" >&2
    return 1
}

if [ ! -x "$CHROMIUM" ] || [ ! -x "$CHROMEDRIVER" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq >/dev/null 2>&1 || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            chromium chromium-driver fonts-dejavu-core >/dev/null 2>&1 || true
    fi
    [ -x "$CHROMIUM" ] && [ -x "$CHROMEDRIVER" ] ||
        chromium_fail "no $CHROMIUM and $CHROMEDRIVER, and Debian's chromium and chromium-driver packages could not be installed"
fi

export CHROMIUM CHROMEDRIVER
