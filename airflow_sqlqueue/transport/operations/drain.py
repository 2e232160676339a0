"""Draining: take batches with bounded concurrency and hand each to a sink before its commit."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ..processing.claim import Claim, ReceivePositions
from ..processing.receivers import ReceiverLoop
from ..processing.summaries import DrainSummary
from ..tables.circuit_breaker import CircuitBreaker
from ..tables.queue import SeqRange, TableQueue
from ..tables.session import RetryPolicy, Session
from ..wire.messages import ReceivedColumns, ReceivedMessage

__all__ = ["ColumnSink", "DrainSummary", "Sink", "drain"]

#: Stores a batch durably (file, XCom, table...) and returns how many of its messages count as delivered.
Sink = Callable[[list[ReceivedMessage]], int]
#: The same for a batch read as columns (``columns=True``: the Parquet drain).
ColumnSink = Callable[[ReceivedColumns], int]


def drain(session: Session, queue: TableQueue, sink: Sink | ColumnSink, *, max_messages: int | None,
          max_duration: float | None, batch_size: int, concurrency: int,
          breaker: CircuitBreaker | None = None, within: SeqRange | None = None,
          columns: bool = False) -> DrainSummary:
    """Receive until ``max_messages`` are delivered, ``max_duration`` passes, or the queue is empty.

    Each batch is one claim: ``sink`` runs while it is open and the rows leave the queue only when the sink
    returned, so a crash at any point loses nothing (a batch stored but not committed is received again:
    duplicates carry the same Id). ``within`` restricts every claim to a range of positions (one partition of a
    partitioned drain: see ``partitions``). ``columns``: ``sink`` gets each batch as one ``ReceivedColumns``
    (no object per message; the same rows sorted out the same way) instead of a list of messages.
    """
    summary = DrainSummary()
    lock = threading.Lock()
    started = time.monotonic()
    retry = RetryPolicy(session.dialect, breaker=breaker or CircuitBreaker(queue.name))
    loop = ReceiverLoop(retry, batch_size=batch_size, concurrency=concurrency)
    positions = ReceivePositions(session.dialect)  # each receiver starts past its last batch (PostgreSQL)

    def one_batch(n: int) -> tuple[int, int]:
        with Claim(session, queue, take=True, within=within, position=positions.mine(),
                   columns=columns).open(n) as claim:
            batch = claim.batch if columns else claim.messages
            delivered = sink(batch) if batch else 0  # type: ignore[arg-type]  # the sink columns= asks for
        with lock:
            summary.delivered += delivered
            summary.taken += claim.locked
            summary.batches += 1
            summary.add_stats(claim.stats)
        return delivered, claim.locked

    try:
        loop.run(one_batch, max_messages=max_messages, max_duration=max_duration)
    finally:
        summary.seconds = time.monotonic() - started
    return summary
