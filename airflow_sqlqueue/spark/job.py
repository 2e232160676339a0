"""The Spark job: drained Parquet batches -> a summary, and optionally the typed, deduplicated messages
partitioned by type and date.

In process::

    from airflow_sqlqueue.spark.job import run
    from airflow_sqlqueue.spark.session import spark_session

    with spark_session("local[*]") as spark:
        summary = run(spark, ["batches/"], "results/")                 # the summary only
        summary = run(spark, ["batches/"], "results/", dataset=True)   # and the typed dataset

With ``spark-submit`` (any master; ``airflow_sqlqueue.spark.submit.job_file()`` is this file)::

    spark-submit --master local[*] .../airflow_sqlqueue/spark/job.py --input batches/ --output results/ [--dataset]

Output: ``<output>/summary.json`` (``summary.summarize``) and, with ``dataset``,
``<output>/messages/message_type=<type>/date=<yyyy-MM-dd>/part-*.parquet`` (``columns.MESSAGE_COLUMNS``).
Settings: ``settings`` (adaptive execution, read and shuffle sizes derived from the input).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from pyspark.sql import DataFrame, Observation, SparkSession

from airflow_sqlqueue.spark import columns, settings
from airflow_sqlqueue.spark.summary import (
    body_kind_counts,
    body_kind_metrics,
    is_local,
    local_path,
    summarize,
    write_summary,
)

WRITE_MODES = ("overwrite", "append", "error")


def read_batches(spark: SparkSession, inputs: str | Sequence[str]) -> DataFrame:
    """Drained batches from Parquet files and/or folders of them (hidden ``.`` and ``_`` files are skipped)."""
    paths = [inputs] if isinstance(inputs, str) else list(inputs)
    if not paths:
        return spark.createDataFrame([], columns.INPUT_SCHEMA)
    return spark.read.schema(columns.INPUT_SCHEMA).parquet(*paths)


def cores(spark: SparkSession) -> int:
    """The cores the session's tasks run on (``defaultParallelism``; the local CPUs under Spark Connect)."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect has no SparkContext
        return int(spark.conf.get("spark.default.parallelism", None) or os.cpu_count() or 1)


@contextmanager
def run_settings(spark: SparkSession, conf: dict[str, str]) -> Iterator[None]:
    """``conf`` set on the session for the run, the session's own values restored afterwards."""
    before = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def run(spark: SparkSession, inputs: str | Sequence[str], output: str, *, mode: str = "overwrite",
        dataset: bool = False) -> dict[str, Any]:
    """Summarize drained batches into ``<output>/summary.json`` (and with ``dataset`` write ``<output>/messages``);
    return the summary.

    :param spark: an existing session (any master).
    :param inputs: Parquet files or folders written by ``SqlQueueDrainOperator(output_path=...)``.
    :param output: a folder (local path or any URL Spark can write).
    :param mode: the dataset's write mode: ``overwrite`` (default: re-running gives the same result), ``append``
        or ``error``.
    :param dataset: also write the full typed, deduplicated messages (bodies decoded) partitioned by type and
        date; without it only the columns the summary needs are read (the bodies stay on disk).
    """
    if mode not in WRITE_MODES:
        raise ValueError(f"mode must be one of {', '.join(WRITE_MODES)}, got {mode!r}")
    paths = [inputs] if isinstance(inputs, str) else list(inputs)
    conf = settings.run_conf(settings.input_size(paths), cores(spark), dataset=dataset)
    with run_settings(spark, conf):
        raw = read_batches(spark, paths)
        kinds = target = None
        if dataset:
            target = f"{output.rstrip('/')}/messages"
            observed = Observation("body_kinds")
            messages = columns.messages(raw).observe(observed, *body_kind_metrics())
            (messages.repartition(*columns.PARTITION_COLUMNS)  # one file per type and date folder
             .write.mode(mode).partitionBy(*columns.PARTITION_COLUMNS).parquet(target))
            kinds = body_kind_counts(observed.get)
        summary = {**summarize(columns.summary_rows(raw), kinds), "output": target}
    if is_local(output):
        os.makedirs(local_path(output), exist_ok=True)
    summary["summary_file"] = write_summary(spark, summary, output)
    return summary


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="job.py", description="Drained SQL queue batches (Parquet) to typed messages partitioned by type and "
                                   "date, with a summary.")
    parser.add_argument("--input", nargs="+", required=True, help="Parquet files or folders from the drain")
    parser.add_argument("--output", required=True, help="output folder (messages/ and summary.json)")
    parser.add_argument("--mode", choices=WRITE_MODES, default="overwrite",
                        help="write mode of the dataset (default overwrite)")
    parser.add_argument("--dataset", nargs="?", const="true", default="false", type=str.lower,
                        choices=("true", "false"),
                        help="also write the typed messages (bodies decoded) partitioned by type and date")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``spark-submit job.py --input ... --output ...``: print the summary as JSON."""
    args = parse_args(argv)
    spark = SparkSession.builder.appName("sqlqueue-drained-messages").getOrCreate()
    try:
        summary = run(spark, args.input, args.output, mode=args.mode, dataset=args.dataset == "true")
    finally:
        spark.stop()
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
