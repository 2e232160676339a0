"""Plug-in for the ``common.messaging`` provider: ``MessageQueueTrigger(scheme="sqlqueue", ...)``.

Usage::

    MessageQueueTrigger(scheme="sqlqueue", conn_id="sqlqueue_default", queue_name="orders")

builds a ``SqlQueueMessageTrigger`` with the other keyword arguments. The deprecated queue-URI form
``MessageQueueTrigger(queue="sqlqueue://sqlqueue_default/orders")`` works too.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

from airflow.sdk.exceptions import AirflowOptionalProviderFeatureException

try:
    from airflow.providers.common.messaging.providers.base_provider import BaseMessageQueueProvider
except ImportError as exc:  # pragma: no cover - the provider is optional
    raise AirflowOptionalProviderFeatureException(
        "SqlQueueMessageQueueProvider needs apache-airflow-providers-common-messaging") from exc

from airflow_sqlqueue.triggers.sqlqueue import SqlQueueMessageTrigger

SCHEME = "sqlqueue"


class SqlQueueMessageQueueProvider(BaseMessageQueueProvider):
    """SQL queue tables for ``MessageQueueTrigger``: scheme ``sqlqueue``, or queue URIs ``sqlqueue://CONN_ID/QUEUE``."""

    scheme = SCHEME

    def trigger_class(self) -> type[SqlQueueMessageTrigger]:
        return SqlQueueMessageTrigger

    def queue_matches(self, queue: str) -> bool:
        return isinstance(queue, str) and queue.startswith(SCHEME + "://")

    def trigger_kwargs(self, queue: str, **kwargs: Any) -> dict[str, Any]:
        """``sqlqueue://CONN_ID/QUEUE`` to ``conn_id`` and ``queue_name`` (percent-encoding allowed)."""
        parts = urlsplit(queue)
        conn_id, queue_name = unquote(parts.netloc), unquote(parts.path.lstrip("/"))
        if not conn_id or not queue_name:
            raise ValueError(f"queue URI {queue!r} must look like sqlqueue://CONN_ID/QUEUE_NAME")
        return {"conn_id": conn_id, "queue_name": queue_name}
