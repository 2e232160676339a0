"""The Spark job: drained Parquet batches -> typed, deduplicated messages partitioned by type and date + summary.

In process::

    from airflow_sqlqueue.spark.job import run
    from airflow_sqlqueue.spark.session import spark_session

    with spark_session("local[*]") as spark:
        summary = run(spark, ["batches/"], "results/")

With ``spark-submit`` (any master; ``airflow_sqlqueue.spark.submit.job_file()`` is this file)::

    spark-submit --master local[*] .../airflow_sqlqueue/spark/job.py --input batches/ --output results/

Output: ``<output>/messages/message_type=<type>/date=<yyyy-MM-dd>/part-*.parquet`` (``columns.MESSAGE_COLUMNS``)
and ``<output>/summary.json`` (``summary.summarize``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from airflow_sqlqueue.spark import columns
from airflow_sqlqueue.spark.summary import summarize, write_summary

WRITE_MODES = ("overwrite", "append", "error")


def read_batches(spark: SparkSession, inputs: str | Sequence[str]) -> DataFrame:
    """Drained batches from Parquet files and/or folders of them (hidden ``.`` and ``_`` files are skipped)."""
    paths = [inputs] if isinstance(inputs, str) else list(inputs)
    if not paths:
        return spark.createDataFrame([], columns.INPUT_SCHEMA)
    return spark.read.schema(columns.INPUT_SCHEMA).parquet(*paths)


def run(spark: SparkSession, inputs: str | Sequence[str], output: str, *, mode: str = "overwrite") -> dict[str, Any]:
    """Process drained batches into ``<output>/messages`` and ``<output>/summary.json``; return the summary.

    :param spark: an existing session (any master).
    :param inputs: Parquet files or folders written by ``SqlQueueDrainOperator(output_path=...)``.
    :param output: a folder (local path or any URL Spark can write).
    :param mode: ``overwrite`` (default: re-running gives the same result), ``append`` or ``error``.
    """
    if mode not in WRITE_MODES:
        raise ValueError(f"mode must be one of {', '.join(WRITE_MODES)}, got {mode!r}")
    messages = columns.messages(read_batches(spark, inputs)).cache()
    try:
        target = f"{output.rstrip('/')}/messages"
        (messages.repartition(*columns.PARTITION_COLUMNS)  # one file per type and date folder
         .write.mode(mode).partitionBy(*columns.PARTITION_COLUMNS).parquet(target))
        summary = {**summarize(messages), "output": target}
        summary["summary_file"] = write_summary(messages, summary, output)
        return summary
    finally:
        messages.unpersist()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="job.py", description="Drained SQL queue batches (Parquet) to typed messages partitioned by type and "
                                   "date, with a summary.")
    parser.add_argument("--input", nargs="+", required=True, help="Parquet files or folders from the drain")
    parser.add_argument("--output", required=True, help="output folder (messages/ and summary.json)")
    parser.add_argument("--mode", choices=WRITE_MODES, default="overwrite", help="write mode (default overwrite)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``spark-submit job.py --input ... --output ...``: print the summary as JSON."""
    args = parse_args(argv)
    spark = SparkSession.builder.appName("sqlqueue-drained-messages").getOrCreate()
    try:
        summary = run(spark, args.input, args.output, mode=args.mode)
    finally:
        spark.stop()
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
