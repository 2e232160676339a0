"""What push wake-ups cost concurrent senders on PostgreSQL, and how fast they wake a waiting watcher.

``python -m bench.wake_writers [--writers 1,8,16] [--repeats 3] [--seconds 3] [--trials 40] [--pg-url URL]``

Throughput: ``--writers`` processes (started once, kept for every round) each send one message per
``transport.send`` for ``--seconds`` into one queue, all at once; the set-ups take turns round by round
(interleaved), each on its own queue:

* ``plain``: no wake-up trigger;
* ``notify always``: the trigger earlier versions installed (``sqlqueue_notify``: a NOTIFY on every send, so every
  commit takes PostgreSQL's global notify lock);
* ``wake lock``: the trigger installed now (``sqlqueue_wake``), nobody waiting (a busy or absent receiver);
* ``notify always, watcher`` and ``wake lock, watcher``: the same with a watcher that receives what comes
  (batches of up to 100) and waits when the queue is empty (``Wakeups``, the triggers' loop): with the wake lock,
  senders notify only while it waits. The watcher's own work shares the machine, so compare these two.

Reported: messages a second per set-up (median of the rounds) and the ratio to ``plain``. Wake-up latency: a
watcher waits on an empty queue (``wake lock`` trigger); after a random pause one plain INSERT on another
connection commits; the time from the commit's return to the watcher's wake-up, ``--trials`` times: p50 and p95.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import statistics
import threading
import time
import uuid
from typing import Any

from .databases import DEFAULT_PG_URL

SETUPS = ("plain", "notify always", "wake lock", "notify always, watcher", "wake lock, watcher")
LEGACY_FUNCTION = '''CREATE OR REPLACE FUNCTION "{schema}".sqlqueue_notify() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN PERFORM pg_notify('sqlqueue', json_build_array(TG_TABLE_SCHEMA, TG_TABLE_NAME)::text); RETURN NULL; END $f$'''
LEGACY_TRIGGER = ('CREATE TRIGGER "{table}_notify" AFTER INSERT ON "{schema}"."{table}" FOR EACH STATEMENT '
                  'EXECUTE FUNCTION "{schema}".sqlqueue_notify()')


def _writer(url: str, error_queue: str, commands: Any, results: Any, start: Any) -> None:
    """A writer process: for each (queue, seconds) command, send single messages until the time is up."""
    from airflow_sqlqueue.transport import SqlQueueTransport

    transport = SqlQueueTransport.from_url(url, error_queue=error_queue)
    body = b'{"n": 1}'
    while (command := commands.get()) is not None:
        queue, seconds = command
        transport.send(queue, body)  # the connection is open before the clock starts
        start.wait()
        sent, end = 0, time.monotonic() + seconds
        while time.monotonic() < end:
            transport.send(queue, body)
            sent += 1
        results.put(sent)
    transport.close()


class Watcher:
    """The ``wake lock, watcher`` set-up's receiver: wait, then receive what is there, as the triggers do."""

    def __init__(self, transport: Any, queue: str) -> None:
        self.transport, self.queue = transport, queue
        self.stop = False
        self.wakeups = transport.wakeups(queue, poll_interval=0.5)
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        self.wakeups.start()
        while not self.stop:
            found = bool(self.transport.receive(self.queue, 100))
            if not found:
                self.wakeups.wait(found=False)

    def __enter__(self) -> Watcher:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop = True
        self.thread.join()
        self.wakeups.close()


def throughput(args: argparse.Namespace, transport: Any, admin: Any, error_queue: str, queues: dict[str, str]
               ) -> dict:
    """Messages a second per writer count and set-up, ``--repeats`` interleaved rounds each."""
    ctx = mp.get_context("spawn")
    out: dict[int, dict[str, list[float]]] = {}
    for writers in args.writers:
        commands, results, start = ctx.Queue(), ctx.Queue(), ctx.Barrier(writers + 1)
        procs = [ctx.Process(target=_writer, args=(args.pg_url, error_queue, commands, results, start),
                             daemon=True) for _ in range(writers)]
        for p in procs:
            p.start()
        rates: dict[str, list[float]] = {s: [] for s in SETUPS}
        for round_no in range(args.repeats):
            order = list(SETUPS) if round_no % 2 == 0 else list(reversed(SETUPS))
            for setup in order:
                admin.execute(f"TRUNCATE {queues[setup]}")
                for _ in procs:
                    commands.put((queues[setup], args.seconds))
                watcher = Watcher(transport, queues[setup]) if setup.endswith("watcher") else None
                if watcher:
                    watcher.__enter__()
                try:
                    start.wait()
                    sent = sum(results.get() for _ in procs)
                finally:
                    if watcher:
                        watcher.__exit__()
                rates[setup].append(sent / args.seconds)
                print(f"  {writers:>2} writers, {setup:<20} round {round_no + 1}: {sent / args.seconds:8.0f} msg/s",
                      flush=True)
        for _ in procs:
            commands.put(None)
        for p in procs:
            p.join()
        out[writers] = rates
    return out


