"""NServiceBus header serialization, byte for byte as upstream writes it."""

from __future__ import annotations

import json
import re
import time
import unicodedata
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from ..common.errors import InvalidMessageError

MESSAGE_ID = "NServiceBus.MessageId"
ENCLOSED_MESSAGE_TYPES = "NServiceBus.EnclosedMessageTypes"
CONTENT_TYPE = "NServiceBus.ContentType"
CORRELATION_ID = "NServiceBus.CorrelationId"
REPLY_TO_ADDRESS = "NServiceBus.ReplyToAddress"
CONVERSATION_ID = "NServiceBus.ConversationId"
ORIGINATING_ENDPOINT = "NServiceBus.OriginatingEndpoint"
TIME_SENT = "NServiceBus.TimeSent"
MESSAGE_INTENT = "NServiceBus.MessageIntent"
TIME_TO_BE_RECEIVED = "NServiceBus.TimeToBeReceived"
FAILED_Q = "NServiceBus.FailedQ"
TIME_OF_FAILURE = "NServiceBus.TimeOfFailure"
EXCEPTION_TYPE = "NServiceBus.ExceptionInfo.ExceptionType"
EXCEPTION_MESSAGE = "NServiceBus.ExceptionInfo.Message"
EXCEPTION_SOURCE = "NServiceBus.ExceptionInfo.Source"
EXCEPTION_STACK_TRACE = "NServiceBus.ExceptionInfo.StackTrace"
EXCEPTION_INFO_PREFIX = "NServiceBus.ExceptionInfo."
INNER_EXCEPTION_TYPE = "NServiceBus.ExceptionInfo.InnerExceptionType"
EXCEPTION_HELP_LINK = "NServiceBus.ExceptionInfo.HelpLink"
EXCEPTION_DATA_PREFIX = "NServiceBus.ExceptionInfo.Data."
PROCESSING_ENDPOINT = "NServiceBus.ProcessingEndpoint"
PROCESSING_MACHINE = "NServiceBus.ProcessingMachine"
ORIGINATING_MACHINE = "NServiceBus.OriginatingMachine"
HOST_ID = "$.diagnostics.hostid"
HOST_DISPLAY_NAME = "$.diagnostics.hostdisplayname"
#: Delayed-retry count and when the last one was made; immediate-retry count of older cores.
RETRIES = "NServiceBus.Retries"
RETRIES_TIMESTAMP = "NServiceBus.Retries.Timestamp"
IMMEDIATE_RETRIES = "NServiceBus.FLRetries"
CONTROL_MESSAGE = "NServiceBus.ControlMessage"
#: ServiceControl's retry: which failed message it is, where to acknowledge it, edits.
RETRY_UNIQUE_MESSAGE_ID = "ServiceControl.Retry.UniqueMessageId"
RETRY_ACKNOWLEDGEMENT_QUEUE = "ServiceControl.Retry.AcknowledgementQueue"
RETRY_SUCCESSFUL = "ServiceControl.Retry.Successful"
EDIT_OF = "ServiceControl.EditOf"
FORWARD_DESTINATION = "NServiceBus.SqlServer.ForwardDestination"
#: Kept on a poison row moved to the error queue: the original, unparseable Headers text.
RAW_HEADERS = "airflow_sqlqueue.RawHeaders"
#: The native Id a copy had when it went into a queue under a new one (the queue already held its Id).
ORIGINAL_ID = "airflow_sqlqueue.OriginalId"
FAILURE_HEADERS = (FAILED_Q, TIME_OF_FAILURE, EXCEPTION_TYPE, EXCEPTION_MESSAGE, EXCEPTION_SOURCE,
                   EXCEPTION_STACK_TRACE, RAW_HEADERS)
#: What ServiceControl removes, by prefix, from a message it sends back to its queue.
RETRY_REMOVED_PREFIXES = (RETRIES, FAILED_Q, TIME_OF_FAILURE, EXCEPTION_INFO_PREFIX, EDIT_OF)

