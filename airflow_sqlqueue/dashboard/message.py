"""One failed message as its own page shows it: the failure, every header, the body laid out by its content type,
and the other failed messages of its conversation.

The row is read with the error-queue page's statement (``failed_page`` at one position: previews cut in SQL), so
a huge body is never loaded whole; the whole body is read only for a download (:func:`whole_body`). Rows are
untrusted: nothing here parses XML (no entities are expanded, the layout only indents tags), JSON deeper than the
interpreter allows is shown as it is, and every text is valid Unicode.
"""

from __future__ import annotations

import json
import re
from typing import Any

from airflow_sqlqueue.transport import SqlQueueTransport
from airflow_sqlqueue.transport.errorqueue.error_queue import PositionsNotFoundError
from airflow_sqlqueue.transport.errorqueue.previews import FailedFilter, Position, clean_text
from airflow_sqlqueue.transport.wire import headers as h

from .queues import canonical

#: What the page shows of a body at most; a larger one is cut, with a download of the whole.
BODY_SHOWN_BYTES = 65_536
#: Headers of one message the page reads at most (larger headers are shown raw, as a preview).
HEADERS_CHARS = 1_048_576
#: Other failed messages of the same conversation listed at most.
CONVERSATION_LIMIT = 50
#: Matching rows read at most per request (a search of the headers for the conversation Id).
CONVERSATION_SCAN = 500
#: Rows of the error queue looked at per request: from half of it before the message's position on, so a lookup
#: costs the same on a queue of a million rows as on a small one; ``next_after`` is where looking further starts.
CONVERSATION_WINDOW = 10_000
_XML_TOKEN = re.compile(r"(<[^>]*>)")


def find_position(transport: SqlQueueTransport, error_queue: str, message_id: str) -> int | None:
    """The position of the failed message with this native Id, or None (an index seek on PostgreSQL and SQLite)."""
    table = transport.book.queue(error_queue)

    def work(cur: Any) -> int | None:
        row = transport.dialect.execute(cur, "position_of_id", {"id": message_id}, **table.ids).fetchone()
        return None if row is None else int(row[0])

    try:
        return transport.run(work, what=f"find a message in {error_queue!r}", read_only=True)
    except Exception as exc:  # noqa: BLE001 - an Id that is not a UUID (PostgreSQL refuses the cast): not here
        if "uuid" in str(exc).lower() or "invalid input" in str(exc).lower():
            return None
        raise


def read_message(transport: SqlQueueTransport, error_queue: str, seq: int | None, message_id: str,
                 body_bytes: int = BODY_SHOWN_BYTES) -> dict[str, Any]:
    """The message at ``seq`` with native Id ``message_id`` (``seq`` None: found by Id), as the page shows it;
    PositionsNotFoundError when it is not in the error queue (any more)."""
    if seq is None:
        seq = find_position(transport, error_queue, message_id)
    found = [] if seq is None else transport.errors(error_queue).page(
        after_seq=seq - 1, limit=1, headers_chars=HEADERS_CHARS, body_bytes=body_bytes)
    if not found or found[0].seq != seq or found[0].id.lower() != message_id.lower():
        raise PositionsNotFoundError([Position(seq or 0, message_id)], transport.name(error_queue))
    message = found[0].as_dict()
    if message["failed_q"]:
        message["failed_q"] = canonical(transport, message["failed_q"])
    headers = message["headers"] or {}
    content_type = headers.get(h.CONTENT_TYPE)
    kind, text = layout(message["body_preview"], message["body_binary"], message["body_truncated"], content_type)
    message.update({
        "content_type": content_type, "body_kind": kind, "body_text": text,
        "time_sent": headers.get(h.TIME_SENT), "conversation_id": headers.get(h.CONVERSATION_ID),
        "message_id": headers.get(h.MESSAGE_ID),
        "processing_endpoint": headers.get(h.PROCESSING_ENDPOINT),
        "processing_machine": headers.get(h.PROCESSING_MACHINE) or headers.get(h.HOST_DISPLAY_NAME)})
    message.pop("body_preview")
    return message


