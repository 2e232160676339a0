"""The provider's pipeline at scale: one queue of ``--messages`` NServiceBus-shaped messages on PostgreSQL drained to
Parquet (the drain operator's path, as in ``bench/spark_pipeline.py``), then the Spark job's summary on each of
``--masters``: ``local`` (``local[*]`` sized by ``spark.settings``, as docs/spark.md shows) and ``standalone`` (a
master and two workers started here as ``tests/spark_cluster.py`` starts them; the driver in its own process).

Records time and peak resident memory: of the drain (this process), of the Spark driver's process tree (Python
and its JVM: on ``local[*]`` the JVM is also the executor) and, on the cluster, of the worker trees (worker
daemons and their executors).

    SQLQUEUE_BENCH_PG_URL=postgresql://... python -m bench.spark_scale --messages 10000000 --masters local \\
        --work /scratch/spark-scale
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .databases import DEFAULT_PG_URL, BenchDb
from .spark_pipeline import ENDPOINTS, QUEUE, TYPES, _spark_process, _tree_rss, project_drain

EXECUTOR_CONF = {"spark.executor.memory": "1g", "spark.executor.cores": "1"}


def cluster_summary(master: str, directory: str, output: str) -> dict[str, Any]:
    """The job's summary on a cluster ``master`` (driver here, executors on the workers)."""
    from airflow_sqlqueue.spark.job import run
    from airflow_sqlqueue.spark.session import spark_session

    started = time.monotonic()
    with spark_session(master, "sqlqueue-bench-cluster", conf=EXECUTOR_CONF) as spark:
        result = run(spark, [directory], output, dataset=False)
    return {**result, "driver_memory": "1g (Spark's default)", "inner_seconds": round(time.monotonic() - started, 2)}


def on_cluster(batches: Path, results: Path, folder: Path) -> dict[str, Any]:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import threading

    from tests.spark_cluster import SparkCluster

    cluster = SparkCluster(folder).start(workers=2, cores=1, memory="2g")
    try:
        workers = [p.pid for name, p in cluster.processes.items() if name.startswith("worker-")]
        peak, done = [0], threading.Event()

        def sample() -> None:
            while not done.wait(0.5):
                peak[0] = max(peak[0], sum(_tree_rss(pid) for pid in workers))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            summary, seconds, driver_peak = _spark_process(["bench.spark_scale", "_cluster", cluster.master_url,
                                                            str(batches), str(results)])
        finally:
            done.set()
            sampler.join()
        return {"summary": summary, "seconds": seconds, "driver_peak": driver_peak, "workers_peak": peak[0],
                "executors_ran_on": cluster.work_dirs_with_executors()}
    finally:
        cluster.stop()


def fill_and_drain(db: BenchDb, args: argparse.Namespace, batches: Path, record: dict[str, Any]) -> None:
    """Fill the queue (off the clock), drain it to ``batches`` with the drain operator's path (timed)."""
    db.reset(QUEUE)
    started = time.monotonic()
    # one template of up to a million generated messages, copied with new Ids and MessageIds one statement per
    # million rows (WAL and memory per statement stay bounded; the JSON is generated once, not per copy)
    chunk = min(1_000_000, args.messages)
    db.reset("template")
    db.execute("fill_typed", "template", {"count": chunk, "types": list(TYPES), "endpoints": list(ENDPOINTS)})
    for first in range(0, args.messages, chunk):
        db.execute("copy_typed_fresh", QUEUE, {"count": min(chunk, args.messages - first)}, template="template")
    db.execute("drop_queue", "template")
    record["fill"] = f"fill_typed of {chunk:,} into a template, copy_typed_fresh per {chunk:,}"
    db.vacuum(QUEUE)
    db.settle()
    record["fill_seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(record), flush=True)
    work = project_drain(db, batches, batch=args.batch_size, receivers=args.receivers)
    started = time.monotonic()
    record["drained"] = work()
    record["drain_seconds"] = round(time.monotonic() - started, 1)
    record["drain_peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    db.reset(QUEUE)  # the emptied table's space back before Spark runs
    print(json.dumps(record), flush=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_cluster":
        print(json.dumps(cluster_summary(argv[1], argv[2], argv[3]), sort_keys=True, default=str))
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench.spark_scale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--masters", default="local", help="comma-separated: local, standalone")
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--receivers", type=int, default=2)
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL)
    parser.add_argument("--work", type=Path, required=True, help="scratch folder (deleted afterwards)")
    parser.add_argument("--out", type=Path, help="append the result as one JSON line to this file")
    parser.add_argument("--inputs", type=Path, help="drained Parquet files to use (no fill, no drain; kept)")
    parser.add_argument("--keep-batches", type=Path,
                        help="drain into this folder and keep it afterwards (for a later --inputs run)")
    args = parser.parse_args(argv)
    masters = [m.strip() for m in args.masters.split(",") if m.strip()]
    batches = args.inputs or args.keep_batches or args.work / "batches"
    shutil.rmtree(args.work, ignore_errors=True)
    db = None if args.inputs else BenchDb.open("postgres", args.pg_url)
    record: dict[str, Any] = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                              "messages": args.messages, "batch_size": args.batch_size, "receivers": args.receivers,
                              "cpus": os.cpu_count(), "load_average_start": os.getloadavg(),
                              "command": "python -m bench.spark_scale " + " ".join(argv)}
    try:
        if db is not None:
            fill_and_drain(db, args, batches, record)
        files = list(batches.glob("*.parquet"))
        record["files"], record["parquet_bytes"] = len(files), sum(p.stat().st_size for p in files)
        from airflow_sqlqueue.spark.settings import input_size, run_conf

        size = input_size([str(batches)])
        record["derived_conf_local"] = run_conf(size, os.cpu_count() or 1, dataset=False)
        record["derived_conf_standalone"] = run_conf(size, 2, dataset=False)  # 2 workers of 1 core
        print(json.dumps(record), flush=True)
        for master in masters:
            results = args.work / f"results-{master}"
            if master == "local":
                summary, seconds, peak = _spark_process(["bench.spark_pipeline", "_summary", str(batches),
                                                         str(results), "--summary-only"])
                run = {"seconds": round(seconds, 1), "driver_peak_rss_mb": round(peak / 2**20)}
            elif master == "standalone":
                found = on_cluster(batches, results, args.work / "cluster")
                summary = found["summary"]
                run = {"seconds": round(found["seconds"], 1),
                       "driver_peak_rss_mb": round(found["driver_peak"] / 2**20),
                       "workers_peak_rss_mb": round(found["workers_peak"] / 2**20),
                       "executors_ran_on": found["executors_ran_on"], "executor_conf": EXECUTOR_CONF}
            else:
                raise SystemExit(f"unknown master {master!r}: local or standalone")
            run.update(messages=summary["messages"], duplicates_removed=summary["duplicates_removed"],
                       driver_memory=summary.get("driver_memory"), inner_seconds=summary.get("inner_seconds"),
                       counts={name: t["count"] for name, t in summary["types"].items()})
            if summary["messages"] != args.messages and not args.inputs:
                raise SystemExit(f"{master}: {summary['messages']} messages in the summary, {args.messages} sent")
            record[master] = run
            print(json.dumps(record), flush=True)
            shutil.rmtree(results, ignore_errors=True)
    finally:
        record["load_average_end"] = os.getloadavg()
        if db is not None:
            db.close()
        shutil.rmtree(args.work, ignore_errors=True)
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
