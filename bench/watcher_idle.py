"""The event trigger's wake-ups: idle statements per minute and send -> event latency, before and after issue 29.

``python -m bench.watcher_idle [--idle-seconds 60] [--trials 12] [--pg-url URL] [--out DIR]``

Runs ``SqlQueueStreamProducer`` (what the triggerer runs for a ``SqlQueueMessageTrigger`` in an
``AssetWatcher``) with the shipped defaults (``poll_interval`` 2 s, idle back-off to 8 s, ``event_interval`` 5 s),
in process, on its own queue per set-up, all set-ups at once:

* SQLite, polling only (before: file wake-ups switched off) and with file wake-ups (after);
* PostgreSQL without the wake-up trigger (polling), and with it (push), whose fallback poll used to run every
  ``poll_interval`` (before) and now backs off like polling (after);
* the plainest fast watcher for comparison: one ``SELECT ... LIMIT 1`` every 0.2 s on a connection of its own.

**Idle load**: statements sent to the database (every ``cursor.execute``, BEGIN and COMMIT included, counted on
the DB-API connections the set-up opened) per minute over ``--idle-seconds`` with nothing sent, after the
back-off settled. **Latency**: per trial, one message after a random idle time of 12-20 s (the back-off at its
longest pause); from the send's commit to the producer yielding its event (the triggerer's side only: Airflow
still stores the event and the scheduler starts the run, about 1 s more on a real deployment).

Writes ``watcher_idle.json`` and ``watcher_idle.md`` under ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
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


class Setup:
    """One watcher: a producer (or the plain poller) on its own queue, its statement counter and latencies."""

    def __init__(self, name: str, url: str, queue: str, *, notify: bool = False, file_watch: bool = True,
                 old_push_fallback: bool = False, plain: bool = False) -> None:
        from airflow_sqlqueue.transport import SqlQueueTransport

        self.name, self.url, self.queue, self.plain = name, url, queue, plain
        self.counter = [0]
        self.latencies: list[float] = []
        self.sender = SqlQueueTransport.from_url(url)
        self.sender.create_queues([queue, error_queue_of(self.queue)], notify=notify)
        self.transport = counted_transport(url, self.counter, file_watch=file_watch,
                                           old_push_fallback=old_push_fallback)
        self.events: asyncio.Queue[float] = asyncio.Queue()
        self.task: asyncio.Task | None = None

    async def start(self) -> None:
        self.task = asyncio.ensure_future(self._plain() if self.plain else self._producer())

    async def _producer(self) -> None:
        from airflow.triggers.shared_stream import AdvanceItem, AdvanceOutcome

        import airflow_sqlqueue.triggers.sqlqueue as module

        producer = module.SqlQueueStreamProducer(conn_id="bench", queue_name=self.queue,
                                                 error_queue=error_queue_of(self.queue))
        use_transport(self.transport)
        stream = producer.open_stream()
        try:
            while True:
                _, number = await anext(stream)
                await self.events.put(time.perf_counter())
                await producer.advance([AdvanceItem(number, AdvanceOutcome(acked=1, failed=0))])
        finally:
            await stream.aclose()
            await producer.aclose()

    async def _plain(self) -> None:
        """The plainest fast watcher: one SELECT every 0.2 s on its own connection (a rollback after it on
        PostgreSQL, counted); a found row is deleted."""
        from airflow_sqlqueue.transport.dialects.connect import connection_factory

        connection = connection_factory(self.url)[0]()
        postgres = self.url.startswith("postgres")
        table = self.transport.dialect.qualified(self.transport.address(self.queue))
        select = f"SELECT seq FROM {table} ORDER BY seq LIMIT 1"  # noqa: S608 - the bench's own table name
        delete = f"DELETE FROM {table}"  # noqa: S608
        try:
            while True:
                cur = connection.cursor()
                cur.execute(select)
                self.counter[0] += 1
                if cur.fetchall():
                    cur.execute(delete)
                    connection.commit()
                    self.counter[0] += 2
                    await self.events.put(time.perf_counter())
                elif postgres:
                    connection.rollback()
                    self.counter[0] += 1
                await asyncio.sleep(0.2)
        finally:
            connection.close()

    async def trial(self, idle: float) -> None:
        await asyncio.sleep(idle)
        while not self.events.empty():
            self.events.get_nowait()
        await asyncio.to_thread(self.sender.send, self.queue, b"ping")
        sent = time.perf_counter()
        got = await asyncio.wait_for(self.events.get(), 60)
        self.latencies.append(got - sent)

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        await asyncio.to_thread(self.transport.close)
        await asyncio.to_thread(self.sender.close)


async def measure(setups: list[Setup], idle_seconds: float, trials: int) -> dict[str, Any]:
    idle = await start_and_count_idle(setups, Setup.start, idle_seconds)
    for _ in range(trials):
        await asyncio.gather(*(s.trial(random.uniform(12, 20)) for s in setups))
    for setup in setups:
        await setup.stop()
    return {s.name: {"idle_statements_per_min": round(idle[s.name], 1),
                     "latency_s": [round(v, 3) for v in s.latencies]} for s in setups}


def table(results: dict[str, Any]) -> str:
    lines = ["| set-up | idle statements/min | send -> event p50 | p95 | trials |", "|---|---:|---:|---:|---:|"]
    for name, r in results.items():
        values = r["latency_s"]
        lines.append(f"| {name} | {r['idle_statements_per_min']:.1f} | {statistics.median(values):.3f} s | "
                     f"{percentile(values, 95):.3f} s | {len(values)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.watcher_idle", description=__doc__.splitlines()[0])
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args(argv)
    with bench_place(args.pg_url, "watcher-idle") as (schema, root):

        def lite(name: str) -> str:
            return f"sqlite:///{root / name}.db"

        def q(table_name: str) -> str:
            return f'"{schema}"."{table_name}"'

        async def scenario() -> dict[str, Any]:
            setups = [
                Setup("SQLite, polling (before)", lite("before"), "events", file_watch=False),
                Setup("SQLite, file wake-ups (after)", lite("after"), "events"),
                Setup("SQLite, plain SELECT every 0.2 s", lite("plain"), "events", plain=True),
                Setup("PostgreSQL, polling (no NOTIFY trigger)", args.pg_url, q("poll")),
                Setup("PostgreSQL, push, fallback every poll_interval (before)", args.pg_url, q("push_before"),
                      notify=True, old_push_fallback=True),
                Setup("PostgreSQL, push, fallback backs off (after)", args.pg_url, q("push_after"), notify=True),
                Setup("PostgreSQL, plain SELECT every 0.2 s", args.pg_url, q("plain"), plain=True),
            ]
            return await measure(setups, args.idle_seconds, args.trials)

        results = asyncio.run(scenario())
    write_results(args.out, "watcher_idle", "Watcher wake-ups (defaults: poll 2 s, back-off to 8 s, event_interval "
                  "5 s)", results, table(results))
    return 0


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    raise SystemExit(main())
