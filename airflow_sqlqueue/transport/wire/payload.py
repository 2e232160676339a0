"""The JSON form of a message, shared by every place that hands messages on as data: the drain's list for
``.expand()``, the event trigger's payload, the command line's ``--json`` output and the dashboard.

``body`` holds the body as text when it is valid UTF-8 (``None`` when the column was NULL); otherwise
``body_base64`` holds it base64-encoded. A body larger than ``max_body_bytes`` is left out (``body_omitted``).
Header names and values are text that any JSON store accepts: a value holding a lone surrogate (a valid JSON
escape such as ``"\\ud800"`` in a row written by another program) has it replaced by U+FFFD; the exact text is in
the Parquet files and in the row itself.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import Mapping
from typing import Any

from .messages import ReceivedMessage

#: Every field a payload can have, in the order they are written.
FIELDS = ("queue", "id", "message_id", "seq", "headers", "body_size")
_REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")


def to_payload(message: ReceivedMessage, fields: tuple[str, ...] = FIELDS,
               max_body_bytes: int | None = None, *, exact: bool = False) -> dict[str, Any]:
    """The JSON-serialisable form of ``message`` with the given ``fields`` (see ``FIELDS``) and its body.

    :param exact: keep header text exactly, lone surrogates included, for a writer that escapes them itself (the
        command line's JSON lines); by default they are replaced so that any JSON store accepts the payload.
    """
    payload: dict[str, Any] = {}
    for name in fields:
        if name == "id":
            payload["id"] = message.id_text
        elif name == "headers":
            payload["headers"] = dict(message.headers) if exact else safe_headers(message.headers)
        elif name == "message_id":
            payload["message_id"] = message.message_id if exact else safe_text(message.message_id)
        elif name == "body_size":
            payload["body_size"] = None if message.body is None else len(message.body)
        else:
            payload[name] = getattr(message, name)
    payload.update(encode_body(message.body, max_body_bytes))
    return payload


def encode_body(body: bytes | None, max_body_bytes: int | None = None) -> dict[str, Any]:
    """``{"body": text}``, ``{"body_base64": ...}``, ``{"body": None}`` or ``{"body_omitted": True}``."""
    if body is None:
        return {"body": None}
    if max_body_bytes is not None and len(body) > max_body_bytes:
        return {"body_omitted": True}
    try:
        return {"body": body.decode("utf-8")}
    except UnicodeDecodeError:
        return {"body_base64": base64.b64encode(body).decode("ascii")}


def decode_body(item: Mapping[str, Any]) -> bytes | None:
    """The body of a payload as bytes (``body_base64`` first, then ``body`` as UTF-8 text)."""
    if item.get("body_base64") is not None:
        return base64.b64decode(item["body_base64"])
    body = item.get("body")
    if body is None or isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode("utf-8")
    return json.dumps(body, separators=(",", ":")).encode("utf-8")  # a JSON object or list given inline


def from_payload(item: Mapping[str, Any]) -> ReceivedMessage:
    """Back from a payload to a ``ReceivedMessage`` (body as bytes), e.g. in a mapped task."""
    return ReceivedMessage(uuid.UUID(item["id"]), dict(item.get("headers") or {}), decode_body(item),
                           int(item.get("seq", 0)), item.get("queue", ""))


def safe_text(text: str) -> str:
    """``text`` with lone surrogates replaced by U+FFFD (it can then be stored as UTF-8 anywhere)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return _SURROGATE.sub(_REPLACEMENT, text)


def safe_headers(headers: Mapping[str, str | None]) -> dict[str, str | None]:
    """Headers whose names and values can be stored as UTF-8 anywhere (see ``safe_text``)."""
    try:
        json.dumps(headers, ensure_ascii=False).encode("utf-8")
        return dict(headers)
    except UnicodeEncodeError:
        return {safe_text(k): None if v is None else safe_text(v) for k, v in headers.items()}
