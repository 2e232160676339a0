"""Throughput of each queue: messages sent per minute, from the identity (seq, RowVersion) between two health runs.

Each health sample reads the queue's **sent position**, the last identity value the database handed out
(:meth:`SqlQueueTransport.sent_position`). Receives never lower it, so the difference between two samples is the
number of messages sent in between, however many were received: a queue that drains reads as its send rate, never
as a negative number (the change of depth, the dashboard's net flow, is what mixes the two).

The previous position of every queue is kept in the Airflow Variable ``sqlqueue_health_positions`` (JSON
``{conn_id: {queue: [position, unix time]}}``), written by the health DAG's report task (one run at a time). A
position lower than the previous one (the table was dropped and created again) gives no figure for that run.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from airflow.sdk import Variable

from airflow_sqlqueue import metrics

log = logging.getLogger(__name__)

#: The Airflow Variable holding the last sent position of each queue.
VARIABLE = "sqlqueue_health_positions"


def per_minute(before: tuple[int, float], after: tuple[int, float]) -> float | None:
    """Messages sent per minute between two ``(position, unix time)`` readings; None when unknown.

    Unknown: no time passed, or the position went down (the table was created again). Never negative.
    """
    (first, then), (last, now) = before, after
    minutes = (now - then) / 60
    if minutes <= 0 or last < first:
        return None
    return round((last - first) / minutes, 2)


def update(samples: Sequence[dict[str, Any]], stored: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Each sample with ``throughput_per_minute`` (from ``stored``), and the positions to store for next time.

    A sample without ``sent_position`` (an empty queue never sent to, or a reading that failed) gets None and
    keeps the stored position.
    """
    positions = {conn: dict(queues) for conn, queues in stored.items() if isinstance(queues, dict)}
    out = []
    for item in samples:
        position, at = item.get("sent_position"), item.get("sampled_at")
        rate = None
        if position is not None and at is not None:
            queues = positions.setdefault(item["conn_id"], {})
            previous = queues.get(item["queue"])
            if isinstance(previous, list) and len(previous) == 2:
                rate = per_minute((int(previous[0]), float(previous[1])), (int(position), float(at)))
            queues[item["queue"]] = [int(position), float(at)]
        out.append({**item, "throughput_per_minute": rate})
    return out, positions


def record_throughput(samples: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`update` against the Variable, emit ``throughput_per_minute`` per queue, store the new positions.

    A failure to read or write the Variable is logged and gives no figures; it never fails the health run.
    """
    if all(s.get("sent_position") is None for s in samples):  # nothing to compare (samples of an older version)
        return list(samples)
    try:
        stored = Variable.get(VARIABLE, default=None, deserialize_json=True) or {}
    except Exception as exc:  # noqa: BLE001 - throughput is an extra of the health run
        log.warning("cannot read the Variable %s (%s): no throughput this run", VARIABLE, exc)
        return [{**s, "throughput_per_minute": None} for s in samples]
    found, positions = update(samples, stored if isinstance(stored, dict) else {})
    for item in found:
        if item["throughput_per_minute"] is not None:
            metrics.gauge("throughput_per_minute", item["conn_id"], item["queue"], item["throughput_per_minute"])
    try:
        Variable.set(VARIABLE, positions, serialize_json=True)
    except Exception as exc:  # noqa: BLE001
        log.warning("cannot store the sent positions in the Variable %s: %s", VARIABLE, exc)
    return found

