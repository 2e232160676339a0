"""What happens to a message whose handler failed: retry at once, retry later (delayed retries), or error queue.

As NServiceBus recoverability: immediate retries are counted in memory per native Id; once they are used up, a
delayed retry sends the message to its queue's ``.Delayed`` table with ``NServiceBus.Retries`` (and its
timestamp) raised by one, due after ``delay * retries so far``; after the last delayed retry it goes to the
error queue. Delayed retries are off by default (they need the queue's delayed table).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from ..common.validation import check_count, check_seconds
from ..wire import headers as h
from ..wire.failures import FailureInfoStorage
from ..wire.messages import ReceivedMessage

#: Header NServiceBus keeps the count of delayed retries in, and when the last one was made (wire format), as
#: core's delayed retry writes them.
RETRIES = h.RETRIES
RETRIES_TIMESTAMP = h.RETRIES_TIMESTAMP


class Action(enum.Enum):
    """What to do with a failed message."""

    RETRY = "retry"  # leave it in the queue: it is received again at once
    DELAY = "delay"  # send it to the delayed table, due later
    ERROR = "error"  # move it to the error queue


@dataclass(frozen=True)
class Decision:
    """An action, and for DELAY the headers to send the message with and its delay in seconds."""

    action: Action
    attempts: int
    headers: dict[str, str | None] | None = None
    delay: float = 0.0


class Recoverability:
    """Decides per failure; keeps the immediate-failure counts.

    :param immediate_retries: handler retries at once, per message (0: none).
    :param delayed_retries: retries later, each after ``delayed_retry_delay * n`` seconds (0: none).
    :param delayed_retry_delay: seconds added per delayed retry (NServiceBus' ``TimeIncrease``, default 10).
    """

    def __init__(self, immediate_retries: int = 5, delayed_retries: int = 0, delayed_retry_delay: float = 10.0,
                 failures: FailureInfoStorage | None = None) -> None:
        check_count(immediate_retries, "immediate_retries", minimum=0)
        check_count(delayed_retries, "delayed_retries", minimum=0)
        check_seconds(delayed_retry_delay, "delayed_retry_delay")
        self.immediate_retries = immediate_retries
        self.delayed_retries = delayed_retries
        self.delayed_retry_delay = float(delayed_retry_delay)
        self.failures = failures if failures is not None else FailureInfoStorage()

    def exhausted(self, message: ReceivedMessage) -> BaseException | None:
        """The last failure of a message whose immediate retries ran out in an earlier batch, else None."""
        info = self.failures.get(message.native_id)
        if info is not None and info.attempts > self.immediate_retries:
            return info.exception
        return None

    def failed(self, message: ReceivedMessage, exc: BaseException) -> Decision:
        """Count a failure of ``message`` and decide what to do."""
        attempts = self.failures.record(message.native_id, exc)
        if attempts <= self.immediate_retries:
            return Decision(Action.RETRY, attempts)
        return self.after_immediate(message, attempts)

    def after_immediate(self, message: ReceivedMessage, attempts: int) -> Decision:
        """Immediate retries are used up: a delayed retry if one is left, else the error queue."""
        done = _count(message.headers.get(RETRIES))
        if done < self.delayed_retries:
            headers = {**message.headers, RETRIES: str(done + 1), RETRIES_TIMESTAMP: h.format_wire_time()}
            return Decision(Action.DELAY, attempts, headers, self.delayed_retry_delay * (done + 1))
        return Decision(Action.ERROR, attempts)

    def forget(self, message: ReceivedMessage) -> None:
        """The message left the queue (handled, delayed or moved): drop its count."""
        self.failures.clear(message.native_id)

    def forget_many(self, messages: list[ReceivedMessage]) -> None:
        """Messages left the queue: drop their counts (nothing to do when none failed)."""
        if self.failures:
            self.failures.clear_many([m.native_id for m in messages])

    def forget_id(self, native_id: Any) -> None:
        self.failures.clear(native_id)


def _count(value: str | None) -> int:
    try:
        return max(0, int(value or 0))
    except ValueError:
        return 0
