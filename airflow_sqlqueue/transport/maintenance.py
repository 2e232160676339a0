"""Maintenance operations: purge expired messages, schema and index check with repair."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .address import QueueAddress
from .dialects import Finding
from .validation import check_count

if TYPE_CHECKING:
    from .transport import SqlQueueTransport

log = logging.getLogger(__name__)


def purge_expired(transport: SqlQueueTransport, address: QueueAddress, batch_size: int,
                  progress: Callable[[int], None] | None = None) -> int:
    """Delete expired rows by seq in batches of ``batch_size`` (one transaction each) until a batch is short.

    Deadlocks with receivers are retried by ``transport.run`` (logged as warnings, not failures).
    """
    check_count(batch_size, "batch_size")
    dialect = transport.dialect
    ids = dialect.identifiers(address)
    total = 0

    def one_batch(cur: Any) -> int:
        return max(dialect.execute(cur, "purge_expired", {"batch_size": batch_size}, **ids).rowcount, 0)

    while True:
        deleted = transport.run(one_batch, what=f"purge expired from {dialect.format_address(address)!r}")
        total += deleted
        if progress is not None and deleted:
            progress(deleted)
        if deleted < batch_size:
            log.info("purged %d expired messages from %s", total, dialect.format_address(address))
            return total


def check(transport: SqlQueueTransport, address: QueueAddress, repair: bool) -> list[Finding]:
    """Findings for one queue; with ``repair``, run each finding's repair statements and check again."""
    dialect = transport.dialect
    name = dialect.format_address(address)

    def inspect(cur: Any) -> list[Finding]:
        if not dialect.table_exists(cur, address):
            return [Finding(name, "missing_queue", f"queue table {name} does not exist")]
        return dialect.check(cur, address)

    findings = transport.run(inspect, what=f"check {name!r}", read_only=True)
    if not repair or not any(f.repairable for f in findings):
        return findings
    ids = dialect.identifiers(address)
    for finding in findings:
        for statement in finding.repair:
            log.warning("repairing %s on %s: %s", finding.code, name, statement)
            if statement == "vacuum":
                _vacuum(transport, address)
            else:
                transport.run(lambda cur, s=statement: dialect.execute(cur, s, None, **ids),
                              what=f"repair {finding.code} on {name!r}")
    return transport.run(inspect, what=f"check {name!r}", read_only=True)


def _vacuum(transport: SqlQueueTransport, address: QueueAddress) -> None:
    """VACUUM cannot run in a transaction: run it on an autocommit connection (PostgreSQL)."""
    dialect = transport.dialect
    with transport.connections.connection() as conn:
        conn.autocommit = True
        try:
            cur = conn.cursor()
            dialect.execute(cur, "vacuum_table", None, **dialect.identifiers(address))
            cur.close()
        finally:
            conn.autocommit = False
