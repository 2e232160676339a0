"""Circuit breaker for repeated receive failures (connection loss, database down)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ..common.errors import CircuitBreakerOpenError
from ..common.redaction import first_line

log = logging.getLogger(__name__)


class CircuitBreaker:
    """Arms on the first failure; after ``timeout`` seconds of failures with no success it triggers.

    While armed the caller backs off ``armed_delay`` seconds per failure, once triggered ``triggered_delay``.
    ``on_critical`` is called once when it triggers (default: raise CircuitBreakerOpenError). Safe to share
    between receiver threads: the state changes under a lock, so it triggers exactly once.
    """

    def __init__(self, name: str, timeout: float = 30.0, armed_delay: float = 1.0, triggered_delay: float = 10.0,
                 on_critical: Callable[[BaseException], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.timeout = timeout
        self.armed_delay = armed_delay
        self.triggered_delay = triggered_delay
        self._on_critical = on_critical
        self._clock = clock
        self._armed_at: float | None = None
        self.failures = 0
        self.triggered = False
        self._state_lock = threading.Lock()

    def success(self) -> None:
        """A receive worked: disarm."""
        if self._armed_at is None:
            return  # the common case, once per batch: nothing to change
        with self._state_lock:
            if self._armed_at is not None:
                log.info("circuit breaker %s disarmed after %d failures", self.name, self.failures)
            self._armed_at = None
            self.failures = 0
            self.triggered = False

    def failure(self, exc: BaseException) -> float:
        """Record a failure; return the delay to wait before the next attempt."""
        with self._state_lock:
            now = self._clock()
            self.failures += 1
            if self._armed_at is None:
                self._armed_at = now
                log.warning("circuit breaker %s armed: %s", self.name, first_line(exc))
            elapsed = now - self._armed_at
            trigger = not self.triggered and elapsed >= self.timeout
            if trigger:
                self.triggered = True
                log.error("circuit breaker %s triggered after %.0f s of failures: %s", self.name, elapsed,
                          first_line(exc))
            delay = self.triggered_delay if self.triggered else self.armed_delay
        if trigger:  # outside the lock: on_critical may take its time or raise
            if self._on_critical is None:
                raise CircuitBreakerOpenError(
                    f"receiving from {self.name} failed for {elapsed:.0f} s "
                    f"({self.failures} attempts); last error: {first_line(exc)}") from exc
            self._on_critical(exc)
        return delay
