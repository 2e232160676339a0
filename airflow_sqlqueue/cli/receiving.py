"""``sqlqueue receive``: take messages from a queue and print them.

Held modes (receive-only, sends-atomic-with-receive): a batch of rows is locked, each message is printed and
flushed, and only the rows printed (and those dropped as expired or moved as poison) are deleted when the
batch commits. If stdout is closed early (``| head -1``), the messages not printed stay in the queue.
Mode none: a batch is deleted and committed first, then printed (at-most-once: what is not printed is lost).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from airflow_sqlqueue.transport import QueueAddress, ReceivedMessage, ReceiveStats, SqlQueueTransport

Show = Callable[[ReceivedMessage], None]


@dataclass
class ReceiveCount:
    """What one ``receive`` did: messages printed, rows dropped or moved, and (mode none) messages lost."""

    printed: int = 0
    expired: int = 0
    poison: int = 0
    forwarded: int = 0
    lost: int = 0

    def add(self, stats: ReceiveStats) -> None:
        self.expired += stats.expired
        self.poison += stats.poison
        self.forwarded += stats.forwarded


def receive_and_print(transport: SqlQueueTransport, queue: str, max_messages: int, show: Show,
                      count: ReceiveCount, *, held: bool, batch_size: int = 500) -> None:
    """Print up to ``max_messages`` with ``show`` (which raises OSError when stdout is gone), FIFO; tally ``count``.

    An OSError from ``show`` ends the run after the batch is settled and is raised again; ``count.lost`` then
    tells how many taken messages were not printed (always 0 in the held modes).
    """
    address = transport.address(queue)
    one_batch = _held_batch if held else _at_most_once_batch
    while count.printed < max_messages:
        if one_batch(transport, address, min(batch_size, max_messages - count.printed), show, count) == 0:
            break


def _held_batch(transport: SqlQueueTransport, address: QueueAddress, n: int, show: Show,
                count: ReceiveCount) -> int:
    """Lock up to ``n`` rows, print them, delete those printed in the same transaction; return rows locked."""
    stats = ReceiveStats()
    closed: OSError | None = None
    try:
        with transport.connections.connection() as conn, transport.dialect.transaction(conn) as cur:
            rows = transport.take(cur, address, n, lock_only=True)
            done: list[int] = []
            for row in rows:
                message = transport.classify(cur, address, row, stats)  # None: expired, poison or forwarded
                if message is not None:
                    try:
                        show(message)
                    except OSError as exc:
                        closed = exc
                        break
                    count.printed += 1
                done.append(row.seq)
            if done:
                transport.dialect.delete_seqs(cur, address, done)
    except Exception as exc:
        explained = transport.explain(exc, f"receive from {transport.name(address)!r}")
        if explained is exc:
            raise
        raise explained from exc
    count.add(stats)
    if closed is not None:
        raise closed
    return len(rows)


def _at_most_once_batch(transport: SqlQueueTransport, address: QueueAddress, n: int, show: Show,
                        count: ReceiveCount) -> int:
    """Delete and commit up to ``n`` rows, then print them; return rows taken."""
    with transport.receiving(address, n) as batch:
        pass
    count.add(batch.stats)
    for index, message in enumerate(batch.messages):
        try:
            show(message)
        except OSError:
            count.lost = len(batch.messages) - index
            raise
        count.printed += 1
    stats = batch.stats
    return len(batch.messages) + stats.expired + stats.poison + stats.forwarded
