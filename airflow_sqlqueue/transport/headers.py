"""NServiceBus header serialization, byte for byte as upstream writes it."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime, timezone

from .errors import InvalidMessageError

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
FORWARD_DESTINATION = "NServiceBus.SqlServer.ForwardDestination"
#: Kept on a poison row moved to the error queue: the original, unparseable Headers text.
RAW_HEADERS = "airflow_sqlqueue.RawHeaders"
FAILURE_HEADERS = (FAILED_Q, TIME_OF_FAILURE, EXCEPTION_TYPE, EXCEPTION_MESSAGE, EXCEPTION_SOURCE,
                   EXCEPTION_STACK_TRACE, RAW_HEADERS)

#: Largest serialized headers accepted on send (nvarchar(max) holds more, but nothing sane needs it).
MAX_HEADERS_CHARS = 1_000_000


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))  # json.dumps builds one per call
_STR = {str}
_STR_OR_NONE = {str, type(None)}
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class PoisonHeadersError(ValueError):
    """Stored Headers text that is not a JSON object of strings."""


def serialize_headers(headers: Mapping[str, str | None], limit: int | None = MAX_HEADERS_CHARS) -> str:
    """Serialize headers as upstream does: compact JSON object, ``/`` as ``\\/``, non-ASCII unescaped.

    ``limit`` guards new sends; copying a stored row (error queue, forwarding) passes ``None``: a lone surrogate
    there (read from a valid JSON escape such as ``"\\ud800"``) is written back as the same escape, never refused.
    """
    if not isinstance(headers, Mapping):
        raise InvalidMessageError(
            f"headers must be a mapping of str to str, got {type(headers).__name__}; pass a dict")
    # fast path (once per message sent): exact types checked in C; anything else is explained by the loops below
    if set(map(type, headers)) <= _STR and set(map(type, headers.values())) <= _STR_OR_NONE:
        text = _ENCODER.encode(dict(headers))
        try:
            text.encode("utf-8")
            return _within_limit(text.replace("/", "\\/"), limit)
        except UnicodeEncodeError:
            if limit is None:  # a stored row: keep the text exactly, as the JSON escape it was read from
                return escape_surrogates(text).replace("/", "\\/")
            # a new send: the loops below name the header
    for key, value in headers.items():
        if not isinstance(key, str):
            raise InvalidMessageError(f"header names must be str, got {key!r}; convert the name to text")
        if value is not None and not isinstance(value, str):
            raise InvalidMessageError(
                f"header {key!r} has a {type(value).__name__} value; header values must be str or None "
                "(NServiceBus reads headers as a string dictionary): convert it with str() or json.dumps()")
    for key, value in headers.items():
        for part in (key, value):
            try:
                if part is not None:
                    part.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise InvalidMessageError(f"header {key!r} cannot be encoded as UTF-8 ({exc.reason}); remove lone "
                                          "surrogates from header names and values") from None
    return _within_limit(_ENCODER.encode(dict(headers)).replace("/", "\\/"), limit)


def escape_surrogates(json_text: str) -> str:
    """JSON text with each lone surrogate written as its ``\\uXXXX`` escape (valid JSON, read back the same)."""
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04X}", json_text)


def _within_limit(text: str, limit: int | None) -> str:
    if limit is not None and len(text) > limit:
        raise InvalidMessageError(
            f"serialized headers are {len(text)} characters, over the limit of {limit}; "
            "move large data into the body")
    return text


def parse_headers(text: str | None) -> dict[str, str | None]:
    """Parse stored Headers; NULL or empty reads as ``{}``. Raise PoisonHeadersError if not a string map
    (whitespace only is poison too, as upstream's parser fails on it)."""
    if not text:
        return {}
    if text.isspace():
        raise PoisonHeadersError("Headers are only whitespace, not a JSON object")
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise PoisonHeadersError(f"Headers are not valid JSON: {exc}") from None
    except RecursionError:
        raise PoisonHeadersError("Headers are JSON nested too deeply to read") from None
    if not isinstance(value, dict):
        raise PoisonHeadersError(f"Headers are JSON {type(value).__name__}, not an object")
    if set(map(type, value.values())) <= _STR_OR_NONE:  # fast path, once per received message
        return value
    for key, item in value.items():
        if item is not None and not isinstance(item, str):
            raise PoisonHeadersError(f"Header {key!r} is JSON {type(item).__name__}, not a string")
    return value


def format_wire_time(moment: datetime | None = None) -> str:
    """Format a timestamp as NServiceBus does: ``yyyy-MM-dd HH:mm:ss:ffffff Z`` in UTC."""
    moment = (moment or datetime.now(timezone.utc)).astimezone(timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S:%f Z")


def parse_wire_time(text: str) -> datetime:
    """Parse an NServiceBus timestamp (``yyyy-MM-dd HH:mm:ss:ffffff Z``) into an aware UTC datetime."""
    return datetime.strptime(text.strip(), "%Y-%m-%d %H:%M:%S:%f Z").replace(tzinfo=timezone.utc)