def latency(args: argparse.Namespace, transport: Any, admin: Any, schema: str, queue: str) -> list[float]:
    """Seconds from a plain INSERT's commit (another connection) to the waiting watcher's wake-up."""
    import psycopg

    samples: list[float] = []
    wakeups = transport.wakeups(queue, poll_interval=60)
    wakeups.start()
    try:
        with psycopg.connect(args.pg_url, autocommit=True) as sender:
            for _ in range(args.trials):
                admin.execute(f"TRUNCATE {queue}")
                committed: list[float] = []

                def send(committed: list[float] = committed) -> None:
                    time.sleep(random.uniform(0.02, 0.1))
                    sender.execute(f'INSERT INTO "{schema}"."lat" (id, headers, body) VALUES (%s, %s, %s)',  # noqa: S608
                                   (uuid.uuid4(), "{}", b"x"))
                    committed.append(time.perf_counter())

                before = wakeups.woken
                timer = threading.Thread(target=send)
                timer.start()
                while wakeups.woken == before:  # the first wait after a wake-up asks for wake-ups and returns
                    wakeups.wait(found=False)
                at = time.perf_counter()
                timer.join()
                samples.append(max(0.0, at - committed[0]))
    finally:
        wakeups.close()
    return samples


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.wake_writers", description=__doc__.splitlines()[0])
    parser.add_argument("--writers", type=lambda v: [int(x) for x in v.split(",")], default=[1, 8, 16])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL)
    args = parser.parse_args(argv)

    import psycopg

    from airflow_sqlqueue.transport import SqlQueueTransport

    schema = "bench_wake_" + uuid.uuid4().hex[:8]
    with psycopg.connect(args.pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    error_queue = f'"{schema}"."error"'
    transport = SqlQueueTransport.from_url(args.pg_url, error_queue=error_queue)
    admin = psycopg.connect(args.pg_url, autocommit=True)
    try:
        tables = {"plain": "plain", "notify always": "always", "wake lock": "lock",
                  "notify always, watcher": "always_watched", "wake lock, watcher": "lock_watched"}
        queues = {setup: f'"{schema}"."{table}"' for setup, table in tables.items()}
        for setup, queue in queues.items():
            transport.create_queue(queue, notify=setup.startswith("wake lock"))
        with psycopg.connect(args.pg_url, autocommit=True) as conn:
            conn.execute(LEGACY_FUNCTION.format(schema=schema))
            for table in ("always", "always_watched"):
                conn.execute(LEGACY_TRIGGER.format(schema=schema, table=table))
        transport.create_queue(f'"{schema}"."lat"', notify=True)
        rates = throughput(args, transport, admin, error_queue, queues) if args.repeats else {}
        print("\nwriters | " + " | ".join(SETUPS))
        for writers, by_setup in rates.items():
            plain = statistics.median(by_setup["plain"])
            cells = [f"{statistics.median(v):.0f} msg/s ({statistics.median(v) / plain:.2f}x)"
                     for v in by_setup.values()]
            print(f"{writers} | " + " | ".join(cells))
        if args.trials:
            samples = latency(args, transport, admin, schema, f'"{schema}"."lat"')
            print(f"\nwake-up after a plain INSERT's commit, {len(samples)} trials: "
                  f"p50 {_pct(samples, 0.5) * 1000:.1f} ms, p95 {_pct(samples, 0.95) * 1000:.1f} ms")
    finally:
        transport.close()
        admin.close()
        with psycopg.connect(args.pg_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


if __name__ == "__main__":
    main()
