"""Partitioned drain throughput on PostgreSQL: one backlog drained by 1, 2 and 4 processes, each running what a
mapped ``SqlQueuePartitionDrainOperator`` task runs for its partition.

usage: python -m bench.partitions [--messages 1000000] [--tasks 1,2,4] [--batch-size 1000] [--receivers 1]
                                  [--pg-url URL] [--out DIR]

For each number of tasks N: the queue is filled with ``--messages`` NServiceBus-shaped rows (one INSERT ...
SELECT, not timed) and vacuumed; ``plan_partitions(partitions=N)`` splits it; N processes (spawned, connected,
then released together) each drain their partition with ``--receivers`` receivers: every batch is written as a
Parquet file (fsync'ed, renamed into place) and recorded in a manifest file (fsync'ed) before its receive commits,
as the operator records it in the task state store. Timed: from the release to the last process done. Checked:
every message delivered once, queue empty. Prints a table and writes ``partitions.json`` and ``partitions.md``
under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from .databases import DEFAULT_PG_URL, BenchDb

QUEUE = "partitioned"


def _write_manifest(path: Path, manifest: dict[str, Any]) -> None:
    """The stand-in for the task state store: the manifest rewritten whole and fsync'ed."""
    temp = path.with_name(f".{path.name}.tmp")
    with open(temp, "w", encoding="utf-8") as f:
        json.dump(manifest, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, path)


def drain_partition(url: str, queue: str, error_queue: str, partition: dict[str, Any], out: str, batch_size: int,
                    receivers: int, ready: Any, go: Any, results: Any) -> None:
    """One mapped-task equivalent: connect, wait for ``go``, drain the partition to Parquet with a manifest."""
    os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="sqlqueue-bench-airflow-"))
    from airflow_sqlqueue.operators.parquet import ParquetBatchWriter
    from airflow_sqlqueue.transport import Partition, SqlQueueTransport

    part = Partition.from_dict(partition)
    writer = ParquetBatchWriter(out)
    manifest_path = Path(out) / f"_manifest-p{part.index}.json"
    manifest: dict[str, Any] = {"partition": partition, "files": [], "delivered": 0}
    ids: list[str] = []
    with SqlQueueTransport.from_url(url, error_queue=error_queue) as transport:
        transport.peek(queue)  # connected before the clock starts
        ready.put(part.index)
        go.wait()
        started = time.monotonic()

        def sink(messages: list[Any]) -> int:
            path = writer.write(messages, f"p{part.index}-{len(manifest['files']):06d}.parquet")
            manifest["files"].append(path)
            manifest["delivered"] += len(messages)
            _write_manifest(manifest_path, manifest)
            ids.extend(str(m.id) for m in messages)
            return len(messages)

        summary = transport.drain(queue, sink, batch_size=batch_size, concurrency=receivers, partition=part)
        ended = time.monotonic()
    results.put({"index": part.index, "delivered": summary.delivered, "batches": summary.batches,
                 "started": started, "ended": ended, "ids_unique": len(set(ids)) == len(ids)})


def run_once(db: BenchDb, tasks: int, messages: int, batch_size: int, receivers: int, workdir: Path) -> dict[str, Any]:
    """Fill, plan ``tasks`` partitions, drain them in ``tasks`` processes; the figures of that run."""
    db.reset(QUEUE)
    db.fill(QUEUE, messages)
    db.vacuum(QUEUE)
    transport = db.transport()
    try:
        queue, error = db.address(QUEUE), db.address("error")
        plan = transport.plan_partitions(queue, partitions=tasks)
    finally:
        transport.close()
    out = workdir / f"tasks-{tasks}"
    out.mkdir(parents=True)
    ctx = mp.get_context("spawn")
    ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    processes = [ctx.Process(target=drain_partition, args=(db.url, queue, error, p.as_dict(), str(out), batch_size,
                                                           receivers, ready, go, results)) for p in plan]
    for process in processes:
        process.start()
    for _ in processes:
        ready.get(timeout=300)
    released = time.monotonic()
    go.set()
    parts = [results.get(timeout=3600) for _ in processes]
    for process in processes:
        process.join()
        if process.exitcode != 0:
            raise RuntimeError(f"a drain process exited with {process.exitcode}")
    seconds = max(p["ended"] for p in parts) - released
    delivered = sum(p["delivered"] for p in parts)
    check = db.transport()
    try:
        left = check.peek(db.address(QUEUE))
    finally:
        check.close()
    if delivered != messages or left != 0 or not all(p["ids_unique"] for p in parts):
        raise AssertionError(f"{tasks} tasks: delivered {delivered} of {messages}, {left} left in the queue")
    return {"tasks": tasks, "receivers_per_task": receivers, "messages": messages, "batch_size": batch_size,
            "seconds": round(seconds, 2), "messages_per_s": round(delivered / seconds),
            "per_task_seconds": sorted(round(p["ended"] - p["started"], 2) for p in parts),
            "files": sum(p["batches"] for p in parts)}


def markdown(rows: list[dict[str, Any]], info: dict[str, Any]) -> str:
    base = rows[0]["messages_per_s"]
    lines = ["| mapped tasks (processes) | receivers each | messages | seconds | messages/s | ratio to 1 task |",
             "|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['tasks']} | {r['receivers_per_task']} | {r['messages']:,} | {r['seconds']:.1f} | "
              f"{r['messages_per_s']:,} | {r['messages_per_s'] / base:.2f} |" for r in rows]
    lines.append("")
    lines.append(f"{info['cpus']} CPUs, PostgreSQL {info['postgres']}, load average before the run "
                 f"{info['load_average'][0]:.2f}, {info['date']}, commit {info.get('commit', '?')}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from . import __main__ as bench_main

    parser = argparse.ArgumentParser(prog="python -m bench.partitions", description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--tasks", default="1,2,4", help="numbers of mapped tasks (processes), comma-separated")
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--receivers", type=int, default=1, help="receivers (max_concurrency) per task")
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args(argv)
    info = bench_main.machine(args.pg_url)
    db = BenchDb.open("postgres", args.pg_url)
    rows = []
    try:
        with db.transport() as transport:
            transport.create_queues([db.address(QUEUE), db.address("error")])
        for tasks in (int(t) for t in args.tasks.split(",")):
            row = run_once(db, tasks, args.messages, args.batch_size, args.receivers, db.workdir)
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        db.close()
    table = markdown(rows, info)
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "partitions.json").write_text(json.dumps({"machine": info, "rows": rows}, indent=2) + "\n")
    (args.out / "partitions.md").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
