"""The inbox: handle each message once per consumer, recorded in the consumer's own transaction.

A deduplication table in the queue's database (``SqlQueueInbox`` by default) holds one row per (consumer,
message Id) that a consumer finished. A consumer marks a message in the same transaction as its own writes
(``mark`` returns False when a committed transaction already did): the work and the mark commit together or not
at all, as NServiceBus's outbox records the messages an endpoint handled. A message delivered twice (a
triggerer that died after Airflow stored its event, a re-run) is skipped the second time; a transaction that
fails records nothing, so the message is handled by the next attempt (at-least-once kept).

Rows are kept for a retention period (``purge``): a duplicate that arrives after its row was purged is handled
again, so keep the retention longer than any redelivery can take (days, not minutes).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..common.errors import QueueNotFoundError
from ..common.validation import check_count, check_stored_text
from ..tables.session import Session
from ..wire.address import QueueAddress

log = logging.getLogger(__name__)

#: Name of the inbox table unless the transport is given another.
DEFAULT_INBOX_TABLE = "SqlQueueInbox"
#: Width of the consumer and message Id columns.
MAX_KEY = 200
#: Rows deleted per transaction by the retention purge.
DEFAULT_PURGE_BATCH = 10_000


def check_key(value: Any, what: str) -> str:
    """A consumer name or message Id the inbox can store: non-empty text of at most 200 characters."""
    return check_stored_text(value, f"inbox {what}", MAX_KEY, "the inbox")


class Inbox:
    """The inbox table of one database.

    :param session: the transport's session.
    :param table: the inbox table's address (a schema may be given as for a queue).
    """

    def __init__(self, session: Session, table: QueueAddress) -> None:
        self.session = session
        self.dialect = session.dialect
        self.table = table
        self.name = self.dialect.format_address(table)
        self.ids = self.dialect.identifiers(table)

    # -- the table ------------------------------------------------------------------------------------------
    def exists(self) -> bool:
        return self.session.run(lambda cur: self.dialect.table_exists(cur, self.table), what="inbox table",
                                read_only=True)

    def create(self) -> bool:
        """Create the inbox table and its retention index unless the table exists; True when this call created it.
        A concurrent creator is tolerated (its duplicate-object error counts as created)."""
        if self.exists():
            return False

        def work(cur: Any) -> None:
            self.dialect.execute(cur, "create_inbox_table", None, **self.ids)
            self.dialect.execute(cur, "create_inbox_index", None, **self.ids)

        try:
            self.session.run(work, what=f"create inbox table {self.name!r}")
        except Exception:
            if self.exists():
                log.debug("%s was created by a concurrent creator", self.name)
                return False
            raise
        log.info("created the inbox table %s", self.name)
        return True

    def ddl(self) -> str:
        """The statements that create the inbox table, for a DBA to review."""
        return ";\n".join(self.dialect.render(n, **self.ids) for n in ("create_inbox_table", "create_inbox_index"))

    # -- in the consumer's transaction ----------------------------------------------------------------------
    def mark(self, cursor: Any, consumer: str, message_id: str) -> bool:
        """Record ``message_id`` as handled by ``consumer`` on ``cursor`` (the consumer's open transaction).

        True: this transaction owns the message now (do the work; it counts once the transaction commits).
        False: a committed transaction already handled it (skip it). On PostgreSQL and SQL Server a concurrent
        transaction marking the same message makes this call wait for that transaction's outcome.
        """
        params = {"consumer": check_key(consumer, "consumer"), "message_id": check_key(str(message_id), "message Id")}
        try:
            count = self.dialect.execute(cursor, "inbox_mark", params, **self.ids).rowcount
        except Exception as exc:
            if self.dialect.is_missing_table(exc):
                raise QueueNotFoundError(
                    f"the inbox table {self.name!r} does not exist; create it with SqlQueueTransport.create_inbox() "
                    "(or have a DBA run the statements of transport.inbox.ddl())") from exc
            raise
        return bool(count and count > 0)

    def handled(self, consumer: str, message_id: str) -> bool:
        """Whether ``consumer`` finished ``message_id`` (a committed mark)."""
        params = {"consumer": check_key(consumer, "consumer"), "message_id": check_key(str(message_id), "message Id")}
        return bool(self.session.run(
            lambda cur: self.dialect.execute(cur, "inbox_handled", params, **self.ids).fetchone()[0],
            what=f"read inbox {self.name!r}", read_only=True))

    # -- retention ------------------------------------------------------------------------------------------
    def purge(self, older_than_seconds: float, batch_size: int = DEFAULT_PURGE_BATCH,
              progress: Callable[[int], None] | None = None) -> int:
        """Delete the rows older than ``older_than_seconds`` (database clock), in batches; return how many went.
        A missing inbox table purges nothing."""
        check_count(batch_size, "batch_size")
        if isinstance(older_than_seconds, bool) or not isinstance(older_than_seconds, int | float) \
                or older_than_seconds < 0:
            raise ValueError(f"older_than must be a duration of 0 or more, got {older_than_seconds!r}")
        if not self.exists():
            return 0
        params = {"older_than_s": int(older_than_seconds), "batch_size": batch_size}
        total = 0
        while True:
            deleted = self.session.run(
                lambda cur: max(self.dialect.execute(cur, "purge_inbox", params, **self.ids).rowcount, 0),
                what=f"purge inbox {self.name!r}")
            total += deleted
            if progress is not None and deleted:
                progress(deleted)
            if deleted < batch_size:
                log.info("purged %d inbox rows older than %d s from %s", total, int(older_than_seconds), self.name)
                return total
