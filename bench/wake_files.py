"""How fast a SQLite watcher wakes for a row another process commits (no wake-up trigger: the database's files).

``python -m bench.wake_files [--trials 60] [--mode blocking|async|both] [--watch inotify|stat|both]``

A watcher (``transport.wakeups``, ``poll_interval`` 60 s, so only a wake-up ends a wait in time) waits on an
empty queue in this process; a sender process started once (plain ``sqlite3``, as any other program writes the
file) commits one ``INSERT`` after a random 20-100 ms and reports its commit's time (``CLOCK_MONOTONIC``, the same
clock in both processes). The figure: from that commit's return to the wake-up whose look finds the row (the
watcher looks after each wake-up; a wake-up can come before the commit is visible, and its look find
nothing; below 0: the wake-up came before the sender's ``commit()`` returned), p50, p95 and max, ``--trials`` times,
for the blocking wait (a pump's, ``Wakeups.wait``) and the event loop's (``wait_async``, the triggers'), with
inotify (Linux) and with the stat of the files alone. Also the watcher's CPU while it waits (share of one core)
and its looks per trial.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import random
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any


def _now() -> float:
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def _sender(path: str, commands: Any, results: Any) -> None:
    """Another program: one plain INSERT per command, after a random pause; reports the commit's time."""
    import sqlite3

    conn = sqlite3.connect(path, timeout=60)
    while commands.get() is not None:
        time.sleep(random.uniform(0.02, 0.1))
        conn.execute("INSERT INTO orders (id, expires, headers, body) VALUES (?, NULL, ?, ?)",
                     (str(uuid.uuid4()), "{}", b"x"))
        conn.commit()
        results.put(_now())
    conn.close()


def measure(mode: str, trials: int, transport: Any, commands: Any, results: Any) -> dict[str, float]:
    """Latencies (seconds) of ``trials`` sends from the other process, the watcher's CPU share, its looks."""
    samples: list[float] = []
    looks = 0
    wakeups = transport.wakeups("orders", poll_interval=60)
    wakeups.start()
    cpu, began = time.process_time(), _now()
    try:
        for _ in range(trials):
            transport.receive("orders", 10)
            wakeups.changed()  # forget what was seen before the trial
            commands.put(1)
            while True:
                if mode == "blocking":
                    wakeups.wait(found=False)
                else:
                    asyncio.run(wakeups.wait_async(found=False))
                looks += 1
                woken = _now()
                if transport.receive("orders", 10):
                    break
            samples.append(woken - results.get())
    finally:
        wakeups.close()
    ordered = sorted(samples)
    return {"trials": len(samples), "p50": statistics.median(samples),
            "p95": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], "max": ordered[-1],
            "cpu": (time.process_time() - cpu) / (_now() - began), "looks": looks / max(1, len(samples))}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.wake_files", description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=60)
    parser.add_argument("--mode", choices=("blocking", "async", "both"), default="both")
    parser.add_argument("--watch", choices=("inotify", "stat", "both"), default="both")
    args = parser.parse_args(argv)

    from airflow_sqlqueue.transport import SqlQueueTransport
    from airflow_sqlqueue.transport.operations import wakeups as module

    root = Path(tempfile.mkdtemp(prefix="sqlqueue-wake-files-"))
    path = str(root / "wake.db")
    transport = SqlQueueTransport.from_url(f"sqlite:///{path}")
    transport.create_queues(["orders", "error"])
    ctx = mp.get_context("spawn")
    commands, results = ctx.Queue(), ctx.Queue()
    sender = ctx.Process(target=_sender, args=(path, commands, results), daemon=True)
    sender.start()
    try:
        opener = module.open_file_events
        for watch in ("inotify", "stat") if args.watch == "both" else (args.watch,):
            module.open_file_events = opener if watch == "inotify" else (lambda path: None)
            for mode in ("blocking", "async") if args.mode == "both" else (args.mode,):
                r = measure(mode, args.trials, transport, commands, results)
                print(f"{watch:<7} {mode:<8} another process's commit -> the row found, {r['trials']} trials: p50 "
                      f"{r['p50'] * 1000:.1f} ms, p95 {r['p95'] * 1000:.1f} ms, max {r['max'] * 1000:.1f} ms; "
                      f"{r['looks']:.1f} looks a trial; watcher CPU {r['cpu']:.1%} of a core", flush=True)
    finally:
        commands.put(None)
        sender.join()
        transport.close()
        for file in root.iterdir():
            file.unlink()
        root.rmdir()


if __name__ == "__main__":
    main()
