"""Queue -> Parquet -> Spark summary, end to end: the hand pipeline (``bench/hand_pipeline.py``) beside the
provider's (the drain operator's sink ``ParquetBatchWriter`` on ``transport.drain``, then ``spark.job.run`` in a
``local[*]`` session sized by ``spark.settings``), in one run, alternating who goes first.

Each contestant of each repeat: a fresh queue of ``--messages`` NServiceBus-shaped messages on PostgreSQL (5 types,
~200-byte JSON bodies; generated once per run, copied into each contestant's queue and checkpointed off the
clock), the drain timed in this process, then the Spark step timed as its own process (a fresh JVM each: start-up
counts for both). Counts must agree between contestants. ``dataset`` is the provider's job writing the full typed
dataset too (its own figure).

    SQLQUEUE_BENCH_PG_URL=postgresql://... python -m bench.spark_pipeline --messages 1000000 --repeats 2 \\
        --work /scratch/spark --out bench/results

Writes ``spark_pipeline.json`` and ``spark_pipeline.md`` (medians, ratios to the hand pipeline, the machine).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any

from .databases import DEFAULT_PG_URL, BenchDb
from .hand_pipeline import drain as hand_drain

QUEUE = "spark_pipeline"
#: The messages of a run, generated once (``fill_typed``); each contestant's queue is a copy of it (``copy_typed``).
TEMPLATE = "spark_pipeline_template"
TYPES = ("Sales.Messages.Events.OrderPlaced", "Sales.Messages.Events.OrderCancelled",
         "Sales.Messages.Events.PriceQuoted", "Billing.Messages.Events.OrderBilled",
         "Shipping.Messages.Commands.ShipOrder")
ENDPOINTS = ("Sales", "Sales", "Sales", "Billing", "Shipping")
CONTESTANTS = ("hand", "project", "dataset")


def project_drain(db: BenchDb, directory: Path, *, batch: int, receivers: int) -> Callable[[], int]:
    """The drain operator's Parquet path: ``transport.drain`` with its ``ParquetBatchWriter`` as the sink (the
    operator module, which imports Airflow, is imported here, before the clock starts)."""
    import uuid

    import pyarrow.parquet  # noqa: F401

    from airflow_sqlqueue.operators.parquet import ParquetBatchWriter

    target = ParquetBatchWriter(str(directory))

    def sink(batch: Any) -> int:  # a ReceivedColumns, as the operator's Parquet drain receives
        target.write(batch, f"{QUEUE}-{uuid.uuid4().hex}.parquet")
        return len(batch)

    def work() -> int:
        with db.transport() as transport:
            return transport.drain(db.address(QUEUE), sink, batch_size=batch, concurrency=receivers,
                                   columns=True).delivered

    return work


def project_summary(directory: str, output: str, dataset: bool) -> dict[str, Any]:
    """The provider's Spark step as a user runs it (docs/spark.md): a local session sized from the input."""
    from airflow_sqlqueue.spark.job import run
    from airflow_sqlqueue.spark.session import spark_session
    from airflow_sqlqueue.spark.settings import driver_memory, input_size

    started = time.monotonic()
    memory = driver_memory(input_size([directory]), dataset=dataset)
    with spark_session("local[*]", "sqlqueue-bench", driver_memory=memory) as spark:
        result = run(spark, [directory], output, dataset=dataset)
    return {**result, "driver_memory": memory, "inner_seconds": round(time.monotonic() - started, 2)}


