"""The event trigger's batching by send pattern: send -> event p50/p95 for isolated sends, one send a second and
bursts, the trigger as it was before issue 29's pipelining beside the current one, and idle statements per minute.

``python -m bench.watcher_patterns [--steady-seconds 60] [--trials 8] [--store-delay 2] [--pg-url URL] [--out DIR]``

Runs ``SqlQueueStreamProducer`` (what the triggerer runs for a ``SqlQueueMessageTrigger`` in an ``AssetWatcher``)
in process with the shipped example's settings (``poll_interval`` 2 s, idle back-off to 8 s, ``event_interval``
5 s, ``min_event_interval`` 2 s), on SQLite (file wake-ups) and PostgreSQL (push), all set-ups at once, each on its
own queue:

* **before**: ``triggers/sqlqueue.py`` of ``--before-ref`` (the next claim only after the previous event was
  acknowledged; an event on a short gap holds back its newest message);
* **after**: the current trigger.

As in the triggerer, the next event is taken at once and each is acknowledged ``--store-delay`` seconds after it
was yielded, in order (Airflow 3.3 confirms an event about two triggerer passes, ~2 s, after it is emitted; 0.2 s
understates that). Patterns, in this order: idle statements per minute over ``--idle-seconds``; ``--trials``
isolated sends after 6-10 s of quiet; one send a second for ``--steady-seconds``; ``--trials`` bursts of 20 (one
transaction each) after 6-10 s of quiet. Latency is from just before the send call (on SQLite a send waits while a
claim holds the write lock) to the producer yielding the event that carries it (the triggerer's side: Airflow then
stores the event and the scheduler starts the run, about 1 s more).

Writes ``watcher_patterns.json`` and ``watcher_patterns.md`` under ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from .databases import DEFAULT_PG_URL
from .latency import percentile
from .watcher_common import (
    bench_place,
    counted_transport,
    error_queue_of,
    start_and_count_idle,
    use_transport,
    write_results,
)

PATTERNS = ("isolated", "1/s", "burst of 20")


class Watcher:
    """One producer on its own queue: the commit time of each sent id, the yield time of each emitted id."""

    def __init__(self, name: str, url: str, queue: str, *, min_event_interval: float, notify: bool,
                 store_delay: float, module: Any = None) -> None:
        from airflow_sqlqueue.transport import SqlQueueTransport

        self.name, self.url, self.queue, self.module = name, url, queue, module
        self.min_event_interval, self.store_delay = min_event_interval, store_delay
        self.counter = [0]
        self.sender = SqlQueueTransport.from_url(url)
        self.sender.create_queues([queue, error_queue_of(queue)], notify=notify)
        self.transport = counted_transport(url, self.counter)
        self.sent: dict[str, tuple[str, float]] = {}
        self.emitted: dict[str, float] = {}
        self.events = 0
        self.task: asyncio.Task | None = None

    async def start(self) -> None:
        from airflow.triggers.shared_stream import AdvanceItem, AdvanceOutcome

        import airflow_sqlqueue.triggers.sqlqueue as current

        module = self.module or current
        producer = module.SqlQueueStreamProducer(conn_id="bench", queue_name=self.queue,
                                                 error_queue=error_queue_of(self.queue),
                                                 min_event_interval=self.min_event_interval)
        use_transport(self.transport, module)

        acks: asyncio.Queue = asyncio.Queue()

        async def pump() -> None:  # as the triggerer's advance pump: in order, one advance at a time
            while True:
                number, due = await acks.get()
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
                await producer.advance([AdvanceItem(number, AdvanceOutcome(acked=1, failed=0))])

        async def loop() -> None:  # as the triggerer's manager: takes the next event without waiting for acks
            stream = producer.open_stream()
            acker = asyncio.ensure_future(pump())
            try:
                while True:
                    payload, number = await anext(stream)
                    now = time.perf_counter()
                    self.events += 1
                    for item in payload["messages"]:
                        self.emitted.setdefault(str(item["id"]), now)
                    acks.put_nowait((number, now + self.store_delay))
            finally:
                acker.cancel()
                await asyncio.gather(acker, return_exceptions=True)
                await stream.aclose()
                await producer.aclose()

        self.task = asyncio.ensure_future(loop())

    async def send(self, pattern: str, count: int = 1) -> None:
        from airflow_sqlqueue.transport import OutgoingMessage

        started = time.perf_counter()  # the sender's view: on SQLite a send waits while a claim holds the lock
        ids = await asyncio.to_thread(self.sender.send_many, self.queue,
                                      [OutgoingMessage(body=b"ping") for _ in range(count)])
        for message_id in ids:
            self.sent[str(message_id)] = (pattern, started)

    async def drained(self, timeout: float = 60) -> None:
        deadline = time.perf_counter() + timeout
        while set(self.sent) - set(self.emitted) and time.perf_counter() < deadline:
            await asyncio.sleep(0.1)

    def latencies(self) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {p: [] for p in PATTERNS}
        for message_id, (pattern, committed) in self.sent.items():
            if message_id in self.emitted:
                out[pattern].append(self.emitted[message_id] - committed)
        return out

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        await asyncio.to_thread(self.transport.close)
        await asyncio.to_thread(self.sender.close)


async def measure(watchers: list[Watcher], args: argparse.Namespace) -> dict[str, Any]:
    idle = await start_and_count_idle(watchers, Watcher.start, args.idle_seconds)
    for _ in range(args.trials):
        await asyncio.sleep(random.uniform(6, 10))
        await asyncio.gather(*(w.send("isolated") for w in watchers))
    await asyncio.sleep(random.uniform(6, 10))
    events_before = {w.name: w.events for w in watchers}
    start = time.perf_counter()
    for second in range(int(args.steady_seconds)):
        await asyncio.sleep(max(0.0, start + second - time.perf_counter()))
        await asyncio.gather(*(w.send("1/s") for w in watchers))
    await asyncio.gather(*(w.drained() for w in watchers))
    steady_events = {w.name: w.events - events_before[w.name] for w in watchers}
    for _ in range(args.trials):
        await asyncio.sleep(random.uniform(6, 10))
        await asyncio.gather(*(w.send("burst of 20", 20) for w in watchers))
    await asyncio.gather(*(w.drained() for w in watchers))
    results = {}
    for watcher in watchers:
        results[watcher.name] = {
            "idle_statements_per_min": round(idle[watcher.name], 1),
            "events_per_min_at_1_per_s": round(steady_events[watcher.name] * 60 / args.steady_seconds, 1),
            "lost": len(set(watcher.sent) - set(watcher.emitted)),
            "latency_s": {p: [round(v, 3) for v in values] for p, values in watcher.latencies().items()}}
        await watcher.stop()
    return results


def load_before(ref: str) -> Any:
    """``airflow_sqlqueue/triggers/sqlqueue.py`` as it was at ``ref``, loaded as a module of its own."""
    import importlib.util
    import subprocess

    source = subprocess.run(["git", "show", f"{ref}:airflow_sqlqueue/triggers/sqlqueue.py"], check=True,
                            capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1]).stdout
    path = Path(tempfile.mkdtemp(prefix="sqlqueue-before-")) / "sqlqueue_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("sqlqueue_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def table(results: dict[str, Any]) -> str:
    lines = ["| set-up | idle statements/min | pattern | send -> event p50 | p95 | messages | events/min at 1/s |",
             "|---|---:|---|---:|---:|---:|---:|"]
    for name, r in results.items():
        for pattern, values in r["latency_s"].items():
            if values:
                lines.append(f"| {name} | {r['idle_statements_per_min']:.0f} | {pattern} | "
                             f"{statistics.median(values):.2f} s | {percentile(values, 95):.2f} s | {len(values)} | "
                             f"{r['events_per_min_at_1_per_s']:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.watcher_patterns", description=__doc__.splitlines()[0])
    parser.add_argument("--idle-seconds", type=float, default=40.0)
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--steady-seconds", type=float, default=60.0)
    parser.add_argument("--store-delay", type=float, default=2.0)
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL)
    parser.add_argument("--before-ref", default="0d805f8",
                        help="git commit whose triggers/sqlqueue.py is the 'before' set-up (default: before issue 29's "
                             "pipelining)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args(argv)
    before = load_before(args.before_ref)
    with bench_place(args.pg_url, "watcher-patterns") as (schema, root):

        async def scenario() -> dict[str, Any]:
            watchers = []
            for label, module in (("before", before), ("after", None)):
                watchers.append(Watcher(f"SQLite, {label}", f"sqlite:///{root / label}.db", "events",
                                        min_event_interval=2.0, notify=False, store_delay=args.store_delay,
                                        module=module))
                watchers.append(Watcher(f"PostgreSQL push, {label}", args.pg_url, f'"{schema}"."{label}"',
                                        min_event_interval=2.0, notify=True, store_delay=args.store_delay,
                                        module=module))
            return await measure(watchers, args)

        results = asyncio.run(scenario())
    write_results(args.out, "watcher_patterns", "Watcher batching by send pattern (poll 2 s, back-off to 8 s, "
                  "event_interval 5 s, min_event_interval 2 s, "
                  f"acks {args.store_delay:g} s after each event; before: the trigger of {args.before_ref}, after: "
                  "now)", results, table(results))
    return 0



if __name__ == "__main__":
    threading.current_thread().name = "bench"
    raise SystemExit(main())
