"""The summary of a run: counts per message type and end-to-end latency (time sent to receipt by the drain)."""

from __future__ import annotations

import json
import os
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from . import columns
from .columns import BODY_KINDS

#: Relative accuracy of the percentiles (exact below this many values per group).
PERCENTILE_ACCURACY = 10_000
#: Latencies as exact decimals for the average: whole microseconds, up to ~30,000 years.
_EXACT_MS = "decimal(24,3)"


#: The groupings of one summary pass: every message, per type, per endpoint, per UTC date.
_GROUPINGS = ("all", "type", "endpoint", "date")


def _aggregates() -> list[Column]:
    latency = F.col("latency_ms")
    return [F.count(F.lit(1)).alias("count"),
            F.sum("deliveries").alias("input_rows"),
            F.count(latency).alias("with_latency"),
            F.min(latency).alias("min"),
            # an exact (decimal) sum: the same average whatever the partitioning (a double sum depends on its order)
            F.avg(latency.cast(_EXACT_MS)).alias("avg"),
            F.percentile_approx(latency, [0.5, 0.95], PERCENTILE_ACCURACY).alias("pct"),
            F.max(latency).alias("max")]


def _latency(row: Any) -> dict[str, float | None]:
    pct = row["pct"] or [None, None]
    values = {"min": row["min"], "avg": row["avg"], "p50": pct[0], "p95": pct[1], "max": row["max"]}
    return {k: (None if v is None else round(float(v), 3)) for k, v in values.items()}


def summarize(rows: DataFrame, body_kinds: dict[str, int] | None = None) -> dict[str, Any]:
    """Counts and latency (ms) overall, per ``message_type``, per originating endpoint and per UTC date, as a
    JSON-serialisable dict, in one Spark job (one aggregation over the rows, each counted in four groupings).

    ``rows`` are ``columns.summary_rows`` (one per message); ``input_rows`` counts the drained rows read, and
    ``duplicates_removed`` what deduplication dropped. Messages without a readable ``NServiceBus.TimeSent``
    count, but have no latency (``without_time_sent``). ``body_kinds`` (counts per ``body_kind``) is only known
    when the typed dataset was written, else None.
    """
    keys = F.array(*[F.struct(F.lit(g).alias("g"), key.alias("k")) for g, key in zip(_GROUPINGS, (
        F.lit(None).cast("string"), F.col("message_type"), F.coalesce("originating_endpoint", F.lit("unknown")),
        F.col("date").cast("string")), strict=True)])
    grouped = (rows.select(F.explode(keys).alias("key"), *columns.SUMMARY_COLUMNS)
               .groupBy(F.col("key.g").alias("g"), F.col("key.k").alias("k")).agg(*_aggregates()).collect())
    by = {g: [r for r in grouped if r["g"] == g] for g in _GROUPINGS}
    total = by["all"][0] if by["all"] else None
    types = sorted(by["type"], key=lambda r: (-r["count"], r["k"]))
    count = int(total["count"]) if total else 0
    input_rows = int(total["input_rows"] or 0) if total else 0
    return {
        "input_rows": input_rows,
        "messages": count,
        "duplicates_removed": input_rows - count,
        "without_time_sent": count - (int(total["with_latency"]) if total else 0),
        "latency_ms": _latency(total) if total else _latency({"pct": None, "min": None, "avg": None, "max": None}),
        "types": {r["k"]: {"count": r["count"], "latency_ms": _latency(r)} for r in types},
        "endpoints": {r["k"]: r["count"] for r in sorted(by["endpoint"], key=lambda r: (-r["count"], r["k"]))},
        "per_date": {r["k"]: r["count"] for r in sorted(by["date"], key=lambda r: r["k"])},
        "body_kinds": body_kinds,
        "dates": sorted(r["k"] for r in by["date"]),
    }


def body_kind_counts(values: dict[str, Any] | None) -> dict[str, int]:
    """``{kind: count}`` from the ``kind_<kind>`` metrics observed while the dataset was written."""
    return {kind: int((values or {}).get(f"kind_{kind}") or 0) for kind in BODY_KINDS}


def body_kind_metrics() -> list[Column]:
    """The metrics observed on the dataset as it is written (no second pass over the bodies)."""
    return [F.sum(F.when(F.col("body_kind") == kind, 1).otherwise(0)).alias(f"kind_{kind}") for kind in BODY_KINDS]


def is_local(path: str) -> bool:
    """Whether ``path`` is on the local file system (no URL scheme, or ``file:``)."""
    return "://" not in path or path.startswith("file:")


def local_path(path: str) -> str:
    """``path`` without a ``file:`` prefix."""
    for prefix in ("file://", "file:"):
        if path.startswith(prefix):
            return path[len(prefix):]
    return path


def write_summary(spark: Any, summary: dict[str, Any], output: str) -> str:
    """Store the summary as ``<output>/summary.json``: a file locally, a one-line text dataset elsewhere."""
    target = f"{output.rstrip('/')}/summary.json"
    text = json.dumps(summary, sort_keys=True)
    if is_local(target):
        path = local_path(target)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text + "\n")
        return path
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
