"""``SqlQueuePublishOperator``: publish an event to every queue subscribed to it (native publish/subscribe)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_sqlqueue import lineage, metrics
from airflow_sqlqueue.hooks.sqlqueue import SqlQueueHook
from airflow_sqlqueue.transport import OutgoingMessage
from airflow_sqlqueue.transport.operations.pubsub import DEFAULT_SUBSCRIPTION_TABLE

from .base import SqlQueueBaseOperator
from .messages import outgoing_message

if TYPE_CHECKING:
    from airflow.sdk import Context


class SqlQueuePublishOperator(SqlQueueBaseOperator):
    """Publish an event, as a .NET endpoint publishes it: one copy to each queue subscribed (in the subscription
    table .NET endpoints share) to the event type or one of its base types, all in one transaction.

    Returns ``{"message_id", "topics", "sent"}`` (``sent``: native Id of each copy by queue).

    :param event_type: the event's .NET full type name, e.g. ``Sales.OrderPlaced`` (templated).
    :param body: the event body (templated); a dict or list is sent as JSON.
    :param headers: extra headers (templated); they win over the standard ones.
    :param base_types: the event's base classes and interfaces (.NET full names) whose subscribers get it too.
    :param content_type: ``NServiceBus.ContentType`` (default ``application/json`` for a dict or list body).
    :param endpoint: the endpoint name written as ``NServiceBus.OriginatingEndpoint`` (default: the DAG id).
    :param subscription_table: the subscription table (default ``SubscriptionRouting``).
    :param time_to_be_received: seconds (or timedelta) after which an unreceived copy expires.
    :param sqlqueue_conn_id: an ``mssql``, ``odbc``, ``postgres`` or ``sqlite`` connection.
    """

    template_fields: Sequence[str] = ("event_type", "body", "headers", "base_types")
    ui_color = "#e8f4ea"

    def __init__(self, *, event_type: str, body: Any = b"", headers: dict[str, str] | None = None,
                 base_types: Sequence[str] = (), content_type: str | None = None, endpoint: str | None = None,
                 subscription_table: str = DEFAULT_SUBSCRIPTION_TABLE,
                 time_to_be_received: float | timedelta | None = None,
                 sqlqueue_conn_id: str = SqlQueueHook.default_conn_name, **kwargs: Any) -> None:
        super().__init__(sqlqueue_conn_id=sqlqueue_conn_id, **kwargs)
        self.event_type = event_type
        self.body = body
        self.headers = headers
        self.base_types = base_types
        self.content_type = content_type
        self.endpoint = endpoint
        self.subscription_table = subscription_table
        self.time_to_be_received = time_to_be_received

    def get_hook(self) -> SqlQueueHook:
        return SqlQueueHook(self.sqlqueue_conn_id, error_queue=self.error_queue,
                            endpoint=self.endpoint or self.dag_id, subscription_table=self.subscription_table)

    def execute(self, context: Context) -> dict[str, Any]:
        body, content_type = self.body, self.content_type
        if isinstance(body, dict | list):
            body, content_type = json.dumps(body), content_type or "application/json"
        item = outgoing_message({"body": body, "headers": self.headers or {}},
                                time_to_be_received=self.time_to_be_received)
        message = OutgoingMessage(item.body, item.headers, item.time_to_be_received, content_type=content_type)
        base_types = [self.base_types] if isinstance(self.base_types, str) else list(self.base_types or ())
        with self.open_transport() as transport:
            result = transport.publish(self.event_type, message, base_types=base_types)
        self._published = sorted(result.sent)
        for queue in result.sent:
            metrics.incr("published", self.sqlqueue_conn_id, queue)
        self.log.info("published %s to %d subscribed queues: %s", self.event_type, len(result.sent),
                      ", ".join(result.sent) or "none")
        return result.as_dict()

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the queue tables the event was written to (the subscribers found when it ran)."""
        hook = self.get_hook()
        return lineage.operator_lineage([], [lineage.queue_dataset(hook, q) for q in getattr(self, "_published", [])])
