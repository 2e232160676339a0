#!/usr/bin/env bash
# Install the Debian packages the test suite uses beyond Python: unixODBC and FreeTDS's ODBC driver, so that
# pyodbc imports and its tests run (the `odbc` connection type). Needs root and apt-get; without them it says so
# and the pyodbc tests are skipped. Safe to run again: it does nothing when the packages are there.
set -u
if [ -e /usr/lib/x86_64-linux-gnu/libodbc.so.2 ] || ldconfig -p 2>/dev/null | grep -q 'libodbc.so.2'; then
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "unixODBC is not installed (needs root and apt-get): pyodbc tests will be skipped" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null 2>&1 || true
apt-get install -y -qq --no-install-recommends unixodbc tdsodbc >/dev/null 2>&1 \
    || echo "apt-get could not install unixodbc tdsodbc: pyodbc tests will be skipped" >&2
exit 0
