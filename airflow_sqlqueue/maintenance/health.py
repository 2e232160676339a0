"""Queue health: depth and age of the oldest message per queue, thresholds, and the samples table.

Recording is off unless the maintenance configuration sets ``record_health_samples``. Then each health run
appends one row per queue, ``(conn_id, queue_name, sampled_at, depth, oldest_age_seconds)``, to the samples
table (``sqlqueue_health_samples``, created with its indexes if missing) and deletes rows older than the
retention. The table sits in the queue's own database, or in the one of ``health_samples_conn_id``.
Its SQL is in ``sql/<dialect>.sql`` beside this module; :func:`recent_samples` reads one queue's history.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from functools import cache
from importlib import resources
from typing import Any

from airflow_sqlqueue.transport import SqlQueueTransport
from airflow_sqlqueue.transport.address import QueueAddress
from airflow_sqlqueue.transport.dialects import Dialect
from airflow_sqlqueue.transport.sqlfile import Statement, parse_statements

_SQLITE_TIME = "%Y-%m-%d %H:%M:%S.%f"


def sample(transport: SqlQueueTransport, queue: str) -> dict[str, Any]:
    """``{"queue", "depth", "oldest_age_seconds"}`` of one queue (age None when empty or unknown)."""
    depth = transport.peek(queue)
    age = transport.oldest_age(queue) if depth else None
    return {"queue": transport.name(queue), "depth": depth,
            "oldest_age_seconds": None if age is None else round(max(age, 0.0), 3)}


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
@cache
def _statements(dialect_name: str) -> dict[str, Statement]:
    text = resources.files(__package__).joinpath("sql", f"{dialect_name}.sql").read_text(encoding="utf-8")
    return parse_statements(text)


class SamplesTable:
    """The samples table on one database: its quoted identifiers and its named statements."""

    def __init__(self, dialect: Dialect, table: str) -> None:
        self.dialect = dialect
        try:
            self.address: QueueAddress = dialect.parse_address(table)
        except ValueError as exc:
            raise ValueError(f"health_samples_table {table!r} is not a valid table name: {exc}") from None
        self.name = dialect.format_address(self.address)
        queue_time_index = f"{self.address.table}_queue_time_ix"
        time_index = f"{self.address.table}_time_ix"
        self.identifiers = {"samples": dialect.qualified(self.address),
                            "queue_time_index": dialect.quote(queue_time_index),
                            "time_index": dialect.quote(time_index)}
        self.names = {"samples_name": dialect.qualified(self.address), "queue_time_index_name": queue_time_index,
                      "time_index_name": time_index}

    def execute(self, cursor: Any, name: str, params: dict[str, Any] | None = None) -> Any:
        """Run one named statement of ``sql/<dialect>.sql`` (identifiers quoted, values as parameters).

        The dialect runs it, so the samples table's name reaches each driver exactly as the queue names do.
        """
        statement = _statements(self.dialect.name)[name]
        values = {**self.names, **(params or {})}
        used = set(statement.params)
        return self.dialect.execute_statement(cursor, statement, {k: v for k, v in values.items() if k in used},
                                              self.identifiers)

    def create(self, cursor: Any) -> None:
        """The table and its two indexes, if missing."""
        for name in ("create_health_samples", "create_health_samples_queue_index",
                     "create_health_samples_time_index"):
            self.execute(cursor, name)

    def time_param(self, when: datetime) -> Any:
        """A UTC time as the column stores it."""
        when = when.astimezone(timezone.utc)
        if self.dialect.name == "sqlite":
            return when.strftime(_SQLITE_TIME)
        if self.dialect.name == "mssql":
            return when.replace(tzinfo=None)
        return when


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
                "depth": int(item["depth"]), "oldest_age_seconds": item.get("oldest_age_seconds")})
        deleted = 0
        if retention_days is not None:
            before = samples_table.time_param(now - timedelta(days=retention_days))
            deleted = max(samples_table.execute(cur, "delete_old_health_samples", {"before": before}).rowcount, 0)
        return {"recorded": len(samples), "deleted": deleted}

    return transport.run(work, what=f"record health samples into {samples_table.name!r}")


def recent_samples(transport: SqlQueueTransport, table: str, conn_id: str, queue: str,
                   since: datetime) -> list[dict[str, Any]]:
    """The samples of one queue since ``since``, oldest first: ``[{"sampled_at", "depth", "oldest_age_seconds"}]``."""
    samples_table = SamplesTable(transport.dialect, table)

    def work(cur: Any) -> list[dict[str, Any]]:
        rows = samples_table.execute(cur, "recent_health_samples", {
            "conn_id": conn_id, "queue_name": transport.name(queue),
            "since": samples_table.time_param(since)}).fetchall()
        return [{"sampled_at": _as_time(r[0]), "depth": int(r[1]), "oldest_age_seconds": r[2]} for r in rows]

    return transport.run(work, what=f"read health samples from {samples_table.name!r}", read_only=True)


def _as_time(value: Any) -> datetime:
    if isinstance(value, str):
        value = datetime.strptime(value, _SQLITE_TIME)
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)
