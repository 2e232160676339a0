"""Outgoing messages to rows: checked, given their native Ids, and written with as few statements as possible.

Every send path (``SqlQueueTransport.send``/``send_many``, sends made by handlers in every transaction mode,
the operators and the command line) goes through ``Outbox.prepare`` and ``Outbox.write``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..common.errors import SendOutcomeUnknownError
from ..common.redaction import first_line
from ..tables.queue import QueueBook, TableQueue
from ..wire import headers as h
from ..wire.ids import id_stream, new_id
from ..wire.messages import OutgoingMessage
from ..wire.standard_headers import BatchHeaders, Origin, default_endpoint

#: Headers writers an outbox keeps (one per origin: endpoint, intent, reply-to address).
_MAX_WRITERS = 32


@dataclass
class PreparedSend:
    """Messages for one destination, checked and ready to write.

    ``rows`` are immediate messages (``id``, ``headers``, ``body``, ``ttbr_ms``), ``delayed`` the ones that wait in
    the ``.Delayed`` table of ``store`` (``headers`` with the forward destination, ``body``, ``delay_ms``).
    """

    queue: TableQueue
    store: TableQueue
    rows: list[dict[str, Any]] = field(default_factory=list)
    delayed: list[dict[str, Any]] = field(default_factory=list)
    ids: list[uuid.UUID] = field(default_factory=list)


class Outbox:
    """Prepares and writes sends for the queues of one transport."""

    def __init__(self, book: QueueBook) -> None:
        self.book = book
        self.dialect = book.dialect
        #: Where sends made outside a handler come from (the transport's endpoint name).
        self.origin = Origin(book.endpoint or default_endpoint())
        self._writers: dict[Origin, BatchHeaders] = {}  # per origin outside a handler: kept across sends
        self._own_writer = BatchHeaders(self.origin)  # this transport's own sends (most sends): no lookup
        #: The send without Expires where the dialect has one (SQLite: one value less to bind and store).
        self._send_untimed = "send_untimed" if "send_untimed" in self.dialect.statements else "send"
        probe = uuid.UUID(int=0)
        self._ids_as_text = self.dialect.id_param(probe) == str(probe)  # then the header's Id text is bound as is

    def prepare(self, queue: str | TableQueue, messages: Iterable[OutgoingMessage | bytes | str], *,
                endpoint: str | TableQueue | None = None, origin: Origin | None = None,
                raw: bool = False) -> PreparedSend:
        """Check every message (nothing is written when one is bad), fill in the standard headers a .NET sender
        writes (the message's own headers win) and give immediate ones their native Id, which is also their
        ``NServiceBus.MessageId`` unless they set one.

        :param endpoint: for delayed messages, the endpoint whose ``.Delayed`` table stores them (default: the
            destination queue itself).
        :param origin: who sends (a handler's context passes the message it handles); default: this transport.
        :param raw: write the messages' headers as given, without standard headers (control messages).
        """
        target = self.book.queue(queue)
        prepared = PreparedSend(target, self.book.queue(endpoint) if endpoint is not None else target)
        time_sent = h.format_wire_time()  # one clock reading for the batch
        writer = None if raw else self._own_writer if origin is None else self._writer(origin)
        id_param = None if self._ids_as_text else self.dialect.id_param
        rows, delayed, ids = prepared.rows, prepared.delayed, prepared.ids
        # one message (a list of one: send()) takes one Id; a batch draws them in blocks
        next_id = new_id if type(messages) is list and len(messages) == 1 else id_stream().__next__
        for item in messages:
            message = item if isinstance(item, OutgoingMessage) else OutgoingMessage(body=item)
            if message.delay is not None:
                message = _forwarding(message, target.wire)
            if message.time_to_be_received is None and message.delay is None:  # timing_ms(), inline
                ttbr_ms = delay_ms = None
            else:
                ttbr_ms, delay_ms = message.timing_ms()
            message_id = next_id()
            hex_id = "%032x" % message_id.int  # noqa: UP031 - str(message_id) inline; no format-spec parser
            id_text = f"{hex_id[:8]}-{hex_id[8:12]}-{hex_id[12:16]}-{hex_id[16:20]}-{hex_id[20:]}"
            own = message.headers
            if writer is None or not (type(own) is dict or isinstance(own, Mapping)):
                headers_text = h.serialize_headers(own)  # raw, or the clear error for a non-mapping
            else:  # the MessageId the message ends up with (its own, else the native Id) correlates it
                headers_text = writer.text(own, id_text, message.content_type, time_sent)
            body = message.body
            if type(body) is not bytes:
                body = message.body_bytes()
                if body is None:
                    body = b""  # a NULL body stops .NET PostgreSQL receivers and ServiceControl's import
            if delay_ms is not None:
                delayed.append({"headers": headers_text, "body": body, "delay_ms": delay_ms})
                continue
            ids.append(message_id)
            rows.append({"id": id_text if id_param is None else id_param(message_id), "headers": headers_text,
                         "body": body, "ttbr_ms": ttbr_ms})
        return prepared

    def _writer(self, origin: Origin) -> BatchHeaders:
        """The headers writer of ``origin``: kept across sends (so a series of one-message sends reuses its
        templates) unless it sends from a handler, whose incoming message makes each origin different."""
        if origin.incoming is not None:
            return BatchHeaders(origin)
        writer = self._writers.get(origin)
        if writer is None:
            if len(self._writers) >= _MAX_WRITERS:
                self._writers.clear()
            writer = self._writers[origin] = BatchHeaders(origin)
        return writer

    def write(self, cursor: Any, prepared: PreparedSend) -> list[uuid.UUID]:
        """Write prepared messages in the transaction of ``cursor``: one statement for the immediate ones, one for
        the delayed ones. Returns the native Ids of the immediate ones."""
        if prepared.rows:
            if len(prepared.rows) == 1:
                row = prepared.rows[0]  # through the dialect's execute: SQL Server picks its variant for old tables
                name = "send" if row["ttbr_ms"] is not None else self._send_untimed
                prepared.queue.run(cursor, name, row)
            else:
                self.dialect.send_many(cursor, prepared.queue.address, prepared.rows)
        if prepared.delayed:
            self.dialect.executemany(cursor, "send_delayed", prepared.delayed, **prepared.store.ids)
        return prepared.ids

    def one_statement(self, prepared: PreparedSend) -> bool:
        """Whether ``write`` runs exactly one statement for ``prepared`` on a database where such a statement
        may run in autocommit (one message, or one batch where ``send_many`` is one statement)."""
        if not self.dialect.autocommit_statements:
            return False
        rows, delayed = len(prepared.rows), len(prepared.delayed)
        if delayed:
            return rows == 0 and delayed == 1
        return rows == 1 or (rows > 1 and self.dialect.send_many_is_one_statement)

    def outcome_unknown(self, prepared: PreparedSend, exc: BaseException) -> SendOutcomeUnknownError:
        """The error of a one-statement send whose connection was lost after the statement left."""
        count = len(prepared.rows) + len(prepared.delayed)
        ids = ", ".join(map(str, prepared.ids[:5])) + (", ..." if len(prepared.ids) > 5 else "")
        return SendOutcomeUnknownError(
            f"the connection was lost while sending {count} message(s) to {prepared.queue.name!r} "
            f"({first_line(exc)}): they may or may not be in the queue, and were not sent again (that could send "
            f"them twice). " + (f"Look for the native Id(s) {ids} in the queue (a receiver may have taken them "
                                "already) or accept a possible duplicate before sending again"
                                if prepared.ids else "Check the delayed store before sending again"),
            prepared.ids, prepared.queue.name)

    def write_delayed_copy(self, cursor: Any, queue: TableQueue, headers: dict[str, str | None], body: bytes | None,
                           seconds: float) -> None:
        """Store a received message in its own queue's ``.Delayed`` table, due in ``seconds`` (delayed retries).

        Unlike a new send, no size limit applies: the message was accepted once already.
        """
        forward = {**headers, h.FORWARD_DESTINATION: queue.wire}
        self.dialect.execute(cursor, "send_delayed", {"headers": h.serialize_headers(forward, limit=None),
                                                      "body": b"" if body is None else body,
                                                      "delay_ms": max(1, round(seconds * 1000))}, **queue.ids)

    def require_destinations(self, cursor: Any, prepared: PreparedSend) -> None:
        """Raise QueueNotFoundError now if a destination (or the delayed table it needs) does not exist."""
        self.book.require(cursor, prepared.queue)
        if prepared.delayed:
            self.book.require(cursor, self.dialect.delayed_address(prepared.store.address))


def _forwarding(message: OutgoingMessage, destination: str) -> OutgoingMessage:
    """A delayed message whose forward header names its destination, whatever the caller set."""
    if not isinstance(message.headers, Mapping):
        return message  # refused with a clear error by validated()
    return replace(message, headers={**message.headers, h.FORWARD_DESTINATION: destination})
