"""The Spark job on any PySpark (3.5 or 4.x, ``local[*]``): summary and typed dataset from drain-shaped batches.

Run it from a venv without Airflow (only the core and ``airflow_sqlqueue.spark`` are imported)::

    uv venv /tmp/spark35 && VIRTUAL_ENV=/tmp/spark35 uv pip install "pyspark==3.5.*" pyarrow "pandas<3"
    PYTHONPATH=. /tmp/spark35/bin/python scripts/spark_compat_check.py

It prints one JSON line and exits non-zero when a count is wrong or the two modes disagree.
"""

from __future__ import annotations

import json
import sys
import tempfile
import uuid
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.parquet as pq
import pyspark

from airflow_sqlqueue.spark.job import run
from airflow_sqlqueue.spark.session import local_session

SCHEMA = pa.schema([("id", pa.string()), ("seq", pa.int64()), ("queue", pa.string()), ("headers", pa.string()),
                    ("body", pa.binary()), ("received_at", pa.timestamp("us", tz="UTC"))])
BODIES = (b'{"a": 1}', b"\xff\xfe", b"", b"plain")
SENT = datetime(2024, 3, 1, 12, tzinfo=timezone.utc)


def batches(folder: str) -> None:
    """3,000 rows in three files: 2,500 messages (500 of them drained twice: the same row, received a second
    later), 3 types, 2 endpoints, four body kinds."""
    rows = []
    for i in range(3000):
        j = i % 2500  # rows 2,500-2,999 are rows 0-499 again
        headers = {"NServiceBus.MessageId": f"m{j}", "NServiceBus.EnclosedMessageTypes": f"T{j % 3}, Asm",
                   "NServiceBus.OriginatingEndpoint": f"E{j % 2}",
                   "NServiceBus.TimeSent": "2024-03-01 12:00:00:000000 Z",
                   "NServiceBus.ContentType": "application/json" if j % 4 else "text/plain"}
        rows.append({"id": str(uuid.uuid4()), "seq": i, "queue": "q", "headers": json.dumps(headers),
                     "body": BODIES[j % 4] if j % 5 else BODIES[0],
                     "received_at": SENT + timedelta(seconds=1 + i // 2500)})
    for k in range(3):
        pq.write_table(pa.Table.from_pylist(rows[k::3], schema=SCHEMA), f"{folder}/b{k}.parquet")


def main() -> int:
    folder = tempfile.mkdtemp()
    batches(folder)
    spark = local_session("local[*]")
    try:
        summary = run(spark, [folder], f"{folder}/summary")
        full = run(spark, [folder], f"{folder}/dataset", dataset=True)
        out = spark.read.parquet(f"{folder}/dataset/messages")
        rows, body_json = out.count(), dict(out.dtypes)["body_json"]
    finally:
        spark.stop()
    common = ("input_rows", "messages", "duplicates_removed", "types", "endpoints", "per_date", "latency_ms")
    result = {"pyspark": pyspark.__version__, "messages": summary["messages"],
              "duplicates_removed": summary["duplicates_removed"],
              "types": {k: v["count"] for k, v in summary["types"].items()}, "endpoints": summary["endpoints"],
              "latency_ms": summary["latency_ms"], "dataset_rows": rows, "body_kinds": full["body_kinds"],
              "modes_agree": all(summary[k] == full[k] for k in common), "body_json_type": body_json}
    print(json.dumps(result))
    ok = (summary["messages"], summary["duplicates_removed"], rows) == (2500, 500, 2500) and result["modes_agree"] \
        and result["types"] == {"T0": 834, "T1": 833, "T2": 833} and summary["endpoints"] == {"E0": 1250, "E1": 1250}
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
