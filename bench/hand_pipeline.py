"""The fastest plain pipeline for the Spark job, written by hand: what the provider's path is measured against.

1. ``drain``: ``receivers`` threads, each with its own psycopg connection, loop: DELETE a batch of the oldest
   rows (``FOR UPDATE SKIP LOCKED``, Id as text) RETURNING them, read each row's headers (a drain must know a row
   is a message), build the Arrow table one array per column, write it to a hidden file, fsync, rename, fsync
   the folder, commit. Nothing is lost if the process dies (a batch written but not committed comes again).
2. ``summary``: one Spark SQL query on ``local[*]`` (AQE on as shipped; shuffle partitions and the file open cost
   set by hand for this machine and these files): read three columns, parse four headers, drop duplicate message
   Ids keeping the first received, then counts per type (with latency min/avg/p50/p95/max), per endpoint and per
   UTC date in one pass of grouping sets.

``python -m bench.hand_pipeline summary DIR`` runs step 2 in its own JVM and prints the summary as JSON (the
benchmark times that process, as it times the provider's).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .databases import BenchDb


def write_batch(rows: list[tuple], queue: str, directory: Path) -> None:
    """One batch as a Parquet file in the drain's columns, whole or absent (temp file, fsync, rename)."""
    import pyarrow as pa

    n = len(rows)
    ids, seqs, _, headers, bodies = zip(*rows, strict=True)
    ts = pa.timestamp("us", tz="UTC")
    table = pa.Table.from_arrays(
        [pa.array(ids, pa.string()), pa.array(seqs, pa.int64()), pa.repeat(pa.scalar(queue), n),
         pa.array(headers, pa.string()), pa.array(bodies, pa.binary()),
         pa.repeat(pa.scalar(datetime.now(timezone.utc), ts), n)],
        names=["id", "seq", "queue", "headers", "body", "received_at"])
    write_whole(table, directory / f"hand-{uuid.uuid4().hex}.parquet", use_dictionary=["queue"],
                write_statistics=["seq", "received_at"])


def write_whole(table: Any, final: Path, **options: Any) -> None:
    """``table`` as the Parquet file ``final``, whole or absent: written to a hidden file beside it, fsync'ed,
    renamed into place, and the folder fsync'ed (``options`` go to ``pyarrow.parquet.write_table``)."""
    import pyarrow.parquet as pq

    temp = final.parent / f".{final.name}.tmp"
    with open(temp, "wb") as f:
        pq.write_table(table, f, **options)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, final)
    handle = os.open(final.parent, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def drain(db: BenchDb, queue: str, directory: Path, *, batch: int, receivers: int) -> int:
    """Drain ``queue`` into ``directory`` with ``receivers`` threads; return the rows written."""
    import pyarrow.parquet  # noqa: F401 - imported now, not on the clock

    directory.mkdir(parents=True, exist_ok=True)
    receive = db.sql("hand_receive", queue)
    address = db.address(queue)
    counts: list[int] = []
    errors: list[BaseException] = []

    def receiver() -> None:
        conn = db.connect()
        done = 0
        try:
            cur = conn.cursor()
            while True:
                rows = cur.execute(receive, {"batch_size": batch}).fetchall()
                if not rows:
                    conn.commit()
                    break
                kept = [r for r in rows if not r[2] and isinstance(json.loads(r[3]), dict)]
                if kept:
                    write_batch(kept, address, directory)
                conn.commit()
                done += len(kept)
        except BaseException as exc:  # reported by the caller
            errors.append(exc)
        finally:
            counts.append(done)
            conn.close()

    threads = [threading.Thread(target=receiver) for _ in range(receivers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return sum(counts)


#: The whole summary as one Spark SQL query over the drained files: three columns read, four headers parsed,
#: duplicates dropped by a hash aggregation on the Id (their headers are the same), one pass of grouping sets.
SUMMARY_SQL = """
WITH raw AS (
  SELECT id, received_at,
         from_json(headers, '`NServiceBus.MessageId` STRING, `NServiceBus.EnclosedMessageTypes` STRING,
                             `NServiceBus.OriginatingEndpoint` STRING, `NServiceBus.TimeSent` STRING') AS h
  FROM parquet.`{path}`
), first AS (
  SELECT message_type, endpoint, time_sent, min(received_at) AS received_at, count(*) AS deliveries
  FROM (SELECT coalesce(h.`NServiceBus.MessageId`, id) AS message_id,
               coalesce(nullif(trim(substring_index(substring_index(
                 h.`NServiceBus.EnclosedMessageTypes`, ';', 1), ',', 1)), ''), 'unknown') AS message_type,
               coalesce(h.`NServiceBus.OriginatingEndpoint`, 'unknown') AS endpoint,
               try_to_timestamp(h.`NServiceBus.TimeSent`, 'yyyy-MM-dd HH:mm:ss:SSSSSS X') AS time_sent,
               received_at
        FROM raw)
  GROUP BY message_id, message_type, endpoint, time_sent
)
SELECT message_type, endpoint, date, grouping_id() AS g, count(*) AS count, sum(deliveries) AS input_rows,
       min(latency_ms) AS min, avg(latency_ms) AS avg, percentile_approx(latency_ms, array(0.5, 0.95), 10000) AS pct,
       max(latency_ms) AS max
FROM (SELECT message_type, endpoint, deliveries, CAST(to_date(coalesce(time_sent, received_at)) AS STRING) AS date,
             (unix_micros(received_at) - unix_micros(time_sent)) / 1000.0 AS latency_ms FROM first)
GROUP BY GROUPING SETS ((message_type), (endpoint), (date))
"""


def summary(spark: Any, directory: str) -> dict[str, Any]:
    """The plain PySpark summary of the drained files (see the module docstring)."""
    rows = spark.sql(SUMMARY_SQL.replace("{path}", directory.replace("`", "``"))).collect()
    types = [r for r in rows if r["message_type"] is not None]
    messages = sum(r["count"] for r in types)
    input_rows = sum(r["input_rows"] for r in types)
    return {
        "input_rows": input_rows, "messages": messages, "duplicates_removed": input_rows - messages,
        "types": {r["message_type"]: {"count": r["count"], "latency_ms": {
            "min": r["min"], "avg": r["avg"], "p50": r["pct"][0], "p95": r["pct"][1], "max": r["max"]}}
            for r in types},
        "endpoints": {r["endpoint"]: r["count"] for r in rows if r["endpoint"] is not None},
        "per_date": {r["date"]: r["count"] for r in rows if r["date"] is not None},
    }


def main(argv: list[str]) -> int:
    """``summary DIR``: the Spark step in this process (a fresh JVM with Spark's defaults); prints JSON."""
    if len(argv) != 2 or argv[0] != "summary":
        print("usage: python -m bench.hand_pipeline summary DIR", file=sys.stderr)
        return 2
    from pyspark.sql import SparkSession

    started = time.monotonic()
    cores = os.cpu_count() or 1
    spark = (SparkSession.builder.master("local[*]").appName("hand-summary")
             .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.shuffle.partitions", str(2 * cores))  # tuned by hand for this machine
             .config("spark.sql.files.openCostInBytes", str(128 * 1024))  # the batch files are ~120 KB
             .getOrCreate())
    try:
        result = summary(spark, argv[1])
        result["inner_seconds"] = round(time.monotonic() - started, 2)
    finally:
        spark.stop()
    print(json.dumps(result, sort_keys=True, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