def layout(text: str, binary: bool, truncated: bool, content_type: str | None) -> tuple[str, str]:
    """(kind, text): a body laid out by its content type: ``json`` indented, ``xml`` one tag a line, ``text`` as it
    is, ``binary`` as hex (what the preview holds). A body cut short, or not what its type says, is ``text``."""
    if binary:
        return "binary", text
    kind = (content_type or "").lower()
    if not truncated and ("json" in kind or (not kind and text.lstrip()[:1] in ("{", "["))):
        try:
            return "json", json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except (ValueError, RecursionError):
            return "text", text
    if "xml" in kind or (not kind and text.lstrip().startswith("<")):
        return "xml", indent_xml(text)
    return "text", text


def indent_xml(text: str, width: int = 2) -> str:
    """XML with one tag a line, indented by depth, without parsing it (no entity is expanded, no DTD read)."""
    lines: list[str] = []
    depth = 0
    for token in (t.strip() for t in _XML_TOKEN.split(text)):
        if not token:
            continue
        closing = token.startswith("</")
        opening = token.startswith("<") and not closing and not token.endswith("/>") and token[1:2] not in "?!"
        if closing:
            depth = max(depth - 1, 0)
        if lines and not token.startswith("<") and lines[-1].lstrip().startswith("<") and not closing:
            lines[-1] += token  # text inside an element stays on its line
            continue
        if closing and lines and not lines[-1].rstrip().endswith(">"):
            lines[-1] += token
            continue
        lines.append(" " * (width * depth) + token)
        if opening:
            depth += 1
    return "\n".join(lines)


def whole_body(transport: SqlQueueTransport, error_queue: str, seq: int, message_id: str) -> bytes:
    """The whole body of the message at ``seq`` with that Id (for a download); PositionsNotFoundError if gone."""
    rows = transport.errors(error_queue).whole_rows(seq, seq)
    for row in rows:
        if (clean_text(row[0])[0] or "").lower() == message_id.lower():
            body = row[8]
            if body is None:
                return b""
            return bytes(body) if isinstance(body, bytes | bytearray | memoryview) else str(body).encode("utf-8")
    raise PositionsNotFoundError([Position(seq, message_id)], transport.name(error_queue))


def conversation(transport: SqlQueueTransport, error_queue: str, conversation_id: str | None,
                 but: str, *, seq: int | None = None, after: int | None = None,
                 window: int = CONVERSATION_WINDOW) -> dict[str, Any]:
    """The other failed messages of a conversation (those whose ``NServiceBus.ConversationId`` is that Id), oldest
    first, among at most ``window`` rows: after position ``after`` (default: half a window before ``seq``, the
    message's own position, as a conversation's failures are usually close together).

    ``{"messages": [...], "more", "after", "next_after"}``: ``after`` where it looked from, ``next_after`` where
    looking further starts (None: it looked to the end), ``more`` whether some were not looked at or not listed."""
    if not conversation_id:
        return {"messages": [], "more": False, "after": 0, "next_after": None}
    errors = transport.errors(error_queue)
    if after is None:
        after = max(0, int(seq or 0) - window // 2)
    end = errors.scan_end(after, window)
    page = errors.page(after_seq=after, limit=CONVERSATION_SCAN, where=FailedFilter(search=conversation_id),
                       headers_chars=16_384, body_bytes=1, through_seq=end)
    same = [p for p in page if p.headers and p.headers.get(h.CONVERSATION_ID) == conversation_id and p.id != but]
    next_after = page[-1].seq if len(page) == CONVERSATION_SCAN else end
    return {"messages": [{"seq": p.seq, "id": p.id, "failed_q": canonical(transport, p.failed_q) if p.failed_q
                          else None, "exception_type": p.exception_type, "message_type": p.message_type,
                          "time_of_failure": p.time_of_failure} for p in same[:CONVERSATION_LIMIT]],
            "more": len(same) > CONVERSATION_LIMIT or next_after is not None or after > 0,
            "after": after, "next_after": next_after}
