"""Messages as operators hand them on: drain-list items and the values the send operators accept."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow_sqlqueue.transport import InvalidMessageError, OutgoingMessage, ReceivedMessage
from airflow_sqlqueue.transport.wire.payload import decode_body, from_payload, to_payload

#: The fields of a drain-list item besides the body (``body`` or ``body_base64``).
ITEM_FIELDS = ("id", "headers", "seq", "queue")


def message_to_dict(message: ReceivedMessage) -> dict[str, Any]:
    """A received message as a JSON-serialisable dict (the items of the drain's list).

    ``body`` holds the body as text when it is valid UTF-8 (``None`` when the column was NULL); otherwise
    ``body_base64`` holds it base64-encoded.
    """
    return to_payload(message, ITEM_FIELDS)


def message_from_dict(item: dict[str, Any]) -> ReceivedMessage:
    """Back from a drain list item to a ``ReceivedMessage`` (body as bytes), e.g. in a mapped task."""
    return from_payload(item)


def _native_text(value: Any) -> Any:
    """A number back to text: native template rendering turns ``"1"`` into ``1`` (headers and bodies are text)."""
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


def _body_of(item: dict[str, Any]) -> bytes | None:
    return decode_body({**item, "body": _native_text(item.get("body"))})


_MESSAGE_KEYS = {"body", "body_base64", "headers", "time_to_be_received", "delay", "id", "seq", "queue"}


def outgoing_message(item: Any, *, time_to_be_received: float | timedelta | None = None,
                     delay: float | timedelta | None = None) -> OutgoingMessage:
    """An ``OutgoingMessage`` from a string, bytes, or a dict ``{"body", "headers", ...}``.

    Dicts from ``SqlQueueDrainOperator`` are accepted as they are (``id``, ``seq`` and ``queue`` are ignored:
    a sent message always gets a new native Id). A dict may set its own ``time_to_be_received`` or ``delay``.
    """
    if isinstance(item, OutgoingMessage):
        return item
    if isinstance(item, str | bytes | int | float) and not isinstance(item, bool):
        return OutgoingMessage(body=_native_text(item), time_to_be_received=time_to_be_received, delay=delay)
    if isinstance(item, dict):
        unknown = set(item) - _MESSAGE_KEYS
        if unknown:
            raise InvalidMessageError(f"message has unknown keys {sorted(unknown)}; a message dict takes "
                                      f"{sorted(_MESSAGE_KEYS - {'id', 'seq', 'queue'})}")
        headers = item.get("headers") or {}
        if not isinstance(headers, dict):
            raise InvalidMessageError(f"message headers must be a dict of str to str, got {type(headers).__name__}")
        headers = {k: _native_text(v) for k, v in headers.items()}
        return OutgoingMessage(body=_body_of(item), headers=headers,
                               time_to_be_received=item.get("time_to_be_received", time_to_be_received),
                               delay=item.get("delay", delay))
    raise InvalidMessageError(f"a message must be a str, bytes or a dict with 'body' and 'headers', got "
                              f"{type(item).__name__}")
