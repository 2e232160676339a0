"""Per-queue figures for the dashboard: live depth and age, thresholds, breaches, and depth over time.

Depth and age come from :func:`airflow_sqlqueue.maintenance.health.sample` (the same cheap ``peek`` estimate the
queue-health DAG uses); history from the samples that DAG records (:func:`recent_samples`).

Throughput: messages **sent** per minute, from the deltas of the newest position (the identity) between samples;
never negative because a queue drained. **Net flow** is the change of depth per minute: positive while a queue
grows, negative while it drains; sends and receives that overlap cancel out in it. In the overview both are
measured over one window (:func:`flow_window`: the latest recorded sample to now, or the two latest samples when
the latest is less than a minute old), so they agree: sent per minute is never below the net flow.
Critical time is the age of the oldest message, from its TimeSent.

The error queue's depth is its exact row count (retries from the middle leave gaps the cheap estimate counts), or
above 100,000 rows the database's own row estimate (PostgreSQL's ``reltuples``, SQL Server's partition counts),
shown as estimated (``depth_exact`` false).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_sqlqueue.maintenance.config import ConnectionConfig, MaintenanceConfig, resolve_queues, thresholds_for
from airflow_sqlqueue.maintenance.health import breaches, recent_samples, sample
from airflow_sqlqueue.transport import SqlQueueTransport
from airflow_sqlqueue.transport.common.errors import InvalidAddressError, QueueNotFoundError

DEFAULT_HISTORY_HOURS = 24


def canonical(transport: SqlQueueTransport, queue: str) -> str:
    """The one name the page gives a queue, whatever spelling names it: the schema always given (the database's
    default filled in), quoted only where needed (``orders``, ``public.orders`` and ``"public"."orders"`` are all
    ``public.orders`` on PostgreSQL). A text that is not an address of this database is shown as it is."""
    try:
        address = transport.address(queue)
    except (InvalidAddressError, ValueError):
        return queue
    if address.schema is None and transport.dialect.default_schema:
        address = replace(address, schema=transport.dialect.default_schema)
    return transport.dialect.format_address(address)


def configured_name(transport: SqlQueueTransport, queues: list[str], queue: str) -> str | None:
    """The configured spelling of ``queue`` (any spelling) among ``queues``, or None."""
    wanted = canonical(transport, queue)
    return next((q for q in queues if canonical(transport, q) == wanted), None)


def flow_window(samples: list[dict[str, Any]], now: dict[str, Any] | None = None
                ) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The two points the overview's net flow and messages sent per minute are both measured between: the latest
    sample and ``now`` (a live ``{"sampled_at", "depth", "newest_seq"}``) when that sample is at least a minute
    old, else the two latest samples; None when there are not two.

    The latest sample alone can be hours old (the health DAG paused): comparing two old samples then reports
    an old trend, with the wrong sign for a queue that is growing now. Both figures use one window, so they
    agree: what was sent is never less than what the queue grew by.
    """
    points = sorted(samples, key=lambda s: s["sampled_at"])
    if now is not None and points and (now["sampled_at"] - points[-1]["sampled_at"]).total_seconds() >= 60:
        points = [points[-1], now]
    if len(points) < 2 or (points[-1]["sampled_at"] - points[-2]["sampled_at"]).total_seconds() <= 0:
        return None
    return points[-2], points[-1]


def net_flow_per_minute(samples: list[dict[str, Any]], now: dict[str, Any] | None = None) -> float | None:
    """Change of depth per minute, positive while the queue grows, over :func:`flow_window`."""
    window = flow_window(samples, now)
    if window is None:
        return None
    before, last = window
    minutes = (last["sampled_at"] - before["sampled_at"]).total_seconds() / 60
    return round((last["depth"] - before["depth"]) / minutes, 2)


def sent_per_minute(samples: list[dict[str, Any]], now: dict[str, Any] | None = None) -> float | None:
    """Messages sent per minute over :func:`flow_window` (the same window as the net flow), from the sent
    position; None when either end has no position or the position went back (the table was created again)."""
    window = flow_window(samples, now)
    if window is None:
        return None
    return throughput_per_minute(list(window))[-1]


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
        is_error_queue = canonical(transport, queue) == canonical(transport, error_queue)
        exact = False
        try:
            measured = sample(transport, queue)
            if is_error_queue:  # counted, or the database's estimate above ESTIMATE_ABOVE rows (no scan)
                measured["depth"], exact = transport.errors(queue).count_or_estimate()
        except QueueNotFoundError:
            rows.append({"queue": canonical(transport, queue), "exists": False, "depth": None,
                         "oldest_age_seconds": None,
                         "thresholds": thresholds, "breaches": ["queue table does not exist"],
                         "net_flow_per_minute": None, "throughput_per_minute": None,
                         "is_error_queue": is_error_queue, "depth_exact": False})
            continue
        except Exception as exc:  # noqa: BLE001 - one queue that cannot be measured must not hide the others
            rows.append({"queue": canonical(transport, queue), "exists": True, "depth": None,
                         "oldest_age_seconds": None,
                         "thresholds": thresholds, "breaches": [f"could not be measured ({type(exc).__name__})"],
                         "net_flow_per_minute": None, "throughput_per_minute": None,
                         "is_error_queue": is_error_queue, "depth_exact": False})
            continue
        history = queue_history(config, conn.conn_id, queue, samples_transport)
        live = {"sampled_at": datetime.now(timezone.utc), "depth": measured["depth"]}
        live = {**live, "newest_seq": measured.get("newest_seq")}
        rows.append({**measured, "queue": canonical(transport, queue), "exists": True, "thresholds": thresholds,
                     "breaches": breaches(measured, thresholds),
                     "net_flow_per_minute": net_flow_per_minute(history, live),
                     "throughput_per_minute": sent_per_minute(history, live),
                     "is_error_queue": is_error_queue, "depth_exact": is_error_queue and exact})
    return rows


def throughput_per_minute(samples: list[dict[str, Any]]) -> list[float | None]:
    """Messages sent per minute up to each sample: the sent position's change since the previous sample that
    knew it, per minute. None for the first, for a sample without a position (never sent to, not readable, or
    recorded by an older version), and where the position went back (the table was created again): never
    negative because a queue drained.
    """
    out: list[float | None] = []
    known: dict[str, Any] | None = None
    for point in samples:
        value = None
        if point.get("newest_seq") is not None:
            if known is not None:
                minutes = (point["sampled_at"] - known["sampled_at"]).total_seconds() / 60
                delta = point["newest_seq"] - known["newest_seq"]
                if minutes > 0 and delta >= 0:
                    value = round(delta / minutes, 2)
            known = point
        out.append(value)
    return out


def history_points(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Samples as JSON-ready points, with the throughput (messages sent per minute) up to each one and the
    critical time (age of the oldest message, from its TimeSent)."""
    throughput = throughput_per_minute(samples)
    return [{"sampled_at": s["sampled_at"].isoformat(), "depth": s["depth"],
             "oldest_age_seconds": s["oldest_age_seconds"], "newest_seq": s.get("newest_seq"),
             "throughput_per_minute": t} for s, t in zip(samples, throughput, strict=True)]
