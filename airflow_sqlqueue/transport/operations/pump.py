"""The handler loop: receive batches with bounded concurrency and handle them with the mode's strategy."""

from __future__ import annotations

import threading
import time
from typing import Any

from ..processing.modes import TransactionMode
from ..processing.receivers import ReceiverLoop
from ..processing.recoverability import Recoverability
from ..processing.sending import Outbox
from ..processing.strategies import Handler, HandlerContext, strategy_for
from ..processing.summaries import ProcessSummary
from ..tables.circuit_breaker import CircuitBreaker
from ..tables.queue import QueueBook, TableQueue
from ..tables.session import RetryPolicy, Session
from .wakeups import Wakeups

__all__ = ["HandlerContext", "MessagePump", "ProcessSummary"]

#: A pump that keeps running on an empty queue (``stop_when_empty=False``) waits for a wake-up (PostgreSQL with the
#: wake-up trigger: at once; SQLite: within about 20 ms, by watching the database's files) or polls: after this
#: many seconds, doubling while the queue stays empty up to ``IDLE_MAX_POLL_INTERVAL``.
IDLE_POLL_INTERVAL = 0.1
IDLE_MAX_POLL_INTERVAL = 1.0


class MessagePump:
    """Receives from one queue with ``concurrency`` threads and processes each message with ``handler``.

    :param transport: handed to handlers as ``context.transport``.
    """

    def __init__(self, session: Session, book: QueueBook, queue: TableQueue, handler: Handler,
                 mode: TransactionMode, *, batch_size: int = 100, concurrency: int = 1,
                 recoverability: Recoverability | None = None, breaker: CircuitBreaker | None = None,
                 transport: Any = None) -> None:
        self.session = session
        self.queue = queue
        self.recoverability = recoverability or Recoverability()
        self.strategy = strategy_for(mode, session, queue, Outbox(book), handler, self.recoverability, transport)
        retry = RetryPolicy(session.dialect, breaker=breaker or CircuitBreaker(queue.name))
        self.loop = ReceiverLoop(retry, batch_size=batch_size, concurrency=concurrency)
        self._lock = threading.Lock()

    def run(self, *, max_messages: int | None = None, max_duration: float | None = None,
            stop_when_empty: bool = True) -> ProcessSummary:
        """Process until ``max_messages`` rows are finished, ``max_duration`` passes, or the queue is empty.

        With ``stop_when_empty=False`` an empty queue does not end the run: the pump waits for the next message
        (woken at once on PostgreSQL with the wake-up trigger and on SQLite, by any process; else it polls, see
        ``IDLE_POLL_INTERVAL``) until ``max_messages`` or ``max_duration`` (overshot by at most
        ``IDLE_MAX_POLL_INTERVAL``)."""
        total = ProcessSummary()
        started = time.monotonic()

        def one_batch(n: int) -> tuple[int, int]:
            part = ProcessSummary()
            try:
                self.strategy.batch(n, part)
            finally:
                with self._lock:
                    total.add(part)
            return part.finished, part.deliveries

        wakeups = None
        try:
            if not stop_when_empty:
                wakeups = Wakeups(self.session, self.queue, IDLE_POLL_INTERVAL, IDLE_MAX_POLL_INTERVAL)
                wakeups.start()  # before the first receive: no send is missed in between
            self.loop.run(one_batch, max_messages=max_messages, max_duration=max_duration,
                          stop_when_empty=stop_when_empty,
                          idle=None if wakeups is None else lambda: wakeups.wait(found=False))
        except Exception as error:
            explained = self.session.explain(error, f"process {self.queue.name!r}")
            if explained is not error:
                raise explained from error
            raise
        finally:
            if wakeups is not None:
                wakeups.close()
            total.seconds = time.monotonic() - started
        return total