def _tree_rss(root: int) -> int:
    """Resident bytes of process ``root`` and its descendants now (Linux ``/proc``), 0 once it is gone."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/statm") as f:
                rss[int(entry)] = int(f.read().split()[1]) * page
        except (OSError, IndexError, ValueError):
            continue
        parents[int(entry)] = int(fields[1])
    tree, frontier = {root}, [root]
    while frontier:
        pid = frontier.pop()
        children = [c for c, parent in parents.items() if parent == pid and c not in tree]
        tree.update(children)
        frontier += children
    return sum(rss.get(pid, 0) for pid in tree)


def _spark_process(argv: list[str]) -> tuple[dict[str, Any], float, int]:
    """Run ``python -m argv`` (a Spark step); its JSON result, seconds, and the peak resident bytes of its process
    tree (the Python driver and its JVM: on ``local[*]`` the JVM is driver and executor), sampled every 0.5 s."""
    import tempfile
    import threading

    started = time.monotonic()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen([sys.executable, "-m", *argv], stdout=out, stderr=err, text=True,
                                   cwd=Path(__file__).resolve().parent.parent)
        peak = [0]
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.5):
                peak[0] = max(peak[0], _tree_rss(process.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        returncode = process.wait()
        done.set()
        sampler.join()
        seconds = time.monotonic() - started
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if returncode != 0:
        raise RuntimeError(f"{argv[:2]} failed:\n{stderr[-4000:]}")
    return json.loads(stdout.strip().splitlines()[-1]), seconds, peak[0]


def one(db: BenchDb, kind: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Fill the queue, drain it (timed), summarize the files with Spark (timed); clean up the files."""
    batches, results = work / kind / "batches", work / kind / "results"
    shutil.rmtree(work / kind, ignore_errors=True)
    db.reset(QUEUE)
    db.execute("copy_typed", QUEUE, template=TEMPLATE)
    db.vacuum(QUEUE)
    db.settle()
    if kind == "hand":
        drain_work: Callable[[], int] = partial(hand_drain, db, QUEUE, batches, batch=args.batch_size,
                                                receivers=args.receivers)
    else:
        drain_work = project_drain(db, batches, batch=args.batch_size, receivers=args.receivers)
    load = os.getloadavg()
    started = time.monotonic()
    drained = drain_work()
    drain_seconds = time.monotonic() - started
    drain_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # this process's peak so far
    files = list(batches.glob("*.parquet"))
    size = sum(p.stat().st_size for p in files)
    if args.drain_only:  # the drains compared alone: rows in the files counted, then the files deleted
        import pyarrow.parquet as pq

        rows = sum(pq.ParquetFile(p).metadata.num_rows for p in files)
        shutil.rmtree(work / kind, ignore_errors=True)
        return {"kind": kind, "drained": drained, "rows_in_files": rows,
                "drain_seconds": round(drain_seconds, 2), "files": len(files), "parquet_bytes": size,
                "drain_peak_rss_mb": round(drain_peak / 2**20),
                "load_average": [round(x, 2) for x in load]}
    if kind == "hand":
        summary, spark_seconds, spark_peak = _spark_process(["bench.hand_pipeline", "summary", str(batches)])
    else:
        summary, spark_seconds, spark_peak = _spark_process(
            ["bench.spark_pipeline", "_summary", str(batches), str(results),
             "--dataset" if kind == "dataset" else "--summary-only"])
    shutil.rmtree(work / kind, ignore_errors=True)
    return {"kind": kind, "drained": drained, "drain_seconds": round(drain_seconds, 2),
            "spark_seconds": round(spark_seconds, 2), "total_seconds": round(drain_seconds + spark_seconds, 2),
            "spark_inner_seconds": summary.get("inner_seconds"), "files": len(files), "parquet_bytes": size,
            "driver_memory": summary.get("driver_memory", "1g (Spark's default)"),
            "counts": {name: t["count"] for name, t in summary["types"].items()},
            "endpoints": summary["endpoints"], "messages": summary["messages"],
            "duplicates_removed": summary["duplicates_removed"],
            "drain_peak_rss_mb": round(drain_peak / 2**20), "spark_peak_rss_mb": round(spark_peak / 2**20),
            "load_average": [round(x, 2) for x in load]}


