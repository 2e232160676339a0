"""The headers a .NET NServiceBus sender writes on every message, filled in on every send path.

A message sent from Airflow then looks like one from a .NET endpoint: it has an id, an age (``TimeSent``: the
dashboard, age alerts and the Spark latency use it), an intent, a conversation, an origin. Headers the caller
gives always win; only missing ones are filled.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import headers as h
from . import host

#: ``NServiceBus.MessageIntent`` values.
SEND, PUBLISH, REPLY = "Send", "Publish", "Reply"
ORIGINATING_HOST_ID = "$.diagnostics.originating.hostid"
RELATED_TO = "NServiceBus.RelatedTo"
#: Every header ``standard_headers`` may write.
STANDARD = frozenset({h.MESSAGE_ID, h.MESSAGE_INTENT, h.CONVERSATION_ID, h.CORRELATION_ID, h.ORIGINATING_ENDPOINT,
                      h.ORIGINATING_MACHINE, ORIGINATING_HOST_ID, h.TIME_SENT, RELATED_TO, h.REPLY_TO_ADDRESS,
                      h.CONTENT_TYPE})
#: Endpoint name written as ``NServiceBus.OriginatingEndpoint`` when the transport was given none.
DEFAULT_ENDPOINT = "airflow"


def default_endpoint() -> str:
    """``SQLQUEUE_ENDPOINT`` from the environment, else ``airflow``."""
    return os.environ.get("SQLQUEUE_ENDPOINT") or DEFAULT_ENDPOINT


@dataclass(frozen=True)
class Origin:
    """Where a send comes from.

    :param endpoint: the sending endpoint's name (``NServiceBus.OriginatingEndpoint``).
    :param intent: ``Send``, ``Publish`` or ``Reply``.
    :param reply_to: canonical address replies should go to (a handler's own queue), or None.
    :param incoming: headers of the message being handled when the send is made in a handler: the conversation
        continues and the correlation id follows it, as core does.
    """

    endpoint: str
    intent: str = SEND
    reply_to: str | None = None
    incoming: Mapping[str, str | None] | None = None

    def with_intent(self, intent: str) -> Origin:
        return Origin(self.endpoint, intent, self.reply_to, self.incoming)


def standard_headers(origin: Origin, message_id: str, *, content_type: str | None = None,
                     time_sent: str | None = None) -> dict[str, str]:
    """The headers core writes for one outgoing message (the caller's own headers go on top of these).

    A message that starts a conversation gets a new ConversationId: its own (unique, random) MessageId when that
    is a GUID. ``time_sent`` (wire format) lets a batch share one clock reading.
    """
    incoming = origin.incoming or {}
    conversation = incoming.get(h.CONVERSATION_ID) or (message_id if _is_guid(message_id) else str(uuid.uuid4()))
    out = {
        h.MESSAGE_ID: message_id,
        h.MESSAGE_INTENT: origin.intent,
        h.CONVERSATION_ID: conversation,
        h.CORRELATION_ID: incoming.get(h.CORRELATION_ID) or incoming.get(h.MESSAGE_ID) or message_id,
        h.ORIGINATING_ENDPOINT: origin.endpoint,
        h.ORIGINATING_MACHINE: host.machine_name(),
        ORIGINATING_HOST_ID: host.host_id(),
        h.TIME_SENT: time_sent or h.format_wire_time(),
    }
    if incoming.get(h.MESSAGE_ID):
        out[RELATED_TO] = incoming[h.MESSAGE_ID]  # type: ignore[assignment]
    if origin.reply_to:
        out[h.REPLY_TO_ADDRESS] = origin.reply_to
    if content_type:
        out[h.CONTENT_TYPE] = content_type
    return out


def _is_guid(text: str) -> bool:
    """A GUID in its hyphenated form (the native Ids this provider makes)."""
    return len(text) == 36 and text.count("-") == 4


_MISSING = object()
#: The shape of a wire-format time (``yyyy-MM-dd HH:mm:ss:ffffff Z``): its placeholder has its length.
_WIRE_TIME_SHAPE = "0000-00-00 00:00:00:000000 Z"
_MAX_TEMPLATES = 256
_GIVE_UP_AFTER = 64


class _Template:
    """One set of own headers serialized with placeholders for the native Id and ``TimeSent``; ``current`` holds
    that text for the latest time, split around the Id placeholder (one tuple, replaced whole: safe across
    threads)."""

    __slots__ = ("generic", "id_placeholder", "time_placeholder", "current")

    def __init__(self, generic: str, id_placeholder: str, time_placeholder: str) -> None:
        self.generic = generic
        self.id_placeholder = id_placeholder
        self.time_placeholder = time_placeholder
        self.current: tuple[str, list[str]] = ("", [])

    def fill(self, native_id: str, time_sent: str) -> str:
        at, pieces = self.current
        if at != time_sent:
            pieces = self.generic.replace(self.time_placeholder, time_sent).split(self.id_placeholder)
            self.current = (time_sent, pieces)
        return pieces[0] if len(pieces) == 1 else native_id.join(pieces)


class BatchHeaders:
    """The Headers text of each message sent from one origin, as ``serialize_headers({**standard_headers(...),
    **own})`` writes it, at a fraction of the cost.

    Between two messages the standard headers differ only by the native Id they carry (MessageId, and the
    ConversationId and CorrelationId that default to it) and by ``TimeSent``. So for each distinct content of the
    caller's own headers (and content type) the whole text is serialized and checked once, with a placeholder in
    place of each, and a message's text is that template with its Id and time put in: the same text, the same
    checks (each placeholder has the length of what replaces it, so the size limit holds too; a template whose
    placeholders do not occur exactly where the standard headers put them is not used). A template is made when
    the same own headers come a second time (one message alone costs one serialization), a run of distinct
    headers stops using templates after a few dozen misses, and the templates are forgotten when there are too
    many. One writer may live as long as its origin: a transport keeps one for its own sends, so a series of
    one-message sends reuses the template too.

    :param time_sent: the ``TimeSent`` of every message written (one clock reading for a batch); ``text`` may
        give each call its own instead.
    """

    def __init__(self, origin: Origin, time_sent: str | None = None) -> None:
        self.origin = origin
        self.time_sent = time_sent
        self._id_placeholder = str(uuid.uuid4())
        self._time_placeholder = uuid.uuid4().hex[:len(_WIRE_TIME_SHAPE)]  # no character JSON would escape
        self._templates: dict[tuple[Any, ...], _Template | None] = {}
        self._seen: set[tuple[Any, ...]] = set()
        self._hits = self._misses = 0

    def text(self, own: Mapping[str, str | None], native_id: str, content_type: str | None,
             time_sent: str | None = None) -> str:
        """The serialized headers of one message whose native Id is ``native_id`` (its own headers win)."""
        time_sent = time_sent or self.time_sent or h.format_wire_time()
        if self._misses < _GIVE_UP_AFTER or self._hits > self._misses:
            try:
                key = (tuple(own.items()), content_type)
                template = self._templates.get(key, _MISSING)
            except (AttributeError, TypeError):  # not a mapping, or unhashable values: the slow path explains
                template = None
                key = None
            if template is not _MISSING:
                self._hits += 1
                if template is not None:
                    return template.fill(native_id, time_sent)
            elif key is not None and key not in self._seen and len(self._seen) < _MAX_TEMPLATES:
                self._seen.add(key)  # first sight: serialized directly below; a second one makes the template
            elif key is not None:
                self._misses += 1
                template = self._template(own, content_type)
                if len(self._templates) >= _MAX_TEMPLATES:  # a long-lived writer starts over
                    self._templates.clear()
                    self._seen.clear()
                self._templates[key] = template
                if template is not None:
                    return template.fill(native_id, time_sent)
        return h.serialize_headers({**self._defaults(own, native_id, content_type, time_sent), **own})

    def _defaults(self, own: Mapping[str, str | None], native_id: str, content_type: str | None,
                  time_sent: str) -> dict[str, str]:
        own_id = own.get(h.MESSAGE_ID) if isinstance(own, Mapping) else None
        message_id = own_id if isinstance(own_id, str) and own_id else native_id
        return standard_headers(self.origin, message_id, content_type=content_type, time_sent=time_sent)

    def _template(self, own: Mapping[str, str | None], content_type: str | None) -> _Template | None:
        """The text with both placeholders, or None when a message's text holds more that differs per message (a
        new random ConversationId for an own MessageId that is not a GUID) or a placeholder occurs elsewhere."""
        own_id = own.get(h.MESSAGE_ID)
        if isinstance(own_id, str) and own_id and not _is_guid(own_id) and h.CONVERSATION_ID not in own \
                and not (self.origin.incoming or {}).get(h.CONVERSATION_ID):
            return None
        defaults = self._defaults(own, self._id_placeholder, content_type, self._time_placeholder)
        text = h.serialize_headers({**defaults, **own})
        for placeholder in (self._id_placeholder, self._time_placeholder):
            placed = sum(value == placeholder for key, value in defaults.items() if key not in own)
            if text.count(placeholder) != placed:  # the caller's own headers hold it too: no template
                return None
        return _Template(text, self._id_placeholder, self._time_placeholder)
