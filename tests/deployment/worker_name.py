"""``[core] hostname_callable`` of the deployment tests: each Celery worker of one machine gets its own name."""

from __future__ import annotations

import os
import socket


def hostname() -> str:
    """``$SQLQUEUE_DEPLOY_WORKER`` (set per worker by the harness), else the machine's name."""
    return os.environ.get("SQLQUEUE_DEPLOY_WORKER") or socket.getfqdn()
