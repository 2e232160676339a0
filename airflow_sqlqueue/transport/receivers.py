"""The receive loop shared by handler processing and draining: bounded concurrency, budget, retries."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from .circuit_breaker import CircuitBreaker
from .connect import DatabaseConnectionError
from .dialects import Dialect
from .validation import check_count, check_seconds

log = logging.getLogger(__name__)
DEADLOCK_RETRIES = 5

#: One receive transaction of up to n rows; returns (rows that count against the budget, rows taken).
BatchFunction = Callable[[int], tuple[int, int]]


class ReceiverLoop:
    """Runs ``one_batch`` from ``concurrency`` threads until ``max_messages`` count, ``max_duration`` passes,
    or a batch finds the queue empty.

    A deadlock rolls the batch back and is retried (``DEADLOCK_RETRIES`` in a row at most); a lost connection
    is retried after the circuit breaker's delay, and raises once the breaker triggers. Any other error stops
    every receiver and is raised.
    """

    def __init__(self, dialect: Dialect, breaker: CircuitBreaker, *, batch_size: int, concurrency: int) -> None:
        check_count(batch_size, "batch_size")
        check_count(concurrency, "concurrency")
        self.dialect = dialect
        self.breaker = breaker
        self.batch_size = batch_size
        self.concurrency = concurrency

    def run(self, one_batch: BatchFunction, *, max_messages: int | None = None, max_duration: float | None = None,
            stop_when_empty: bool = True) -> int:
        """Receive until done; return the rows that counted against the budget."""
        check_count(max_messages, "max_messages", minimum=0, allow_none=True)
        check_seconds(max_duration, "max_duration", allow_none=True)
        lock = threading.Lock()
        deadline = None if max_duration is None else time.monotonic() + max_duration
        state = {"counted": 0, "reserved": 0, "stop": False}
        errors: list[BaseException] = []

        def reserve() -> int:
            with lock:
                if state["stop"] or (deadline is not None and time.monotonic() >= deadline):
                    return 0
                n = self.batch_size if max_messages is None else max(
                    0, min(self.batch_size, max_messages - state["counted"] - state["reserved"]))
                state["reserved"] += n
                return n

        def worker() -> None:
            deadlocks = 0
            try:
                while (n := reserve()) > 0:
                    counted = taken = 0
                    try:
                        counted, taken = one_batch(n)
                        self.breaker.success()
                        deadlocks = 0
                    except Exception as exc:
                        if self.dialect.is_deadlock(exc):
                            deadlocks += 1
                            if deadlocks > DEADLOCK_RETRIES:
                                raise
                            log.warning("deadlock while receiving (%s); retrying", exc)
                            taken = -1
                        elif self.dialect.is_connection_lost(exc) or isinstance(exc, DatabaseConnectionError):
                            taken = -1
                            time.sleep(self.breaker.failure(exc))
                        else:
                            raise
                    finally:
                        with lock:
                            state["reserved"] -= n
                            state["counted"] += counted
                    if taken == 0 and stop_when_empty:
                        with lock:
                            # empty for us; but a batch in flight may still put rows back (retries)
                            idle = state["reserved"] == 0
                            if idle:
                                state["stop"] = True
                        if idle:
                            return
                        time.sleep(0.05)
            except BaseException as exc:  # surfaced to the caller after the other receivers stop
                with lock:
                    state["stop"] = True
                errors.append(exc)

        if self.concurrency == 1:
            worker()
        else:
            threads = [threading.Thread(target=worker, name=f"sqlqueue-receiver-{i}", daemon=True)
                       for i in range(self.concurrency)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        if errors:
            raise errors[0]
        return state["counted"]
