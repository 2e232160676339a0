"""The hand drain and the provider's drain to Parquet, alternated in short rounds so both meet the same load.

On a shared machine whose load swings within minutes, two 1,000,000-message drains minutes apart compare the load,
not the code. Here ``--messages`` are split into ``--rounds`` pairs of queues (filled and checkpointed first, off
the clock: one round's messages generated once and copied into every queue, the same rows for both); round i
drains hand queue i and provider queue i back to back (who goes first turns around every round), each to its own
folder. Reports each round's throughput ratio and the median, and the
totals (both drained ``--messages``).

    SQLQUEUE_BENCH_PG_URL=postgresql://... python -m bench.drain_rounds --messages 1000000 --rounds 10 \\
        --work /scratch/drain-rounds
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .databases import DEFAULT_PG_URL, BenchDb
from .hand_pipeline import drain as hand_drain
from .spark_pipeline import ENDPOINTS, TYPES


def provider_drain(db: BenchDb, queue: str, directory: Path, *, batch: int, receivers: int) -> int:
    """``transport.drain`` with the drain operator's ``ParquetBatchWriter`` as the sink (as bench.spark_pipeline)."""
    from airflow_sqlqueue.operators.parquet import ParquetBatchWriter

    target = ParquetBatchWriter(str(directory))

    def sink(batch: Any) -> int:  # a ReceivedColumns, as the operator's Parquet drain receives
        target.write(batch, f"{queue}-{uuid.uuid4().hex}.parquet")
        return len(batch)

    with db.transport() as transport:
        return transport.drain(db.address(queue), sink, batch_size=batch, concurrency=receivers,
                               columns=True).delivered


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m bench.drain_rounds", description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--receivers", type=int, default=2)
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args(argv)
    import pyarrow.parquet as pq

    import airflow_sqlqueue.operators.parquet  # noqa: F401 - imported now, not on the clock

    per_round = args.messages // args.rounds
    meta = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "messages": per_round * args.rounds,
            "rounds": args.rounds, "batch_size": args.batch_size, "receivers": args.receivers,
            "cpus": os.cpu_count(), "load_average_start": os.getloadavg(),
            "command": "python -m bench.drain_rounds " + " ".join(argv)}
    db = BenchDb.open("postgres", args.pg_url)
    samples: list[dict[str, Any]] = []
    try:
        db.reset("template")  # one round's messages generated once, copied into every queue
        db.execute("fill_typed", "template", {"count": per_round, "types": list(TYPES), "endpoints": list(ENDPOINTS)})
        for i in range(args.rounds):
            for kind in ("hand", "provider"):
                db.reset(f"{kind}_{i}")
                db.execute("copy_typed", f"{kind}_{i}", template="template")
                db.vacuum(f"{kind}_{i}")
        db.execute("drop_queue", "template")
        for kind, drain in (("hand", hand_drain), ("provider", provider_drain)):  # first-use costs, off the clock
            db.reset(f"warm_{kind}")
            db.execute("fill_typed", f"warm_{kind}", {"count": 2000, "types": list(TYPES),
                                                      "endpoints": list(ENDPOINTS)})
            drain(db, f"warm_{kind}", args.work / f"warm_{kind}", batch=args.batch_size, receivers=args.receivers)
        db.settle()
        for i in range(args.rounds):
            for kind in (("hand", "provider") if i % 2 == 0 else ("provider", "hand")):
                folder = args.work / f"{kind}_{i}"
                drain = hand_drain if kind == "hand" else provider_drain
                started = time.monotonic()
                count = drain(db, f"{kind}_{i}", folder, batch=args.batch_size, receivers=args.receivers)
                seconds = time.monotonic() - started
                rows = sum(pq.ParquetFile(p).metadata.num_rows for p in folder.glob("*.parquet"))
                shutil.rmtree(folder, ignore_errors=True)
                if count != per_round or rows != per_round:
                    raise SystemExit(f"round {i} {kind}: drained {count}, {rows} rows in files, {per_round} sent")
                sample = {"round": i, "kind": kind, "seconds": round(seconds, 3), "load": os.getloadavg()[0]}
                samples.append(sample)
                print(json.dumps(sample), flush=True)
    finally:
        db.close()
        shutil.rmtree(args.work, ignore_errors=True)
    meta["load_average_end"] = os.getloadavg()
    by = {(s["round"], s["kind"]): s["seconds"] for s in samples}
    ratios = [by[(i, "hand")] / by[(i, "provider")] for i in range(args.rounds)]
    hand_total = sum(by[(i, "hand")] for i in range(args.rounds))
    provider_total = sum(by[(i, "provider")] for i in range(args.rounds))
    lines = [f"Run of {meta['date']}: {meta['messages']:,} messages drained by each (PostgreSQL, batches of "
             f"{args.batch_size}, {args.receivers} receivers) in {args.rounds} rounds of {per_round:,}, hand and "
             f"provider back to back (order turned around every round). Machine: {meta['cpus']} cores, shared "
             f"(load average {meta['load_average_start'][0]:.1f} at the start, "
             f"{meta['load_average_end'][0]:.1f} at the end).", "",
             "| round | hand s | provider s | provider vs hand (throughput) |", "|---:|---:|---:|---:|"]
    lines += [f"| {i + 1} | {by[(i, 'hand')]:.2f} | {by[(i, 'provider')]:.2f} | {ratios[i]:.2f}x |"
              for i in range(args.rounds)]
    lines += ["", f"Median of the rounds: **{statistics.median(ratios):.2f}x**; totals: hand {hand_total:.1f} s "
              f"({meta['messages'] / hand_total:,.0f} msg/s), provider {provider_total:.1f} s "
              f"({meta['messages'] / provider_total:,.0f} msg/s), {hand_total / provider_total:.2f}x.", "",
              f"Command: `{meta['command']}`", ""]
    text = "\n".join(lines)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "drain_rounds.json").write_text(json.dumps({"meta": meta, "samples": samples}, indent=1) + "\n")
    (args.out / "drain_rounds.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
