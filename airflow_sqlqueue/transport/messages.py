"""Messages going out to a queue and coming in from one."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from .errors import InvalidMessageError
from .headers import MESSAGE_ID, serialize_headers
from .validation import is_number

YEAR = 365 * 24 * 3600
MAX_SECONDS = 100 * YEAR


def _to_ms(value: float | timedelta | None, what: str) -> int | None:
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if not is_number(seconds):
        raise InvalidMessageError(f"{what} must be seconds (a number) or a timedelta, got {value!r}")
    if seconds <= 0:
        raise InvalidMessageError(f"{what} must be positive, got {seconds} seconds")
    if seconds > MAX_SECONDS:
        raise InvalidMessageError(f"{what} of {seconds:.0f} seconds is over {MAX_SECONDS // YEAR} years, past what "
                                  "database timestamps hold; for no expiry/delay leave it unset (None)")
    return max(1, round(seconds * 1000))


@dataclass(frozen=True)
class OutgoingMessage:
    """A message to send.

    :param body: bytes, or text (sent as UTF-8).
    :param headers: NServiceBus headers, str to str (or None).
    :param time_to_be_received: seconds or timedelta; the database sets Expires = now + this.
    :param delay: seconds or timedelta; the message waits in the delayed table until due.
    """

    body: bytes | str | None = b""
    headers: Mapping[str, str | None] = field(default_factory=dict)
    time_to_be_received: float | timedelta | None = None
    delay: float | timedelta | None = None

    def body_bytes(self) -> bytes | None:
        """The body as bytes (text encoded as UTF-8)."""
        if self.body is None or isinstance(self.body, bytes):
            return self.body
        if isinstance(self.body, str):
            try:
                return self.body.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise InvalidMessageError(f"body text cannot be encoded as UTF-8 ({exc.reason} at position "
                                          f"{exc.start}); pass bytes, or text without lone surrogates") from None
        if isinstance(self.body, bytearray | memoryview):
            return bytes(self.body)
        raise InvalidMessageError(f"body must be bytes or str, got {type(self.body).__name__}")

    def ttbr_ms(self) -> int | None:
        """Time to be received in milliseconds, or None."""
        return _to_ms(self.time_to_be_received, "time_to_be_received")

    def delay_ms(self) -> int | None:
        """Delivery delay in milliseconds, or None."""
        return _to_ms(self.delay, "delay")

    def validated(self) -> tuple[str, bytes | None, int | None, int | None]:
        """Check the message and return (headers text, body, ttbr ms, delay ms)."""
        ttbr, delay = self.ttbr_ms(), self.delay_ms()
        if ttbr is not None and delay is not None:
            raise InvalidMessageError(
                "a message cannot have both a delay and a time_to_be_received (NServiceBus refuses the "
                "combination); drop one of them")
        return serialize_headers(self.headers), self.body_bytes(), ttbr, delay


@dataclass(frozen=True)
class ReceivedMessage:
    """A message taken from a queue.

    :param id: the native message id (the table's Id column).
    :param headers: parsed headers.
    :param body: raw body bytes (None when the column was NULL).
    :param seq: the row's RowVersion / seq (FIFO position).
    :param queue: canonical address text of the queue it came from.
    """

    id: uuid.UUID
    headers: dict[str, str | None]
    body: bytes | None
    seq: int
    queue: str = ""

    @property
    def message_id(self) -> str:
        """``NServiceBus.MessageId``, falling back to the native Id as upstream receivers do."""
        return self.headers.get(MESSAGE_ID) or str(self.id)

    def body_text(self, errors: str = "strict") -> str:
        """The body decoded as UTF-8."""
        return (self.body or b"").decode("utf-8", errors)
