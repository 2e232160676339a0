#!/usr/bin/env bash
# Make sure PostgreSQL answers on 127.0.0.1:5432 (start the local cluster if it is down).
set -u
ready() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null || python3 - <<'PY'
import socket, sys
s = socket.socket(); s.settimeout(1)
sys.exit(0 if s.connect_ex(("127.0.0.1", 5432)) == 0 else 1)
PY
}
ready && exit 0
if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
    version=$(ls /etc/postgresql | head -n 1)
    pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
fi
for _ in $(seq 1 30); do ready && exit 0; sleep 1; done
echo "PostgreSQL is not reachable on 127.0.0.1:5432; PostgreSQL tests will be skipped" >&2
exit 0
