"""Failure bookkeeping: immediate-retry counts per native Id and the NServiceBus failure headers."""

from __future__ import annotations

import threading
import traceback
import uuid
from collections import OrderedDict
from dataclasses import dataclass

from . import headers as h
from . import host


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

    def __len__(self) -> int:
        """How many messages have failures counted (read without the lock: a hint for fast paths)."""
        return len(self._items)

    def clear_many(self, message_ids: list[uuid.UUID]) -> None:
        """Forget messages (one lock for a batch)."""
        with self._lock:
            for message_id in message_ids:
                self._items.pop(message_id, None)

    def clear(self, message_id: uuid.UUID) -> None:
        """Forget a message (processed or moved to the error queue)."""
        with self._lock:
            self._items.pop(message_id, None)


#: Longest ``NServiceBus.ExceptionInfo.Message`` core writes (longer messages are cut).
MAX_EXCEPTION_MESSAGE = 16_384
#: Removed from a message moved to the error queue: retry bookkeeping and the delayed-delivery forward header.
REMOVED_ON_ERROR = (h.RETRIES, h.IMMEDIATE_RETRIES, h.FORWARD_DESTINATION)


def type_name(kind: type) -> str:
    """An exception's full type name (``module.Class``; builtins by their bare name)."""
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"


def exception_headers(exc: BaseException) -> dict[str, str]:
    """``NServiceBus.ExceptionInfo.*`` and ``TimeOfFailure`` as core 10 writes them for an exception."""
    kind = type(exc)
    out = {h.EXCEPTION_TYPE: type_name(kind)}
    inner = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    if inner is not None:
        out[h.INNER_EXCEPTION_TYPE] = type_name(type(inner))
    help_link = getattr(exc, "help_link", None)
    if isinstance(help_link, str):
        out[h.EXCEPTION_HELP_LINK] = help_link
    message = exception_text(exc)
    out[h.EXCEPTION_MESSAGE] = message[:MAX_EXCEPTION_MESSAGE]
    out[h.EXCEPTION_SOURCE] = kind.__module__
    try:
        out[h.EXCEPTION_STACK_TRACE] = "".join(traceback.format_exception(kind, exc, exc.__traceback__))
    except Exception:  # noqa: BLE001 - a broken exception class still moves its message
        out[h.EXCEPTION_STACK_TRACE] = message
    out[h.TIME_OF_FAILURE] = h.format_wire_time()
    data = getattr(exc, "data", None)
    if isinstance(data, dict):
        for key, value in data.items():
            if value is not None:
                out[f"{h.EXCEPTION_DATA_PREFIX}{key}"] = exception_text(value)
    return out


def failure_headers(source_queue: str, exc: BaseException, *, endpoint: str | None = None) -> dict[str, str]:
    """The headers core adds to a failed message so ServiceControl imports it and ServicePulse shows it:
    ``FailedQ`` (``source_queue``, its canonical wire address), the processing endpoint (``endpoint``, default the
    queue's name) and machine, the host id and display name, and the exception info."""
    return {
        h.FAILED_Q: source_queue,
        h.PROCESSING_ENDPOINT: endpoint or source_queue,
        h.PROCESSING_MACHINE: host.machine_name(),
        h.HOST_ID: host.host_id(),
        h.HOST_DISPLAY_NAME: host.host_display_name(),
        **exception_headers(exc),
    }


def error_row_headers(headers: dict[str, str | None], native_id: str, source_queue: str, exc: BaseException, *,
                      endpoint: str | None = None) -> dict[str, str | None]:
    """The headers of a message's copy in the error queue: its own headers without the retry bookkeeping and
    forward header, ``NServiceBus.MessageId`` set to the native Id when missing (ServiceControl reads it
    unconditionally), and the failure headers."""
    merged = {k: v for k, v in headers.items() if k not in REMOVED_ON_ERROR}
    if not merged.get(h.MESSAGE_ID):
        merged[h.MESSAGE_ID] = native_id
    merged.update(failure_headers(source_queue, exc, endpoint=endpoint))
    return merged


def exception_text(exc: BaseException) -> str:
    """``str(exc)``, or a stand-in when the exception's own ``__str__`` fails (never raises)."""
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - a handler's exception class may be broken; its message must still move
        return f"<{type(exc).__name__}: str() of the exception failed>"


class PoisonMessageError(Exception):
    """Stands in as the failure of a row whose headers could not be parsed."""


def restored_headers(raw: str | None) -> str:
    """Headers a retry sends back, as ServiceControl's retry writes them: every header starting with
    ``NServiceBus.Retries``, ``NServiceBus.FailedQ``, ``NServiceBus.TimeOfFailure``, ``NServiceBus.ExceptionInfo.``
    or ``ServiceControl.EditOf`` removed. A poison row gets its original text back."""
    parsed = h.parse_headers(raw)
    if h.RAW_HEADERS in parsed:
        return parsed[h.RAW_HEADERS] or ""
    kept = {k: v for k, v in parsed.items() if not k.startswith(h.RETRY_REMOVED_PREFIXES)}
    return h.serialize_headers(kept, limit=None)
