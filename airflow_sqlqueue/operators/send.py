"""``SqlQueueSendOperator``: send messages to a queue in one batch (e.g. when a pipeline finishes)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_sqlqueue import lineage, metrics
from airflow_sqlqueue.hooks.sqlqueue import SqlQueueHook

from .base import SqlQueueBaseOperator, rendered_list
from .messages import outgoing_message

if TYPE_CHECKING:
    from airflow.sdk import Context


class SqlQueueSendOperator(SqlQueueBaseOperator):
    """Send messages to a queue in one batch; return their native Ids as strings.

    Give ``messages`` (a list of strings, or of dicts ``{"body", "headers"}``, e.g. another task's output)
    or a single ``body`` (with ``headers``). Delayed messages get their Id when they are due, so they are not
    in the returned list.

    :param queue_name: destination queue (templated).
    :param messages: the messages (templated; an ``XComArg`` such as ``task.output`` is resolved natively).
    :param body: the body of a single message (templated).
    :param headers: headers of the single message (templated).
    :param sqlqueue_conn_id: an ``mssql``, ``odbc``, ``postgres`` or ``sqlite`` connection.
    :param time_to_be_received: seconds (or timedelta) after which an unreceived message expires.
    :param delay: seconds (or timedelta) to wait before the message becomes receivable.
    """

    template_fields: Sequence[str] = ("queue_name", "messages", "body", "headers")
    ui_color = "#eaf0fb"

    def __init__(self, *, queue_name: str, messages: Any = None, body: str | bytes | None = None,
                 headers: dict[str, str] | None = None, sqlqueue_conn_id: str = SqlQueueHook.default_conn_name,
                 time_to_be_received: float | timedelta | None = None, delay: float | timedelta | None = None,
                 **kwargs: Any) -> None:
        super().__init__(sqlqueue_conn_id=sqlqueue_conn_id, **kwargs)
        if messages is None and body is None:
            raise ValueError("give messages= (a list) or body= (one message)")
        if messages is not None and (body is not None or headers is not None):
            raise ValueError("give either messages= or body=/headers=, not both")
        self.queue_name = queue_name
        self.messages = messages
        self.body = body
        self.headers = headers
        self.time_to_be_received = time_to_be_received
        self.delay = delay

    def execute(self, context: Context) -> list[str]:
        if self.messages is not None:
            items = rendered_list(self.messages, "messages")
        else:
            items = [{"body": self.body, "headers": self.headers or {}}]
        outgoing = [outgoing_message(i, time_to_be_received=self.time_to_be_received, delay=self.delay)
                    for i in items]  # all validated before anything is sent
        with self.open_transport() as transport:
            ids = transport.send_many(self.queue_name, outgoing)
            metrics.incr("sent", self.sqlqueue_conn_id, transport.name(self.queue_name), len(outgoing))
        self.log.info("sent %d messages to %s (%d delayed)", len(outgoing), self.queue_name, len(outgoing) - len(ids))
        return [str(i) for i in ids]

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the queue table out."""
        return lineage.operator_lineage([], [lineage.queue_dataset(self.get_hook(), self.queue_name)])
