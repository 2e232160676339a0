"""Plug-in for the ``common.messaging`` provider: ``MessageQueueTrigger(scheme="sqlqueue", ...)``.

Usage::

    MessageQueueTrigger(scheme="sqlqueue", conn_id="sqlqueue_default", queue_name="orders")

builds a ``SqlQueueMessageTrigger`` with the other keyword arguments. Both forms of ``common.messaging`` work:

- 2.1: ``queue`` is the (deprecated) broker queue URI, ``trigger_queue`` the triggerer queue.
- 2.2: beside ``scheme``, ``queue`` names the triggerer queue (``MessageQueueTrigger(scheme="sqlqueue",
  queue="fast", ...)``), unless it is a broker queue URI: a value this provider's ``queue_matches`` accepts or any
  value with ``://``. The URI form ``MessageQueueTrigger(queue="sqlqueue://sqlqueue_default/orders")`` is still
  read as before (deprecated upstream).

So ``queue_matches`` accepts only values that start with ``sqlqueue://``, never a plain name: a triggerer queue
called ``sqlqueue`` or ``orders`` stays a triggerer queue on 2.2.
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
URI_PREFIX = SCHEME + "://"


def parse_queue_uri(queue: str) -> tuple[str, str] | None:
    """``sqlqueue://CONN_ID/QUEUE`` (percent-encoding allowed) to ``(conn_id, queue_name)``, or None if it is not
    one (another scheme, no connection or no queue part, a query or fragment)."""
    if not isinstance(queue, str) or not queue.startswith(URI_PREFIX):
        return None
    parts = urlsplit(queue)
    conn_id, queue_name = unquote(parts.netloc), unquote(parts.path[1:] if parts.path.startswith("/") else "")
    if not conn_id or not queue_name or parts.query or parts.fragment:
        return None
    return conn_id, queue_name


class SqlQueueMessageQueueProvider(BaseMessageQueueProvider):
    """SQL queue tables for ``MessageQueueTrigger``: scheme ``sqlqueue``, or queue URIs ``sqlqueue://CONN_ID/QUEUE``."""

    scheme = SCHEME

    def trigger_class(self) -> type[SqlQueueMessageTrigger]:
        return SqlQueueMessageTrigger

    def queue_matches(self, queue: str) -> bool:
        """A broker queue URI of this provider (``sqlqueue://CONN_ID/QUEUE``). A malformed ``sqlqueue://`` URI
        matches too, so that ``trigger_kwargs`` says what is wrong with it instead of another provider's error."""
        return isinstance(queue, str) and queue.startswith(URI_PREFIX)

    def trigger_kwargs(self, queue: str, **kwargs: Any) -> dict[str, Any]:
        """``conn_id`` and ``queue_name`` from the URI, left out when the caller passes the same value itself.

        ``MessageQueueTrigger`` passes its other keyword arguments to the trigger beside these, so a ``conn_id`` or
        ``queue_name`` given both ways would be a duplicate argument; a different value is refused.
        """
        parsed = parse_queue_uri(queue)
        if parsed is None:
            raise ValueError(f"queue URI {queue!r} must look like sqlqueue://CONN_ID/QUEUE_NAME (percent-encode "
                             "'@', '/', '?' and '#' in the queue part)")
        derived = dict(zip(("conn_id", "queue_name"), parsed, strict=True))
        for key, value in derived.items():
            if key in kwargs and kwargs[key] != value:
                raise ValueError(f"queue URI {queue!r} gives {key}={value!r} but {key}={kwargs[key]!r} was passed "
                                 "too; give it once")
        return {key: value for key, value in derived.items() if key not in kwargs}
