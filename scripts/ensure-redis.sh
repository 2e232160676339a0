#!/usr/bin/env bash
# Make sure Redis answers on 127.0.0.1:6379 (the CeleryExecutor deployment test's broker); start it if it is down.
set -u
ready() { python3 - <<'PY'
import socket, sys
s = socket.socket(); s.settimeout(1)
sys.exit(0 if s.connect_ex(("127.0.0.1", 6379)) == 0 else 1)
PY
}
ready && exit 0
if command -v redis-server >/dev/null 2>&1; then
    mkdir -p /var/lib/redis /var/log/redis 2>/dev/null || true
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
        --dir /var/lib/redis --logfile /var/log/redis/ci.log || true
fi
for _ in $(seq 1 15); do ready && exit 0; sleep 1; done
echo "Redis is not reachable on 127.0.0.1:6379; the Celery deployment test will fail" >&2
exit 0
