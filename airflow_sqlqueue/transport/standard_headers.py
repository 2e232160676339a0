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
