"""Per-queue figures for the dashboard: live depth and age, thresholds, breaches, and depth over time.

Depth and age come from :func:`airflow_sqlqueue.maintenance.health.sample` (the same cheap ``peek`` estimate the
queue-health DAG uses); history from the samples that DAG records (:func:`recent_samples`).

Throughput: the samples hold depths only, so what is shown is the **net flow**, the change of depth per minute
between the two latest samples: positive while a queue grows, negative while it drains. It is not the number of
messages sent or received: when sends and receives overlap, they cancel out in the depth.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_sqlqueue.maintenance.config import ConnectionConfig, MaintenanceConfig, resolve_queues, thresholds_for
from airflow_sqlqueue.maintenance.health import breaches, recent_samples, sample
from airflow_sqlqueue.transport import SqlQueueTransport
from airflow_sqlqueue.transport.errors import QueueNotFoundError

DEFAULT_HISTORY_HOURS = 24


def net_flow_per_minute(samples: list[dict[str, Any]]) -> float | None:
    """Change of depth per minute between the two latest samples (None with fewer than two)."""
    if len(samples) < 2:
        return None
    before, last = samples[-2], samples[-1]
    minutes = (last["sampled_at"] - before["sampled_at"]).total_seconds() / 60
    if minutes <= 0:
        return None
    return round((last["depth"] - before["depth"]) / minutes, 2)


def queue_history(config: MaintenanceConfig, conn_id: str, queue: str, samples_transport: SqlQueueTransport,
                  hours: float = DEFAULT_HISTORY_HOURS, now: datetime | None = None) -> list[dict[str, Any]]:
    """Samples of one queue over the last ``hours``, oldest first; empty when nothing was recorded yet."""
    since = (now or datetime.now(timezone.utc)) - timedelta(hours=hours)
    try:
        return recent_samples(samples_transport, config.health_samples_table, conn_id, queue, since)
    except QueueNotFoundError:  # the samples table is made by the first health run that records
        return []


def connection_queues(config: MaintenanceConfig, conn: ConnectionConfig, transport: SqlQueueTransport,
                      samples_transport: SqlQueueTransport) -> list[dict[str, Any]]:
    """Every configured (or discovered) queue of one connection with its figures, in configuration order."""
    error_queue = transport.name(conn.error_queue)
    rows = []
    for queue in resolve_queues(conn, transport):
        thresholds = thresholds_for(config, conn, queue, transport)
        try:
            measured = sample(transport, queue)
        except QueueNotFoundError:
            rows.append({"queue": queue, "exists": False, "depth": None, "oldest_age_seconds": None,
                         "thresholds": thresholds, "breaches": ["queue table does not exist"],
                         "net_flow_per_minute": None, "is_error_queue": queue == error_queue})
            continue
        history = queue_history(config, conn.conn_id, queue, samples_transport)
        rows.append({**measured, "exists": True, "thresholds": thresholds,
                     "breaches": breaches(measured, thresholds), "net_flow_per_minute": net_flow_per_minute(history),
                     "is_error_queue": queue == error_queue})
    return rows


def history_points(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Samples as JSON-ready points."""
    return [{"sampled_at": s["sampled_at"].isoformat(), "depth": s["depth"],
             "oldest_age_seconds": s["oldest_age_seconds"]} for s in samples]