#: Largest serialized headers accepted on send (nvarchar(max) holds more, but nothing sane needs it).
MAX_HEADERS_CHARS = 1_000_000


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))  # json.dumps builds one per call
_STR = {str}
_STR_OR_NONE = {str, type(None)}

#: Unicode categories System.Text.Json's relaxed encoder treats as "undefined" and escapes (controls, surrogates,
#: private use, unassigned, line and paragraph separators, and space separators other than U+0020).
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"})


def _escaped_bmp() -> str:
    """A regex character class of the BMP characters 9.1 writes as ``\\uXXXX`` (built from ``unicodedata``)."""
    ranges: list[tuple[int, int]] = []
    for code in range(0x20, 0x10000):  # C0 controls are escaped by the JSON encoder already
        if code == 0x20 or unicodedata.category(chr(code)) not in _ESCAPED_CATEGORIES:
            continue
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1] = (ranges[-1][0], code)
        else:
            ranges.append((code, code))
    return "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges)


#: One token of encoder output: an escape the encoder wrote, or a character 9.1 escapes that it left raw.
_TOKEN = re.compile(r"\\u([0-9a-fA-F]{4})|\\.|/|[" + _escaped_bmp() + "\U00010000-\U0010FFFF]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape_token(match: re.Match[str]) -> str:
    hex_digits = match.group(1)
    if hex_digits is not None:
        return "\\u" + hex_digits.upper()
    token = match.group(0)
    if token == "/":
        return "\\/"
    if len(token) == 2:  # \" \\ \n ...: as the encoder wrote it
        return token
    code = ord(token)
    if code < 0x10000:
        return f"\\u{code:04X}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04X}\\u{0xDC00 + (code & 0x3FF):04X}"


def _as_upstream(text: str) -> str:
    """Encoder output rewritten byte for byte as 9.1 writes it (System.Text.Json relaxed, then ``/`` as ``\\/``)."""
    if text.isascii() and "\\u" not in text and "\x7f" not in text:
        return text.replace("/", "\\/")  # the common case: plain ASCII
    return _TOKEN.sub(_escape_token, text)


def escape_surrogates(text: str) -> str:
    """JSON text with lone surrogates written as ``\\uXXXX`` escapes, so it can be encoded as UTF-8 (for output
    made from rows: ``--json``, the dashboard). Valid only on JSON text, where surrogates sit inside strings."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group(0)):04X}", text)


def printable(value: Any) -> Any:
    """``value`` (text, or dicts and lists of it) with lone surrogates shown as ``\\uXXXX`` text, so that it can
    be printed or sent as UTF-8 (header values read from rows may hold them: ``"\\ud800"`` parses to one)."""
    if isinstance(value, str):
        return escape_surrogates(value)
    if isinstance(value, dict):
        return {printable(k): printable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [printable(v) for v in value]
    return value


class PoisonHeadersError(ValueError):
    """Stored Headers text that is not a JSON object of strings."""


def serialize_headers(headers: Mapping[str, str | None], limit: int | None = MAX_HEADERS_CHARS) -> str:
    """Serialize headers as NServiceBus.Transport.SqlServer 9.1 does: a compact JSON object, System.Text.Json's
    relaxed escaping (characters outside the BMP, controls, DEL, C1, non-space separators, private-use and
    unassigned code points as upper-case ``\\uXXXX``; other non-ASCII raw), then ``/`` as ``\\/``.

    ``limit`` guards new sends, which refuse lone surrogates; copying a stored row (error queue, forwarding)
    passes ``None``: no size limit, and a lone surrogate the row held is kept as its ``\\uXXXX`` escape.
    """
    if not isinstance(headers, Mapping):
        raise InvalidMessageError(
            f"headers must be a mapping of str to str, got {type(headers).__name__}; pass a dict")
    # fast path (once per message sent): exact types checked in C; anything else is explained by the loops below
    if set(map(type, headers)) <= _STR and set(map(type, headers.values())) <= _STR_OR_NONE:
        text = _ENCODER.encode(dict(headers))
        if limit is None or text.isascii() or not _SURROGATE.search(text):
            return _within_limit(_as_upstream(text), limit)
    for key, value in headers.items():
        if not isinstance(key, str):
            raise InvalidMessageError(f"header names must be str, got {key!r}; convert the name to text")
        if value is not None and not isinstance(value, str):
            raise InvalidMessageError(
                f"header {key!r} has a {type(value).__name__} value; header values must be str or None "
                "(NServiceBus reads headers as a string dictionary): convert it with str() or json.dumps()")
    for key, value in headers.items():
        for part in (key, value):
            if part is not None and _SURROGATE.search(part):
                raise InvalidMessageError(f"header {key!r} cannot be encoded as UTF-8 (a lone surrogate); remove "
                                          "lone surrogates from header names and values")
    return _within_limit(_as_upstream(_ENCODER.encode(dict(headers))), limit)


def _within_limit(text: str, limit: int | None) -> str:
    if limit is not None and len(text) > limit:
        raise InvalidMessageError(
            f"serialized headers are {len(text)} characters, over the limit of {limit}; "
            "move large data into the body")
    return text


def parse_headers(text: str | None) -> dict[str, str | None]:
    """Parse stored Headers as upstream reads them: NULL or empty reads as ``{}``; 9.0.x (lower-case escapes),
    9.1 (upper-case) and v6-era text all parse. Raise PoisonHeadersError for anything but a JSON object of
    strings: whitespace only, the literal ``null``, nesting too deep to parse."""
    if not text:
        return {}
    if text.isspace():
        raise PoisonHeadersError("Headers are only whitespace, not a JSON object")
    try:
        value = json.loads(text)
    except ValueError as exc:
        reason = "only whitespace" if isinstance(text, str) and text.isspace() else f"not valid JSON: {exc}"
        raise PoisonHeadersError(f"Headers are {reason}") from None
    except RecursionError:
        raise PoisonHeadersError("Headers are nested too deeply to parse (not a JSON object of strings)") from None
    if not isinstance(value, dict):
        raise PoisonHeadersError(f"Headers are JSON {type(value).__name__}, not an object")
    if set(map(type, value.values())) <= _STR_OR_NONE:  # fast path, once per received message
        return value
    for key, item in value.items():
        if item is not None and not isinstance(item, str):
            raise PoisonHeadersError(f"Header {key!r} is JSON {type(item).__name__}, not a string")
    return value


def format_wire_time(moment: datetime | None = None) -> str:
    """Format a timestamp as NServiceBus does: ``yyyy-MM-dd HH:mm:ss:ffffff Z`` in UTC (default: now)."""
    if moment is None:
        micros = _time_ns() // 1000
        seconds, fraction = divmod(micros, 1_000_000)
        minute, second = divmod(seconds, 60)
        global _minute_prefix
        at, prefix = _minute_prefix
        if at != minute:
            prefix = _format_minute(datetime.fromtimestamp(minute * 60, timezone.utc))
            _minute_prefix = (minute, prefix)
        return "%s%02d:%06d Z" % (prefix, second, fraction)  # noqa: UP031 - no format-spec parser a send
    moment = moment.astimezone(timezone.utc)
    return f"{_format_minute(moment)}{moment.second:02d}:{moment.microsecond:06d} Z"


def _format_minute(moment: datetime) -> str:
    return f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d} {moment.hour:02d}:{moment.minute:02d}:"


_time_ns = time.time_ns
_minute_prefix: tuple[int, str] = (-1, "")  # the current minute's text (one tuple: replaced whole)


def parse_wire_time(text: str) -> datetime:
    """Parse an NServiceBus timestamp (``yyyy-MM-dd HH:mm:ss:ffffff Z``) into an aware UTC datetime."""
    return datetime.strptime(text.strip(), "%Y-%m-%d %H:%M:%S:%f Z").replace(tzinfo=timezone.utc)
