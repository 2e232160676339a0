"""Queue metrics through Airflow's own metrics client (StatsD or OpenTelemetry, whichever the deployment set up).

Every metric is named ``sqlqueue.<metric>.<conn_id>.<queue>`` (plain StatsD keeps no tags: the name carries the
queue; dots and other characters StatsD reads as structure become ``__`` or ``_``) and tagged ``conn_id`` and
``queue`` for backends that keep tags. Airflow prefixes them with ``[metrics] statsd_prefix`` (``airflow``).

| metric | kind | emitted by |
|---|---|---|
| ``queue_depth`` | gauge | the queue-health DAG (each queue) |
| ``oldest_message_age_seconds`` | gauge | the queue-health DAG (queues with a TimeSent on their oldest message) |
| ``error_queue_size`` | gauge | the queue-health DAG (the error queue of each connection, exact count) |
| ``drained`` | counter | ``SqlQueueDrainOperator`` to a list or Parquet: messages delivered |
| ``processed``, ``failed`` | counters | ``SqlQueueDrainOperator`` with a handler: handled, moved to the error queue |
| ``sent`` | counter | ``SqlQueueSendOperator``: messages sent |
| ``retried`` | counter | ``SqlQueueBatchRetryOperator``: messages returned, per target queue |
| ``archived`` | counter | ``SqlQueueArchiveFailedOperator``, the archive DAG and the page: messages archived |
| ``archive_restored`` | counter | ``SqlQueueRestoreArchiveOperator``: messages put back |
| ``trigger_events`` | counter | ``SqlQueueTrigger``: events emitted |

A metric that cannot be sent is dropped (the metrics client logs it); it never fails the task.
"""

from __future__ import annotations

import logging
import re

log = logging.getLogger(__name__)
PREFIX = "sqlqueue"
_UNSAFE = re.compile(r"[^A-Za-z0-9_\-]")


def _part(text: str) -> str:
    return _UNSAFE.sub("_", text.replace(".", "__"))[:100] or "_"


def name(metric: str, conn_id: str, queue: str) -> str:
    """The StatsD name of a per-queue metric: ``sqlqueue.<metric>.<conn_id>.<queue>`` made name-safe."""
    return f"{PREFIX}.{metric}.{_part(conn_id)}.{_part(queue)}"


def gauge(metric: str, conn_id: str, queue: str, value: float) -> None:
    """Set a per-queue gauge."""
    _emit("gauge", metric, conn_id, queue, value)


def incr(metric: str, conn_id: str, queue: str, count: int = 1) -> None:
    """Add to a per-queue counter (nothing for 0)."""
    if count:
        _emit("incr", metric, conn_id, queue, count)


def _emit(kind: str, metric: str, conn_id: str, queue: str, value: float) -> None:
    try:
        from airflow.sdk.observability import stats

        tags = {"conn_id": conn_id, "queue": queue}
        if kind == "gauge":
            stats.gauge(name(metric, conn_id, queue), value, tags=tags)
        else:
            stats.incr(name(metric, conn_id, queue), count=int(value), tags=tags)
    except Exception as exc:  # noqa: BLE001 - metrics never fail the work they describe
        log.debug("metric %s for %s/%s not sent: %s", metric, conn_id, queue, exc)
