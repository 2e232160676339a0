"""The receive loop shared by handler processing and draining: bounded concurrency, a budget, retries."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ..common.redaction import first_line
from ..common.validation import check_count, check_seconds
from ..tables.session import RetryPolicy

log = logging.getLogger(__name__)

#: One receive transaction of up to n rows; returns (rows that count against the budget, rows taken).
BatchFunction = Callable[[int], tuple[int, int]]
#: Longest wait of a receiver that found the queue empty while other batches are in flight (they may put rows
#: back); it wakes as soon as none is.
IDLE_PAUSE = 0.05


class ReceiverLoop:
    """Runs ``one_batch`` from ``concurrency`` threads until ``max_messages`` count, ``max_duration`` passes,
    or a batch finds the queue empty.

    Every failure goes to the retry policy: deadlocks are retried (a few in a row at most), a lost connection
    after the circuit breaker's delay until the breaker triggers; anything else stops every receiver and is
    raised.
    """

    def __init__(self, retry: RetryPolicy, *, batch_size: int, concurrency: int) -> None:
        check_count(batch_size, "batch_size")
        check_count(concurrency, "concurrency")
        self.retry = retry
        self.batch_size = batch_size
        self.concurrency = concurrency

    def run(self, one_batch: BatchFunction, *, max_messages: int | None = None, max_duration: float | None = None,
            stop_when_empty: bool = True, idle: Callable[[], object] | None = None) -> int:
        """Receive until done; return the rows that counted against the budget.

        ``idle`` (with ``stop_when_empty=False``): blocks until the queue may hold messages again (a wake-up or a
        poll). One receiver that found the queue empty calls it; the others that find it empty meanwhile wait for
        its return, so an idle pump holds one waiter, not ``concurrency``.
        """
        check_count(max_messages, "max_messages", minimum=0, allow_none=True)
        check_seconds(max_duration, "max_duration", allow_none=True)
        lock = threading.Lock()
        settled = threading.Condition(lock)  # notified when no batch is in flight
        deadline = None if max_duration is None else time.monotonic() + max_duration
        state = {"counted": 0, "reserved": 0, "stop": False, "idle": False, "woken": 0}
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
            failures = 0
            try:
                while (n := reserve()) > 0:
                    counted = taken = 0
                    try:
                        counted, taken = one_batch(n)
                        failures = 0
                        self.retry.succeeded()
                    except Exception as exc:
                        failures += 1
                        pause = self.retry.delay(exc, failures)  # raises once the circuit breaker triggers
                        if pause is None:
                            raise
                        log.warning("receive failed (%s); retrying in %.2f s", first_line(exc), pause)
                        time.sleep(pause)
                        taken = -1
                    finally:
                        with lock:
                            state["reserved"] -= n
                            state["counted"] += counted
                            if state["reserved"] == 0:
                                settled.notify_all()
                    if taken == 0 and not stop_when_empty and idle is not None:
                        with lock:
                            if state["idle"]:  # another receiver waits for the wake-up: wait for its return
                                woken = state["woken"]
                                settled.wait_for(lambda: state["woken"] != woken or state["stop"])  # noqa: B023
                                continue
                            state["idle"] = True
                        try:
                            idle()
                        finally:
                            with lock:
                                state["idle"] = False
                                state["woken"] += 1
                                settled.notify_all()
                    if taken == 0 and stop_when_empty:
                        with lock:
                            # empty for us; but a batch in flight may still put rows back (retries): wait until
                            # none is, then receive once more. Only an empty receive with nothing in flight
                            # stops the loop, so idle receivers never wake each other into a loop of empty
                            # receives (they wake once, when the last batch in flight ends).
                            if state["reserved"] == 0:
                                state["stop"] = True
                                settled.notify_all()
                                return
                            settled.wait_for(lambda: state["reserved"] == 0 or state["stop"], IDLE_PAUSE)
            except BaseException as exc:  # surfaced to the caller after the other receivers stop
                with lock:
                    state["stop"] = True
                    settled.notify_all()
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
