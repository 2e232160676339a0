#!/usr/bin/env python3
"""Pressure at saturation without the harness: the adapter (``main.py``) with a depth-target producer and N
receivers, then the harness's two pressure phases done here the way its hooks do them.

Phases (each ``--phase-s`` seconds after a ``--warmup-s`` warm-up): ``clean``; ``idle`` (one connection:
``BEGIN; SELECT txid_current()``, then idle until the phase ends: the xmin horizon is held); ``readers`` (4
REPEATABLE READ connections each running ``SELECT count(*)`` of the queue table every 0.1 s in one transaction);
``recovery``. Prints one JSON line per run: the median completed/s of the adapter's samples whose whole window
lies inside each phase, its share of clean, and the queue table's dead tuples (median / max, sampled every 2 s).

``--pythonpath`` runs the adapter on another copy of the package (``git archive <commit> airflow_sqlqueue``):
the way a before/after pair is run interleaved on one database.

    python pressure.py --url postgresql://bench:bench@127.0.0.1:15556/sqlqueue_bench [--pythonpath DIR]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
from psycopg import sql

HERE = Path(__file__).resolve().parent
QUEUE = "portable_bench"


def hold_idle(url: str, stop: threading.Event, ready: threading.Event) -> None:
    """The harness's idle-in-tx: a transaction with an xid, idle until ``stop``."""
    with psycopg.connect(url, autocommit=False) as conn:
        conn.execute("SELECT txid_current()").fetchone()
        ready.set()
        stop.wait()
        conn.rollback()


def reader(url: str, stop: threading.Event) -> None:
    """The harness's active reader: one REPEATABLE READ transaction scanning the queue table every 0.1 s."""
    with psycopg.connect(url, autocommit=False) as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        while not stop.is_set():
            try:
                conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier("public", QUEUE))).fetchall()
            except psycopg.Error:
                pass
            time.sleep(0.1)
        conn.rollback()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--pythonpath", default="", help="a directory holding another airflow_sqlqueue (before/after)")
    ap.add_argument("--label", default="")
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--depth", type=int, default=4000)
    ap.add_argument("--warmup-s", type=float, default=20)
    ap.add_argument("--phase-s", type=float, default=40)
    ap.add_argument("--phases", default="clean,idle,readers,recovery")
    ap.add_argument("--receiver", default="pump")
    args = ap.parse_args()

    with psycopg.connect(args.url, autocommit=True) as conn:  # a fresh table per run
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}, {}").format(sql.Identifier("public", QUEUE),
                                                                   sql.Identifier("public", QUEUE + "_error")))
    env = {**os.environ, "DATABASE_URL": args.url, "PRODUCER_MODE": "depth-target", "TARGET_DEPTH": str(args.depth),
           "PRODUCER_RATE": "50000", "WORKER_COUNT": str(args.workers), "JOB_WORK_MS": "1", "SAMPLE_EVERY_S": "2",
           "SQLQUEUE_RECEIVER": args.receiver}
    if args.pythonpath:
        env["PYTHONPATH"] = args.pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.Popen([args.python, "main.py"], cwd=HERE, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    samples: list[tuple[float, float]] = []  # (end of the sample's window, completed/s)

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("metric") == "completion_rate":
                end = dt.datetime.fromisoformat(rec["t"].replace("Z", "+00:00")).timestamp()
                samples.append((end, float(rec["value"])))

    threading.Thread(target=read, daemon=True).start()
    dead: dict[str, list[int]] = {}
    bounds: dict[str, tuple[float, float]] = {}
    try:
        time.sleep(args.warmup_s)
        with psycopg.connect(args.url, autocommit=True) as stats:
            for phase in args.phases.split(","):
                stop, ready = threading.Event(), threading.Event()
                threads: list[threading.Thread] = []
                if phase == "idle":
                    threads.append(threading.Thread(target=hold_idle, args=(args.url, stop, ready), daemon=True))
                elif phase == "readers":
                    threads += [threading.Thread(target=reader, args=(args.url, stop), daemon=True) for _ in range(4)]
                for t in threads:
                    t.start()
                if phase == "idle":
                    ready.wait(5)
                start = time.time()
                end = start + args.phase_s
                dead[phase] = []
                while time.time() < end:
                    row = stats.execute("SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = %s",
                                        (QUEUE,)).fetchone()
                    dead[phase].append(int(row[0]) if row else 0)
                    time.sleep(2)
                bounds[phase] = (start, time.time())
                stop.set()
                for t in threads:
                    t.join(5)
    finally:
        proc.terminate()
        proc.wait(15)
    result: dict[str, object] = {"label": args.label, "pythonpath": args.pythonpath, "workers": args.workers}
    clean = None
    for phase, (start, end) in bounds.items():
        inside = [v for t, v in samples if t - 2 >= start - 0.5 and t <= end + 0.5]
        median = statistics.median(inside) if inside else 0.0
        clean = median if phase == "clean" else clean
        result[phase] = {"done_s": round(median, 1), "share": round(median / clean, 3) if clean else None,
                         "samples": len(inside), "dead_median": int(statistics.median(dead[phase] or [0])),
                         "dead_max": max(dead[phase] or [0])}
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
