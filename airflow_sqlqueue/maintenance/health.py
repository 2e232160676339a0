"""Queue health: depth and age of the oldest message per queue, thresholds, and the samples table.

Recording is off unless the maintenance configuration sets ``record_health_samples``. Then each health run
appends one row per queue, ``(conn_id, queue_name, sampled_at, depth, oldest_age_seconds, newest_seq)``, to the
samples table (``sqlqueue_health_samples``, created with its indexes if missing; ``newest_seq`` added to a table
made before it) and deletes rows older than the retention. ``newest_seq`` is the sent position (the last identity
the database handed out) at the sample: its deltas between samples are the messages sent in between (throughput),
which receives never lower, so a draining queue never makes it negative, unlike the depth's. The table sits in the
queue's own database, or in the one of ``health_samples_conn_id``.
Its SQL is in ``sql/<dialect>.sql`` beside this module; :func:`recent_samples` reads one queue's history.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_sqlqueue.transport import SqlQueueTransport
from airflow_sqlqueue.transport.common.errors import QueueNotFoundError
from airflow_sqlqueue.transport.common.redaction import describe
from airflow_sqlqueue.transport.dialects import Dialect
from airflow_sqlqueue.transport.dialects.sqlfile import Statement

from .tables import DialectTable, as_time, statements

log = logging.getLogger(__name__)


def sample(transport: SqlQueueTransport, queue: str) -> dict[str, Any]:
    """``{"queue", "depth", "oldest_age_seconds", "newest_seq"}`` of one queue (age None when empty or unknown;
    the age is the oldest message's critical time, from its ``TimeSent``; ``newest_seq`` is the transport's
    ``sent_position``, the last position ever handed out, None before the first send or when it cannot be read)."""
    depth = transport.peek(queue)
    age = transport.oldest_age(queue) if depth else None
    try:
        newest = transport.sent_position(queue)
    except QueueNotFoundError:
        raise
    except Exception as exc:  # noqa: BLE001 - e.g. no right to read the sequence: no throughput, still a sample
        log.warning("%s: sent position not read (no throughput): %s", transport.name(queue), describe(exc))
        newest = None
    return {"queue": transport.name(queue), "depth": depth,
            "oldest_age_seconds": None if age is None else round(max(age, 0.0), 3), "newest_seq": newest}


def breaches(measured: dict[str, Any], thresholds: dict[str, Any]) -> list[str]:
    """What crossed a threshold, in words (empty when healthy)."""
    found = []
    max_depth = thresholds.get("max_depth")
    if max_depth is not None and measured["depth"] > max_depth:
        found.append(f"depth {measured['depth']} > {max_depth}")
    max_age = thresholds.get("max_age_seconds")
    age = measured.get("oldest_age_seconds")
    if max_age is not None and age is not None and age > max_age:
        found.append(f"oldest message {age:.0f}s old > {max_age}s")
    return found


# -- the samples table -----------------------------------------------------------------------------------
def _statements(dialect_name: str) -> dict[str, Statement]:
    return statements(dialect_name)


class SamplesTable(DialectTable):
    """The samples table on one database: its quoted identifiers and its named statements."""

    def __init__(self, dialect: Dialect, table: str) -> None:
        super().__init__(dialect, table, "health_samples_table")
        queue_time_index = f"{self.address.table}_queue_time_ix"
        time_index = f"{self.address.table}_time_ix"
        self.identifiers = {"samples": dialect.qualified(self.address),
                            "queue_time_index": dialect.quote(queue_time_index),
                            "time_index": dialect.quote(time_index)}
        self.names = {"samples_name": dialect.qualified(self.address), "queue_time_index_name": queue_time_index,
                      "time_index_name": time_index, "samples_table": self.address.table}

    def create(self, cursor: Any) -> None:
        """The table and its two indexes, if missing; ``newest_seq`` on a table made before it existed."""
        self.execute(cursor, "create_health_samples")
        if self.execute(cursor, "health_samples_newest_seq_missing").fetchone()[0]:
            self.execute(cursor, "add_health_samples_newest_seq")
        for name in ("create_health_samples_queue_index", "create_health_samples_time_index"):
            self.execute(cursor, name)


def record_samples(transport: SqlQueueTransport, samples: list[dict[str, Any]], table: str, *,
                   retention_days: float | None = None, now: datetime | None = None) -> dict[str, int]:
    """Append ``samples`` (each with ``conn_id``) and drop those older than ``retention_days``, in one transaction.

    Returns ``{"recorded": n, "deleted": n}``.
    """
    samples_table = SamplesTable(transport.dialect, table)
    now = now or datetime.now(timezone.utc)
    sampled_at = samples_table.time_param(now)

    def work(cur: Any) -> dict[str, int]:
        samples_table.create(cur)
        for item in samples:
            samples_table.execute(cur, "insert_health_sample", {
                "conn_id": item["conn_id"], "queue_name": item["queue"], "sampled_at": sampled_at,
                "depth": int(item["depth"]), "oldest_age_seconds": item.get("oldest_age_seconds"),
                "newest_seq": item.get("newest_seq")})
        deleted = 0
        if retention_days is not None:
            before = samples_table.time_param(now - timedelta(days=retention_days))
            deleted = max(samples_table.execute(cur, "delete_old_health_samples", {"before": before}).rowcount, 0)
        return {"recorded": len(samples), "deleted": deleted}

    return transport.run(work, what=f"record health samples into {samples_table.name!r}")


def recent_samples(transport: SqlQueueTransport, table: str, conn_id: str, queue: str,
                   since: datetime) -> list[dict[str, Any]]:
    """The samples of one queue since ``since``, oldest first:
    ``[{"sampled_at", "depth", "oldest_age_seconds", "newest_seq"}]``."""
    samples_table = SamplesTable(transport.dialect, table)

    def work(cur: Any) -> list[dict[str, Any]]:
        rows = samples_table.execute(cur, "recent_health_samples", {
            "conn_id": conn_id, "queue_name": transport.name(queue),
            "since": samples_table.time_param(since)}).fetchall()
        return [{"sampled_at": as_time(r[0]), "depth": int(r[1]), "oldest_age_seconds": r[2],
                 "newest_seq": None if r[3] is None else int(r[3])} for r in rows]

    return transport.run(work, what=f"read health samples from {samples_table.name!r}", read_only=True)

