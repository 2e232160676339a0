"""Queue health: depth and age of the oldest message per queue, thresholds, and optional sample recording.

Recording is off unless the maintenance configuration sets ``record_health_samples``; then each health run
appends one row per queue to ``sqlqueue_health_samples`` (created if missing) in the queue's own database.
The SQL is in ``sql/<dialect>.sql`` beside this module.
"""

from __future__ import annotations

from datetime import datetime, timezone
from functools import cache
from importlib import resources
from typing import Any

from airflow_sqlqueue.transport import SqlQueueTransport
from airflow_sqlqueue.transport.sqlfile import Statement, parse_statements


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


@cache
def _statements(dialect_name: str) -> dict[str, Statement]:
    text = resources.files(__package__).joinpath("sql", f"{dialect_name}.sql").read_text(encoding="utf-8")
    return parse_statements(text)


def _run(cursor: Any, transport: SqlQueueTransport, name: str, params: dict[str, Any], table: str) -> None:
    dialect = transport.dialect
    statement = _statements(dialect.name)[name]
    text = statement.text.replace("{samples}", dialect.qualified(dialect.parse_address(table)))
    sql, order = statement.convert(text, dialect.paramstyle)
    if order is not None:
        cursor.execute(sql, tuple(params[n] for n in order))
    else:
        cursor.execute(sql, params)


def record_samples(transport: SqlQueueTransport, samples: list[dict[str, Any]], table: str) -> int:
    """Append samples to ``table`` (created if missing) in one transaction; return how many rows."""
    if not samples:
        return 0
    dialect = transport.dialect
    now = datetime.now(timezone.utc)
    sampled_at: Any = now.isoformat() if dialect.name == "sqlite" else (
        now.replace(tzinfo=None) if dialect.name == "mssql" else now)
    samples_name = dialect.format_address(dialect.parse_address(table))

    def work(cur: Any) -> int:
        _run(cur, transport, "create_health_samples", {"samples_name": samples_name}, table)
        for item in samples:
            _run(cur, transport, "insert_health_sample",
                 {"sampled_at": sampled_at, "queue_name": item["queue"], "depth": int(item["depth"]),
                  "oldest_age_seconds": item.get("oldest_age_seconds")}, table)
        return len(samples)

    return transport.run(work, what=f"record health samples into {samples_name!r}")
