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
_MAX_TEMPLATES = 256
_GIVE_UP_AFTER = 64


class BatchHeaders:
    """The Headers text of each message of one send, as ``serialize_headers({**standard_headers(...), **own})``
    writes it, at a fraction of the cost for a batch.

    Within a send the standard headers differ between two messages only by the native Id they carry
    (MessageId, and the ConversationId and CorrelationId that default to it). So for each distinct content of the
    caller's own headers (and content type) the whole text is serialized and checked once, with a placeholder
    GUID in place of the Id, and each message's text is that template joined around its Id: the same text, the
    same checks (the placeholder has the Id's length, so the size limit holds too). A template is made when the
    same own headers come a second time (a send of one message costs one serialization), and a batch whose
    headers are all different stops using templates after a few dozen misses.
    """

    def __init__(self, origin: Origin, time_sent: str) -> None:
        self.origin = origin
        self.time_sent = time_sent
        self._placeholder = ""
        self._templates: dict[tuple[Any, ...], list[str] | None] = {}
        self._seen: set[tuple[Any, ...]] = set()
        self._hits = self._misses = 0

    def text(self, own: Mapping[str, str | None], native_id: str, content_type: str | None) -> str:
        """The serialized headers of one message whose native Id is ``native_id`` (its own headers win)."""
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
                    return template[0] if len(template) == 1 else native_id.join(template)
            elif key is not None and key not in self._seen and len(self._seen) < _MAX_TEMPLATES:
                self._seen.add(key)  # first sight: serialized directly below; a second one makes the template
            elif key is not None:
                self._misses += 1
                template = self._template(own, content_type)
                if len(self._templates) < _MAX_TEMPLATES:
                    self._templates[key] = template
                if template is not None:
                    return template[0] if len(template) == 1 else native_id.join(template)
        return h.serialize_headers({**self._defaults(own, native_id, content_type), **own})

    def _defaults(self, own: Mapping[str, str | None], native_id: str, content_type: str | None) -> dict[str, str]:
        own_id = own.get(h.MESSAGE_ID) if isinstance(own, Mapping) else None
        message_id = own_id if isinstance(own_id, str) and own_id else native_id
        return standard_headers(self.origin, message_id, content_type=content_type, time_sent=self.time_sent)

    def _template(self, own: Mapping[str, str | None], content_type: str | None) -> list[str] | None:
        """The text split around the placeholder Id, or None when a message's text holds more than its Id that
        differs per message (a new random ConversationId for an own MessageId that is not a GUID)."""
        own_id = own.get(h.MESSAGE_ID)
        if isinstance(own_id, str) and own_id and not _is_guid(own_id) and h.CONVERSATION_ID not in own \
                and not (self.origin.incoming or {}).get(h.CONVERSATION_ID):
            return None
        if not self._placeholder:
            self._placeholder = str(uuid.uuid4())
        text = h.serialize_headers({**self._defaults(own, self._placeholder, content_type), **own})
        return text.split(self._placeholder)
