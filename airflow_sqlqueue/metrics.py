"""Queue metrics through Airflow's own metrics client (StatsD, DogStatsD or OpenTelemetry, as ``[metrics]`` says).

Two name forms, chosen by the client the deployment configured (the order Airflow itself checks):

- plain StatsD (``statsd_on``) keeps no tags, so the name carries the queue: ``sqlqueue.<metric>.<conn_id>.<queue>``
  (dots and other characters StatsD reads as structure become ``__`` or ``_``);
- DogStatsD (``statsd_datadog_enabled``) and OpenTelemetry (``otel_on``) keep tags, so the name is
  ``sqlqueue.<metric>`` and the tags (OTel attributes) ``conn_id`` and ``queue`` say which queue.

Airflow prefixes the name with ``[metrics] statsd_prefix`` or ``otel_prefix`` (``airflow``). The metrics, their
kinds and emitters are listed in docs/metrics.md (:data:`METRICS` is the same list, checked by the tests).

The client is Airflow's public one, ``airflow.sdk.observability.stats`` (the import Airflow documents for
custom metrics from tasks, plugins and operators). Airflow sets it up from ``[metrics]`` when the task SDK's
serialisation module loads, which importing this client does in any process (the triggerer, the API server, a
``dag.test()`` process), and again at the start of each task. No private Airflow module is imported. A metric
that cannot be sent is dropped (and logged at debug level); it never fails the work it describes.
"""

from __future__ import annotations

import logging
import re
from types import ModuleType

log = logging.getLogger(__name__)
PREFIX = "sqlqueue"
_UNSAFE = re.compile(r"[^A-Za-z0-9_\-]")

#: Every metric: name -> (kind, what it counts). Counters are per run of the emitter; gauges per sample.
METRICS: dict[str, tuple[str, str]] = {
    "queue_depth": ("gauge", "messages in the queue (depth estimate)"),
    "oldest_message_age_seconds": ("gauge", "seconds since the oldest message was sent"),
    "error_queue_size": ("gauge", "rows in the error queue (exact count)"),
    "throughput_per_minute": ("gauge", "messages sent to the queue per minute between two health samples"),
    "drained": ("counter", "messages delivered by a drain"),
    "processed": ("counter", "messages a handler processed"),
    "failed": ("counter", "messages moved to the error queue by a handler drain"),
    "sent": ("counter", "messages sent"),
    "published": ("counter", "copies of a published event, per subscribed queue"),
    "retried": ("counter", "failed messages returned to their queue"),
    "archived": ("counter", "failed messages archived to Parquet and deleted from the error queue"),
    "archive_restored": ("counter", "archived messages put back into the error queue"),
    "trigger_events": ("counter", "trigger events emitted"),
    "trigger_messages": ("counter", "messages carried by the events of the message trigger"),
    "trigger_refused": ("counter", "messages the message trigger's filter moved to the error queue"),
}


def _part(text: str) -> str:
    return _UNSAFE.sub("_", text.replace(".", "__"))[:100] or "_"


def name(metric: str, conn_id: str, queue: str) -> str:
    """The plain-StatsD name of a per-queue metric: ``sqlqueue.<metric>.<conn_id>.<queue>`` made name-safe."""
    return f"{PREFIX}.{metric}.{_part(conn_id)}.{_part(queue)}"


def tagged_name(metric: str) -> str:
    """The name for clients that keep tags (OpenTelemetry, DogStatsD): ``sqlqueue.<metric>``."""
    return f"{PREFIX}.{metric}"


def gauge(metric: str, conn_id: str, queue: str, value: float) -> None:
    """Set a per-queue gauge."""
    _emit("gauge", metric, conn_id, queue, value)


def incr(metric: str, conn_id: str, queue: str, count: int = 1) -> None:
    """Add to a per-queue counter (nothing for 0)."""
    if count:
        _emit("incr", metric, conn_id, queue, count)


def keeps_tags() -> bool:
    """Whether the configured client keeps tags (DogStatsD, OpenTelemetry): then the name does not carry the queue.

    Same order as Airflow's ``get_stats_factory``: DogStatsD, then StatsD, then OpenTelemetry.
    """
    from airflow.sdk.configuration import conf

    if conf.getboolean("metrics", "statsd_datadog_enabled", fallback=False):
        return True
    if conf.getboolean("metrics", "statsd_on", fallback=False):
        return False
    return conf.getboolean("metrics", "otel_on", fallback=False)


def stats_module() -> ModuleType:
    """Airflow's public metrics client module (``airflow.sdk.observability.stats``), set up by Airflow."""
    from airflow.sdk.observability import stats

    return stats


def _emit(kind: str, metric: str, conn_id: str, queue: str, value: float) -> None:
    try:
        stats = stats_module()
        tags = {"conn_id": conn_id, "queue": queue}
        stat = tagged_name(metric) if keeps_tags() else name(metric, conn_id, queue)
        if kind == "gauge":
            stats.gauge(stat, value, tags=tags)
        else:
            stats.incr(stat, count=int(value), tags=tags)
    except Exception as exc:  # noqa: BLE001 - metrics never fail the work they describe
        log.debug("metric %s for %s/%s not sent: %s", metric, conn_id, queue, exc)
