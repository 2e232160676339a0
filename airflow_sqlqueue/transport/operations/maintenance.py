"""Maintenance operations: purge expired messages, schema and index check with repair."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..common.validation import check_count
from ..dialects import Finding
from ..tables.queue import TableQueue
from ..tables.session import Session
from .migration import MIGRATIONS, migrate, run_outside_transaction

log = logging.getLogger(__name__)


def purge_expired(session: Session, queue: TableQueue, batch_size: int,
                  progress: Callable[[int], None] | None = None) -> int:
    """Delete expired rows by seq in batches of ``batch_size`` (one transaction each) until a batch is short.

    Deadlocks with receivers are retried by the session (logged as warnings, not failures).
    """
    check_count(batch_size, "batch_size")
    dialect = session.dialect
    total = 0

    def one_batch(cur: Any) -> int:
        return max(dialect.execute(cur, "purge_expired", {"batch_size": batch_size}, **queue.ids).rowcount, 0)

    while True:
        deleted = session.run(one_batch, what=f"purge expired from {queue.name!r}")
        total += deleted
        if progress is not None and deleted:
            progress(deleted)
        if deleted < batch_size:
            log.info("purged %d expired messages from %s", total, queue.name)
            return total


def check(session: Session, queue: TableQueue, repair: bool) -> list[Finding]:
    """Findings for one queue; with ``repair``, run each finding's repair statements and check again."""
    dialect = session.dialect
    address, name = queue.address, queue.name

    def inspect(cur: Any) -> list[Finding]:
        if not dialect.table_exists(cur, address):
            return [Finding(name, "missing_queue", f"queue table {name} does not exist")]
        return dialect.check(cur, address)

    findings = session.run(inspect, what=f"check {name!r}", read_only=True)
    if not repair or not any(f.repairable for f in findings):
        return findings
    for finding in findings:
        for statement in finding.repair:
            log.warning("repairing %s on %s: %s", finding.code, name, statement)
            if statement == "vacuum":
                run_outside_transaction(session, queue, "vacuum_table")
            elif statement in MIGRATIONS:
                migrate(session, queue, statement)
            else:
                session.run(lambda cur, s=statement: dialect.execute(cur, s, None, **queue.ids),
                            what=f"repair {finding.code} on {name!r}")
    return session.run(inspect, what=f"check {name!r}", read_only=True)
