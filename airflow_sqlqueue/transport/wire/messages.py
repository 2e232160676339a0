"""Messages going out to a queue and coming in from one."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from ..common.errors import InvalidMessageError
from ..common.validation import is_number
from .headers import MESSAGE_ID, parse_headers, serialize_headers

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
    :param content_type: the body's MIME type (``NServiceBus.ContentType`` when the headers do not set it).
    """

    body: bytes | str | None = b""
    headers: Mapping[str, str | None] = field(default_factory=dict)
    time_to_be_received: float | timedelta | None = None
    delay: float | timedelta | None = None
    content_type: str | None = None

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

    def timing_ms(self) -> tuple[int | None, int | None]:
        """(time to be received, delay) in milliseconds; refuses a message that has both."""
        if self.time_to_be_received is None and self.delay is None:
            return None, None
        ttbr, delay = self.ttbr_ms(), self.delay_ms()
        if ttbr is not None and delay is not None:
            raise InvalidMessageError(
                "a message cannot have both a delay and a time_to_be_received (NServiceBus refuses the "
                "combination); drop one of them")
        return ttbr, delay

    def validated(self, defaults: Mapping[str, str | None] | None = None) -> tuple[str, bytes | None, int | None,
                                                                                   int | None]:
        """Check the message and return (headers text, body, ttbr ms, delay ms).

        :param defaults: headers written unless the message's own headers set them (the standard headers).
        """
        ttbr, delay = self.timing_ms()
        if defaults and isinstance(self.headers, Mapping):
            headers: Mapping[str, str | None] = {**defaults, **self.headers}
        else:
            headers = self.headers
        return serialize_headers(headers), self.body_bytes(), ttbr, delay


class ReceivedMessage:
    """A message taken from a queue.

    :param id: the native message id (the table's Id column), a ``uuid.UUID``. Given as the driver returned
        it, it is parsed on first use; an id that is not a UUID (only SQLite's loose types allow one) reads
        as a stable UUID derived from its text, and ``native_id`` keeps the text as stored.
    :param headers: parsed headers.
    :param body: raw body bytes (None when the column was NULL).
    :param seq: the row's RowVersion / seq (FIFO position).
    :param queue: canonical address text of the queue it came from.
    :param headers_text: the Headers column as stored, when ``headers`` are exactly what it holds (else None).
    """

    __slots__ = ("_id", "_uuid", "headers", "body", "seq", "queue", "headers_text")
    __hash__ = None  # type: ignore[assignment]  # headers are a dict: messages are not hashable

    def __init__(self, id: Any, headers: dict[str, str | None], body: bytes | None, seq: int, queue: str = "",
                 headers_text: str | None = None) -> None:
        self._id = id
        self._uuid = id if type(id) is uuid.UUID else None
        self.headers = headers
        self.body = body
        self.seq = seq
        self.queue = queue
        self.headers_text = headers_text

    @property
    def id(self) -> uuid.UUID:
        """The native message id."""
        value = self._uuid
        if value is None:
            value = self._uuid = native_uuid(self._id)  # the stored id itself stays in native_id
        return value

    @property
    def id_text(self) -> str:
        """``str(self.id)``, without parsing an id stored as canonical text (lower-case, hyphenated)."""
        return id_text(self._id) if self._uuid is None else str(self._uuid)

    @property
    def native_id(self) -> Any:
        """The Id column as the driver returned it (for writing the row back unchanged)."""
        return self._id

    @property
    def message_id(self) -> str:
        """``NServiceBus.MessageId``, falling back to the native Id as upstream receivers do."""
        return self.headers.get(MESSAGE_ID) or str(self.id)

    def body_text(self, errors: str = "strict") -> str:
        """The body decoded as UTF-8."""
        return (self.body or b"").decode("utf-8", errors)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ReceivedMessage):
            return NotImplemented
        return (self.id, self.headers, self.body, self.seq, self.queue) == \
            (other.id, other.headers, other.body, other.seq, other.queue)

    def __repr__(self) -> str:
        size = None if self.body is None else len(self.body)
        return f"ReceivedMessage(id={self.id}, seq={self.seq}, queue={self.queue!r}, body_size={size})"


