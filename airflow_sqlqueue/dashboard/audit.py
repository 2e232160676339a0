"""Audit of the dashboard's actions: a row in Airflow's audit log (Browse -> Audit Log) and a Python log line."""

from __future__ import annotations

import json
import logging
from typing import Any

log = logging.getLogger("airflow_sqlqueue.dashboard.audit")


def audit(event: str, user_name: str, details: dict[str, Any]) -> None:
    """Record an action taken through the dashboard; ``details`` hold ids and counts only, never secrets."""
    from airflow.models.log import Log
    from airflow.utils.session import create_session

    extra = json.dumps(details, default=str, sort_keys=True)
    log.info("%s by %s: %s", event, user_name, extra)
    with create_session() as session:
        session.add(Log(event=event, owner=user_name, owner_display_name=user_name, extra=extra))
