"""Failure bookkeeping: immediate-retry counts per native Id and the NServiceBus failure headers."""

from __future__ import annotations

import threading
import traceback
import uuid
from collections import OrderedDict
from dataclasses import dataclass

from . import headers as h


@dataclass
class FailureInfo:
    """How often a message failed and the last exception."""

    attempts: int
    exception: BaseException


class FailureInfoStorage:
    """In-memory failure counts per native message Id (bounded, thread-safe), as upstream keeps them."""

    def __init__(self, max_entries: int = 10_000) -> None:
        self._items: OrderedDict[uuid.UUID, FailureInfo] = OrderedDict()
        self._lock = threading.Lock()
        self._max = max_entries

    def record(self, message_id: uuid.UUID, exc: BaseException) -> int:
        """Count one failed attempt; return the attempts so far."""
        with self._lock:
            info = self._items.pop(message_id, None)
            info = FailureInfo((info.attempts if info else 0) + 1, exc)
            self._items[message_id] = info
            while len(self._items) > self._max:
                self._items.popitem(last=False)
            return info.attempts

    def get(self, message_id: uuid.UUID) -> FailureInfo | None:
        """The failures recorded for a message, if any."""
        with self._lock:
            return self._items.get(message_id)

    def clear(self, message_id: uuid.UUID) -> None:
        """Forget a message (processed or moved to the error queue)."""
        with self._lock:
            self._items.pop(message_id, None)


def failure_headers(source_queue: str, exc: BaseException) -> dict[str, str]:
    """The headers NServiceBus adds to a failed message, so ServicePulse/ServiceControl can show it.

    Never raises: an exception whose ``str()`` fails (a handler's own exception class) still moves its message.
    """
    kind = type(exc)
    module = str(getattr(kind, "__module__", "builtins"))
    name = str(getattr(kind, "__qualname__", kind.__name__))
    message = exception_text(exc)
    try:
        stack = "".join(traceback.format_exception(kind, exc, exc.__traceback__))
    except Exception:  # noqa: BLE001
        stack = message
    return {
        h.FAILED_Q: source_queue,
        h.TIME_OF_FAILURE: h.format_wire_time(),
        h.EXCEPTION_TYPE: name if module == "builtins" else f"{module}.{name}",
        h.EXCEPTION_MESSAGE: message,
        h.EXCEPTION_SOURCE: module,
        h.EXCEPTION_STACK_TRACE: stack,
    }


def exception_text(exc: BaseException) -> str:
    """``str(exc)``, or a stand-in when the exception's own ``__str__`` fails (never raises)."""
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - a handler's exception class may be broken; its message must still move
        return f"<{type(exc).__name__}: str() of the exception failed>"


class PoisonMessageError(Exception):
    """Stands in as the failure of a row whose headers could not be parsed."""
