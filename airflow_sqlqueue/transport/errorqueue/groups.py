"""Why messages failed, counted: the failure a stored row records, groups of failures, and selections by them."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..common.errors import InvalidAddressError
from ..dialects import Dialect
from ..wire import headers as h
from ..wire.headers import PoisonHeadersError, parse_headers
from ..wire.messages import ReceivedMessage


@dataclass(frozen=True)
class Failure:
    """Why a row is in the error queue: the queue it failed in, the exception type, and its parsed headers.

    Rows whose headers are not JSON group as ``(headers not JSON)``, poison rows without a FailedQ as
    ``(poison)``, other rows without one as ``(no FailedQ)``; a missing exception type is ``-``.
    """

    failed_q: str
    exception_type: str
    headers: dict[str, str | None]


def failure_of(raw_headers: str | None) -> Failure:
    """The failure a stored error-queue row records (never raises: bad headers are a group of their own; the
    group names are printable even when the headers hold lone surrogates)."""
    try:
        parsed = parse_headers(raw_headers)
    except PoisonHeadersError:
        return Failure("(headers not JSON)", "-", {})
    missing = "(poison)" if h.RAW_HEADERS in parsed else "(no FailedQ)"
    return Failure(h.printable(parsed.get(h.FAILED_Q) or missing), h.printable(parsed.get(h.EXCEPTION_TYPE) or "-"),
                   parsed)


class FailureGroups:
    """Failed messages grouped by ``NServiceBus.FailedQ`` and exception type: count, first and last failure."""

    def __init__(self) -> None:
        self._groups: dict[tuple[str, str], dict[str, Any]] = {}

    def add(self, failure: Failure) -> dict[str, Any]:
        """Count one failed message; return its group (a dict the caller may add fields to)."""
        group = self._groups.setdefault((failure.failed_q, failure.exception_type), {
            "failed_q": failure.failed_q, "exception_type": failure.exception_type, "count": 0,
            "first_failure": None, "last_failure": None})
        group["count"] += 1
        when = failure.headers.get(h.TIME_OF_FAILURE)
        if when:
            group["first_failure"] = min(filter(None, [group["first_failure"], when]))
            group["last_failure"] = max(filter(None, [group["last_failure"], when]))
        return group

    def ordered(self) -> list[dict[str, Any]]:
        """The groups, largest first."""
        return sorted(self._groups.values(), key=lambda g: (-g["count"], g["failed_q"], g["exception_type"]))

    @property
    def total(self) -> int:
        return sum(g["count"] for g in self._groups.values())


Selector = Callable[[ReceivedMessage], bool]


def failure_selector(dialect: Dialect, *, failed_q: str | None = None, exception_type: str | None = None,
                     message_ids: Iterable[str] | None = None) -> Selector | None:
    """A ``select`` for ``ErrorQueue.retry_all`` from the usual filters; None (every message) when none is given.

    ``failed_q`` matches the ``NServiceBus.FailedQ`` header as an address of this dialect (any spelling of the same
    queue); ``exception_type`` the full type name or the class name alone; ``message_ids`` native Ids or
    ``NServiceBus.MessageId`` values. An invalid ``failed_q`` raises InvalidAddressError.
    """
    wanted_queue = dialect.parse_address(failed_q) if failed_q else None
    ids = {str(i).lower() for i in message_ids or ()}
    if wanted_queue is None and not exception_type and not ids:
        return None

    def select(message: ReceivedMessage) -> bool:
        if ids and str(message.id).lower() not in ids and \
                str(message.headers.get(h.MESSAGE_ID) or "").lower() not in ids:
            return False
        if wanted_queue is not None:
            try:
                failed_in = dialect.parse_address(message.headers.get(h.FAILED_Q) or "")
            except (InvalidAddressError, ValueError):
                return False
            if not dialect.same_queue(failed_in, wanted_queue):
                return False
        if exception_type:
            kind = message.headers.get(h.EXCEPTION_TYPE) or ""
            if kind != exception_type and not kind.endswith("." + exception_type):
                return False
        return True

    return select