class ReceivedColumns:
    """A batch of received messages as columns, one list per column and no object per message (the Parquet
    drain's receive: ``Claim(..., columns=True)``). Row ``i`` is the message ``ReceivedMessage`` would hold.

    :param ids: the Id column as the driver returned it (see ``ReceivedMessage.native_id``; ``id_text`` reads one).
    :param seqs: the positions, FIFO.
    :param headers: the Headers text of each message: as stored, or encoded again where the receive changed the
        headers (a forward header naming this queue taken out).
    :param bodies: the bodies (None where the column was NULL).
    :param queue: canonical address text of the queue they came from.
    """

    __slots__ = ("ids", "seqs", "headers", "bodies", "queue")

    def __init__(self, ids: Sequence[Any], seqs: Sequence[int], headers: Sequence[str],
                 bodies: Sequence[bytes | None], queue: str) -> None:
        self.ids = ids
        self.seqs = seqs
        self.headers = headers
        self.bodies = bodies
        self.queue = queue

    def __len__(self) -> int:
        return len(self.seqs)

    def __bool__(self) -> bool:
        return len(self.seqs) != 0

    def __repr__(self) -> str:
        return f"ReceivedColumns(queue={self.queue!r}, rows={len(self)})"

    def messages(self) -> list[ReceivedMessage]:
        """The rows as ``ReceivedMessage`` objects (their headers parsed again from the text)."""
        return [ReceivedMessage(native_id, parse_headers(text), body, seq, self.queue, text)
                for native_id, seq, text, body in zip(self.ids, self.seqs, self.headers, self.bodies, strict=True)]


def headers_text(message: ReceivedMessage) -> str:
    """The Headers text of a received message: as stored when its headers are what was stored, else encoded
    again (compact, non-ASCII kept: the stored text's form for the common case)."""
    text = message.headers_text
    if text is None:
        text = json.dumps(message.headers, ensure_ascii=False, separators=(",", ":"))
    return text


def id_text(native_id: Any) -> str:
    """An Id column value as canonical UUID text: canonical text as it is, anything else through ``native_uuid``
    (``ReceivedMessage.id_text`` of a message with this Id)."""
    if type(native_id) is str and _CANONICAL_UUID(native_id) is not None:
        return native_id
    return str(native_uuid(native_id))


_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}").fullmatch

#: Namespace of the UUIDs derived from native ids that are not UUIDs.
NATIVE_ID_NAMESPACE = uuid.UUID("6f1d2a0e-5c3b-4f7a-9d8e-1b2c3d4e5f60")


def native_uuid(value: Any) -> uuid.UUID:
    """A native id as a UUID: text, SQL Server's 16 mixed-endian bytes, or a UUID. Anything else (a loose SQLite
    value) maps to a stable UUID derived from its text."""
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        if len(raw) == 16:
            return uuid.UUID(bytes_le=raw)
        value = raw.decode("utf-8", "backslashreplace")
    text = "" if value is None else str(value)
    try:
        return uuid.UUID(text)
    except ValueError:
        return uuid.uuid5(NATIVE_ID_NAMESPACE, repr(value))


def as_text(value: Any) -> str | None:
    """A column meant to hold text (Headers), whatever it held: bytes that are not UTF-8 keep each bad byte as an
    escape, a number becomes its text (SQLite stores what a foreign program gave it)."""
    if value is None or type(value) is str:
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "backslashreplace")
    return str(value)


def as_body(value: Any) -> bytes | None:
    """A Body column as bytes, whatever it held: text as its UTF-8 (lone surrogates kept), a number as its text,
    never ``bytes(n)`` (that many zero bytes, or a MemoryError)."""
    if value is None or type(value) is bytes:
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        try:
            return value.encode("utf-8", "surrogateescape")  # bytes SQLite could not decode come back as they were
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogatepass")
    return str(value).encode("utf-8")