def drain_report(samples: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The drains alone: each contestant's drain beside the hand drain of the same repeat (throughput ratio)."""
    lines = [f"Run of {meta['date']}, drains only: {meta['messages']:,} messages on PostgreSQL, batches of "
             f"{meta['batch_size']}, {meta['receivers']} receivers, {meta['repeats']} repeat(s), order turned "
             f"around every repeat. Machine: {meta['cpus']} cores, {meta['memory_gb']} GB, shared with other work "
             f"(load average {meta['load_average_start'][0]:.1f} at the start, {meta['load_average_end'][0]:.1f} "
             "at the end).", "",
             "| repeat | pipeline | drain s | msg/s | vs hand drain (throughput) | peak RSS MB |",
             "|---:|---|---:|---:|---:|---:|"]
    ratios: dict[str, list[float]] = {}
    for repeat in sorted({s["repeat"] for s in samples}):
        base = next((s for s in samples if s["repeat"] == repeat and s["kind"] == "hand"), None)
        for s in (x for x in samples if x["repeat"] == repeat):
            ratio = base["drain_seconds"] / s["drain_seconds"] if base else None
            if ratio is not None and s["kind"] != "hand":
                ratios.setdefault(s["kind"], []).append(ratio)
            lines.append(f"| {repeat + 1} | {s['kind']} | {s['drain_seconds']:.1f} | "
                         f"{meta['messages'] / s['drain_seconds']:,.0f} | "
                         f"{'-' if ratio is None else f'{ratio:.2f}x'} | {s.get('drain_peak_rss_mb', '-')} |")
    lines.append("")
    for kind, values in ratios.items():
        lines.append(f"{kind}: median {statistics.median(values):.2f}x of the hand drain "
                     f"(per repeat {', '.join(f'{v:.2f}x' for v in values)}).")
    lines += ["", f"Command: `{meta['command']}`", ""]
    return "\n".join(lines)


def report(samples: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    kinds = [k for k in CONTESTANTS if any(s["kind"] == k for s in samples)]
    med = {k: {f: statistics.median(s[f] for s in samples if s["kind"] == k)
               for f in ("drain_seconds", "spark_seconds", "total_seconds")} for k in kinds}
    hand = med.get("hand")
    lines = [f"Run of {meta['date']}, {meta['messages']:,} messages (5 types, ~200-byte JSON bodies) on PostgreSQL, "
             f"batches of {meta['batch_size']}, {meta['receivers']} receivers, {meta['repeats']} repeat(s); "
             f"medians. Machine: {meta['cpus']} cores, {meta['memory_gb']} GB, shared with other work and busy "
             f"(load average {meta['load_average_start'][0]:.1f} at the start, {meta['load_average_end'][0]:.1f} "
             "at the end): compare the ratios, not the seconds.", "",
             "| pipeline | runs | drain s | drain msg/s | Spark s | end to end s | end to end vs hand | "
             "drain vs hand (throughput) | Spark vs hand | driver heap | Spark peak RSS MB |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    for k in kinds:
        m = med[k]
        runs = sum(1 for s in samples if s["kind"] == k)
        memory = next(s["driver_memory"] for s in samples if s["kind"] == k)
        peaks = [s["spark_peak_rss_mb"] for s in samples if s["kind"] == k and "spark_peak_rss_mb" in s]
        peak = f"{max(peaks):,}" if peaks else "-"
        ratio = {f: f"{m[f] / hand[f]:.2f}x" if hand else "-" for f in ("total_seconds", "spark_seconds")}
        drain_ratio = f"{hand['drain_seconds'] / m['drain_seconds']:.2f}x" if hand else "-"
        lines.append(f"| {k} | {runs} | {m['drain_seconds']:.1f} | {meta['messages'] / m['drain_seconds']:,.0f} | "
                     f"{m['spark_seconds']:.1f} | {m['total_seconds']:.1f} | {ratio['total_seconds']} | "
                     f"{drain_ratio} | {ratio['spark_seconds']} | {memory} | {peak} |")
    if hand:
        lines += ["", "Per repeat (each contestant beside the hand pipeline of the same repeat, minutes apart):", "",
                  "| repeat | pipeline | end to end vs hand | drain vs hand (throughput) | Spark vs hand |",
                  "|---:|---|---:|---:|---:|"]
        for repeat in sorted({s["repeat"] for s in samples}):
            base = next((s for s in samples if s["repeat"] == repeat and s["kind"] == "hand"), None)
            for s in samples:
                if base is None or s["repeat"] != repeat or s["kind"] == "hand":
                    continue
                lines.append(f"| {repeat + 1} | {s['kind']} | {s['total_seconds'] / base['total_seconds']:.2f}x | "
                             f"{base['drain_seconds'] / s['drain_seconds']:.2f}x | "
                             f"{s['spark_seconds'] / base['spark_seconds']:.2f}x |")
    lines += ["", "Spark s is the whole Spark process (Python and JVM start-up included, as a user pays it); its peak "
              "RSS is the largest resident size of that process tree (Python and the JVM, sampled every 0.5 s). "
              "`dataset` also writes the typed, deduplicated messages (bodies decoded) partitioned by type and date.",
              "", f"Command: `{meta['command']}`", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_report":  # the tables again from a results JSON
        data = json.loads(Path(argv[1]).read_text())
        drains_only = all("spark_seconds" not in s for s in data["samples"])
        print((drain_report if drains_only else report)(data["samples"], data["meta"]))
        return 0
    if argv and argv[0] == "_summary":  # the provider's Spark step in its own process
        print(json.dumps(project_summary(argv[1], argv[2], argv[3] == "--dataset"), sort_keys=True, default=str))
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench.spark_pipeline", description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--receivers", type=int, default=2)
    parser.add_argument("--contestants", default="hand,project", help="comma-separated: hand, project, dataset")
    parser.add_argument("--drain-only", action="store_true", help="time the drains alone (no Spark step)")
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL)
    parser.add_argument("--work", type=Path, required=True, help="scratch folder for the Parquet files")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args(argv)
    kinds = [k.strip() for k in args.contestants.split(",") if k.strip()]
    unknown = sorted(set(kinds) - set(CONTESTANTS))
    if unknown:
        parser.error(f"unknown contestants {unknown}; choose from {', '.join(CONTESTANTS)}")
    meta = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "messages": args.messages,
            "batch_size": args.batch_size, "receivers": args.receivers, "repeats": args.repeats,
            "cpus": os.cpu_count(),
            "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30),
            "platform": platform.platform(), "python": platform.python_version(),
            "load_average_start": os.getloadavg(),
            "command": "python -m bench.spark_pipeline " + " ".join(argv)}
    import pyarrow
    import pyspark

    meta.update(pyspark=pyspark.__version__, pyarrow=pyarrow.__version__)
    args.work.mkdir(parents=True, exist_ok=True)
    db = BenchDb.open("postgres", args.pg_url)
    samples: list[dict[str, Any]] = []
    try:
        db.reset(TEMPLATE)  # the run's messages, generated once (off the clock)
        db.execute("fill_typed", TEMPLATE, {"count": args.messages, "types": list(TYPES),
                                            "endpoints": list(ENDPOINTS)})
        for repeat in range(args.repeats):
            order = kinds if repeat % 2 == 0 else list(reversed(kinds))
            for kind in order:
                sample = {**one(db, kind, args, args.work), "repeat": repeat}
                samples.append(sample)
                print(json.dumps(sample), flush=True)
    finally:
        db.close()
    first = samples[0]
    if args.drain_only:
        bad = [x for x in samples if x["rows_in_files"] != args.messages or x["drained"] != args.messages]
        if bad:
            raise SystemExit(f"rows written differ from the messages sent: {bad}")
        samples_only = True
    else:
        samples_only = False
    for s in ([] if samples_only else samples):
        if (s["counts"], s["endpoints"], s["messages"]) != (first["counts"], first["endpoints"], first["messages"]) \
                or s["messages"] != args.messages:
            raise SystemExit(f"counts differ: {s['kind']} {s['counts']} vs {first['kind']} {first['counts']}")
    meta["load_average_end"] = os.getloadavg()
    args.out.mkdir(parents=True, exist_ok=True)
    name = "spark_pipeline_drain" if args.drain_only else "spark_pipeline"
    (args.out / f"{name}.json").write_text(json.dumps({"meta": meta, "samples": samples}, indent=1) + "\n")
    text = drain_report(samples, meta) if args.drain_only else report(samples, meta)
    (args.out / f"{name}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
