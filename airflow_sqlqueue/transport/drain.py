"""Draining: receive batches with bounded concurrency and hand each to a sink before its commit."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from .address import QueueAddress
from .circuit_breaker import CircuitBreaker
from .messages import ReceivedMessage
from .receivers import ReceiverLoop

if TYPE_CHECKING:
    from .transport import SqlQueueTransport

#: Stores a batch durably (file, XCom, table...) and returns how many of its messages count as delivered.
Sink = Callable[[list[ReceivedMessage]], int]


@dataclass
class DrainSummary:
    """Counts of one drain: ``delivered`` to the sink, rows ``taken``, and those dropped or moved."""

    delivered: int = 0
    taken: int = 0
    batches: int = 0
    expired: int = 0
    poison: int = 0
    forwarded: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return asdict(self)


def drain(transport: SqlQueueTransport, address: QueueAddress, sink: Sink, *, max_messages: int | None,
          max_duration: float | None, batch_size: int, concurrency: int,
          breaker: CircuitBreaker | None = None) -> DrainSummary:
    """Receive until ``max_messages`` are delivered, ``max_duration`` passes, or the queue is empty.

    Each batch is one transaction: ``sink`` runs inside it and the delete commits only when the sink returned,
    so a crash at any point loses nothing (a batch stored but not committed is received again: duplicates
    carry the same Id).
    """
    summary = DrainSummary()
    lock = threading.Lock()
    started = time.monotonic()
    loop = ReceiverLoop(transport.dialect, breaker or CircuitBreaker(transport.dialect.format_address(address)),
                        batch_size=batch_size, concurrency=concurrency)

    def one_batch(n: int) -> tuple[int, int]:
        with transport.receiving(address, n) as batch:
            delivered = sink(batch.messages) if batch.messages else 0
        stats = batch.stats
        taken = len(batch.messages) + stats.expired + stats.poison + stats.forwarded
        with lock:
            summary.delivered += delivered
            summary.taken += taken
            summary.batches += 1
            summary.expired += stats.expired
            summary.poison += stats.poison
            summary.forwarded += stats.forwarded
        return delivered, taken

    try:
        loop.run(one_batch, max_messages=max_messages, max_duration=max_duration)
    finally:
        summary.seconds = time.monotonic() - started
    return summary
