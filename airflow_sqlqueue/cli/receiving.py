"""``sqlqueue receive``: take messages from a queue and print them.

Held modes (receive-only, sends-atomic-with-receive): a batch of rows is claimed, each message is printed and
flushed and acked; only the rows printed (and those dropped as expired or moved as poison) leave the queue when
the claim commits. If stdout is closed early (``| head -1``), the messages not printed stay in the queue.
Mode none: a batch is taken and committed first, then printed (at-most-once: what is not printed is lost).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from airflow_sqlqueue.transport import ReceivedMessage, ReceiveStats, SqlQueueTransport

Render = Callable[[ReceivedMessage], str]
Write = Callable[[str], None]


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


def receive_and_print(transport: SqlQueueTransport, queue: str, max_messages: int, render: Render, write: Write,
                      count: ReceiveCount, *, held: bool, batch_size: int = 500) -> None:
    """Print up to ``max_messages``, FIFO: ``render`` makes a message's line, ``write`` prints it completely (or
    raises OSError when stdout is gone); tally ``count``.

    A failure while printing ends the run after the batch is settled (what was printed leaves the queue, nothing
    printed is handed over again) and is raised again; ``count.lost`` then tells how many taken messages were not
    printed (always 0 in the held modes). In mode none every line is rendered before the take commits: a message
    that cannot be shown is never deleted.
    """
    one_batch = _held_batch if held else _at_most_once_batch
    while count.printed < max_messages:
        if one_batch(transport, queue, min(batch_size, max_messages - count.printed), render, write, count) == 0:
            break


def _held_batch(transport: SqlQueueTransport, queue: str, n: int, render: Render, write: Write,
                count: ReceiveCount) -> int:
    """Claim up to ``n`` rows, print them, ack those printed; return rows claimed."""
    failed: Exception | None = None
    with transport.claim(queue, n) as claim:
        for message in claim.messages:
            try:
                write(render(message))
            except Exception as exc:  # noqa: BLE001 - stdout gone or anything else: keep what was printed, stop
                failed = exc
                break
            claim.ack(message)
            count.printed += 1
    count.add(claim.stats)
    if failed is not None:
        raise failed
    return claim.locked


def _at_most_once_batch(transport: SqlQueueTransport, queue: str, n: int, render: Render, write: Write,
                        count: ReceiveCount) -> int:
    """Take up to ``n`` rows and render them, commit, then print them; return rows taken."""
    with transport.claim(queue, n, take=True) as claim:
        lines = [render(message) for message in claim.messages]  # raises before the commit: nothing deleted
    count.add(claim.stats)
    for index, line in enumerate(lines):
        try:
            write(line)
        except OSError:
            count.lost = len(lines) - index
            raise
        count.printed += 1
    return claim.locked
