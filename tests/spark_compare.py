"""Run the job on ``local[2]`` and compare other runs' results with it (started by tests/test_spark_cluster.py).

usage: python tests/spark_compare.py BATCHES REFERENCE RESULTS...

Runs ``airflow_sqlqueue.spark.job.run`` in process on ``local[2]`` over BATCHES into REFERENCE, then reads every
RESULTS folder and REFERENCE back (the VARIANT column as its JSON text) and prints one JSON line: per RESULTS
folder, whether its rows and its summary are identical to the reference, and the first differences.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from airflow_sqlqueue.spark.job import run
from airflow_sqlqueue.spark.session import local_session
from airflow_sqlqueue.spark.summary import read_summary

PATH_KEYS = ("output", "summary_file")


def rows(spark: Any, folder: str) -> list[str]:
    """Every output row as canonical JSON text, sorted (partition columns included)."""
    df = spark.read.parquet(f"{folder}/messages")
    df = df.withColumn("body_json", df["body_json"].cast("string"))
    return sorted(json.dumps(r.asDict(recursive=True), sort_keys=True, default=str) for r in df.collect())


def summary(folder: str) -> dict[str, Any]:
    return {k: v for k, v in read_summary(folder).items() if k not in PATH_KEYS}


def main(batches: str, reference: str, results: list[str]) -> dict[str, Any]:
    spark = local_session("local[2]", "sqlqueue-reference", conf={"spark.sql.shuffle.partitions": "2"})
    try:
        run(spark, batches, reference, dataset=True)
        expected_rows, expected_summary = rows(spark, reference), summary(reference)
        ids = [r.native_id for r in spark.read.parquet(f"{reference}/messages").select("native_id").collect()]
        report: dict[str, Any] = {"reference_rows": len(expected_rows), "reference_ids": sorted(ids)}
        for folder in results:
            got = rows(spark, folder)
            report[folder] = {"rows": len(got), "rows_identical": got == expected_rows,
                              "summary_identical": summary(folder) == expected_summary,
                              "first_differences": sorted(set(got) ^ set(expected_rows))[:3]}
        return report
    finally:
        spark.stop()


if __name__ == "__main__":
    print("COMPARE " + json.dumps(main(sys.argv[1], sys.argv[2], sys.argv[3:])), flush=True)
