#!/usr/bin/env bash
# Install the Debian packages the test suite uses beyond Python:
# - unixODBC and FreeTDS's ODBC driver, so that pyodbc imports and its tests run (the `odbc` connection type);
# - Chromium (and a font for its screenshots), for the browser test of the "SQL Queues" page.
# Needs root and apt-get; without them it says so and those tests are skipped. Safe to run again: it does
# nothing (no apt-get update) when every package is there.
set -u
missing=()
if ! [ -e /usr/lib/x86_64-linux-gnu/libodbc.so.2 ] && ! ldconfig -p 2>/dev/null | grep -q 'libodbc.so.2'; then
    missing+=(unixodbc tdsodbc)
fi
if ! command -v chromium >/dev/null 2>&1; then
    missing+=(chromium fonts-dejavu-core)
fi
if [ "${#missing[@]}" = 0 ]; then
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "not installed (needs root and apt-get): ${missing[*]}; the tests that need them will be skipped" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null 2>&1 || true
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 \
    || echo "apt-get could not install ${missing[*]}: the tests that need them will be skipped" >&2
exit 0
