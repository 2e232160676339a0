"""The summary of a run: counts per message type and end-to-end latency (time sent to receipt by the drain)."""

from __future__ import annotations

import json
import os
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from .columns import BODY_KINDS

#: Relative accuracy of the percentiles (exact below this many values per group).
PERCENTILE_ACCURACY = 10_000
#: Latencies as exact decimals for the average: whole microseconds, up to ~30,000 years.
_EXACT_MS = "decimal(24,3)"


def _aggregates() -> list[Column]:
    latency = F.col("latency_ms")
    return [F.count(F.lit(1)).alias("count"),
            F.sum("deliveries").alias("input_rows"),
            F.count(latency).alias("with_latency"),
            F.min(latency).alias("min"),
            # an exact (decimal) sum: the same average whatever the partitioning (a double sum depends on its order)
            F.avg(latency.cast(_EXACT_MS)).alias("avg"),
            F.percentile_approx(latency, [0.5, 0.95], PERCENTILE_ACCURACY).alias("pct"),
            F.max(latency).alias("max"),
            F.array_sort(F.collect_set(F.col("date").cast("string"))).alias("dates"),
            *[F.count_if(F.col("body_kind") == kind).alias(f"kind_{kind}") for kind in BODY_KINDS]]


def _latency(row: Any) -> dict[str, float | None]:
    pct = row["pct"] or [None, None]
    values = {"min": row["min"], "avg": row["avg"], "p50": pct[0], "p95": pct[1], "max": row["max"]}
    return {k: (None if v is None else round(float(v), 3)) for k, v in values.items()}


def summarize(messages: DataFrame) -> dict[str, Any]:
    """Counts and latency (ms) overall and per ``message_type``, as a JSON-serialisable dict (one Spark job).

    ``messages`` are the output of ``columns.messages``; ``input_rows`` counts the drained rows read, and
    ``duplicates_removed`` what deduplication dropped. Messages without a readable ``NServiceBus.TimeSent``
    count, but have no latency (``without_time_sent``).
    """
    rows = messages.rollup("message_type").agg(*_aggregates()).collect()
    total = next((r for r in rows if r["message_type"] is None), None)
    types = sorted((r for r in rows if r["message_type"] is not None), key=lambda r: (-r["count"], r["message_type"]))
    count = int(total["count"]) if total else 0
    input_rows = int(total["input_rows"] or 0) if total else 0
    return {
        "input_rows": input_rows,
        "messages": count,
        "duplicates_removed": input_rows - count,
        "without_time_sent": count - (int(total["with_latency"]) if total else 0),
        "latency_ms": _latency(total) if total else _latency({"pct": None, "min": None, "avg": None, "max": None}),
        "types": {r["message_type"]: {"count": r["count"], "latency_ms": _latency(r)} for r in types},
        "body_kinds": {kind: int(total[f"kind_{kind}"]) if total else 0 for kind in BODY_KINDS},
        "dates": list(total["dates"]) if total else [],
    }


def is_local(path: str) -> bool:
    """Whether ``path`` is on the local file system (no URL scheme, or ``file:``)."""
    return "://" not in path or path.startswith("file:")


def local_path(path: str) -> str:
    """``path`` without a ``file:`` prefix."""
    for prefix in ("file://", "file:"):
        if path.startswith(prefix):
            return path[len(prefix):]
    return path


def write_summary(messages: DataFrame, summary: dict[str, Any], output: str) -> str:
    """Store the summary as ``<output>/summary.json``: a file locally, a one-line text dataset elsewhere."""
    target = f"{output.rstrip('/')}/summary.json"
    text = json.dumps(summary, sort_keys=True)
    if is_local(target):
        path = local_path(target)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text + "\n")
        return path
    spark = messages.sparkSession
    spark.createDataFrame([(text,)], "value string").coalesce(1).write.mode("overwrite").text(target)
    return target


def read_summary(output: str) -> dict[str, Any]:
    """The summary stored by ``write_summary`` under a local ``output`` folder."""
    path = os.path.join(local_path(output), "summary.json")
    if os.path.isdir(path):
        parts = sorted(p for p in os.listdir(path) if p.startswith("part-"))
        path = os.path.join(path, parts[0])
    with open(path, encoding="utf-8") as f:
        return json.loads(f.read())
