"""What push wake-ups cost concurrent senders on PostgreSQL, and how fast they wake a waiting watcher.

``python -m bench.wake_writers [--writers 1,8,16] [--repeats 3] [--seconds 3] [--trials 40] [--pg-url URL]``

Throughput: ``--writers`` processes (started once, kept for every round) each send one message per
``transport.send`` for ``--seconds`` into one queue, all at once; the set-ups take turns round by round
(interleaved), each on its own queue:

* ``plain``: no wake-up trigger;
* ``empty trigger``: a statement-level trigger whose body returns at once, nobody receiving: what calling a
  plpgsql trigger costs a send;
* ``plain, polling watcher``: no trigger, and a watcher that receives (batches of up to 100) at the receive rate
  the ``wake lock, watcher`` set-up's watcher had in its latest round, sleeping between empty receives: the
  watcher's own work on the shared cores without any NOTIFY (to tell that cost from the notify lock's);
* ``empty trigger, polling watcher``: a statement-level trigger whose body returns at once, and the polling
  watcher: what executing a plpgsql trigger costs a send;
* ``wake lock, polling watcher``: the trigger installed now with the polling watcher (which never waits, so every
  statement takes the wake-up lock shared and nothing notifies): the trigger's advisory-lock test without NOTIFY;
* ``wake lock``: the trigger installed now (``sqlqueue_wake``), nobody waiting (a busy or absent receiver);
* ``wake lock, watcher``: the same with a watcher that receives what comes (batches of up to 100) and waits when
  the queue is empty (``Wakeups``, the triggers' loop): senders notify only while it waits, one transaction at a
  time (the others rely on the notification in flight);
* ``uncoalesced, watcher``: the previous ``sqlqueue_wake`` (every send notifies while the watcher waits), same
  watcher;
* ``notify always, watcher``: the trigger earlier versions installed (``sqlqueue_notify``: a NOTIFY on every
  send, so every commit takes PostgreSQL's global notify lock), same watcher.

Reported: messages a second per set-up (median of the rounds) and the ratio to ``plain``; then, per set-up, the
ratio to ``plain`` round by round (the two ran next to each other: the drift of a shared machine between rounds
cancels), its median with a bootstrap 95 % interval, and a sign test against ``--floor`` (default 0.95): how many
rounds fell below it and the one-sided p-values for "the median is below" and for "the median is above". Many
short rounds (``--repeats 30 --seconds 1.5``) make these tight; ``--setups`` runs only some set-ups (``plain``
always). Per set-up with a watcher, the NOTIFYs a second (counted on a bare LISTEN connection), the watcher's
receives a second and its client CPU (share of one core). Wake-up latency: a
watcher waits on an empty queue (``wake lock`` trigger); after a random pause one plain INSERT on another
connection commits; the time from the commit's return to the watcher's wake-up, ``--trials`` times: p50 and p95.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import random
import statistics
import threading
import time
import uuid
from typing import Any

from .databases import DEFAULT_PG_URL, checkpoint

SETUPS = ("plain", "empty trigger", "plain, polling watcher", "empty trigger, polling watcher",
          "wake lock, polling watcher", "wake lock", "wake lock, watcher", "uncoalesced, watcher",
          "notify always, watcher")
TABLES = {"plain": "plain", "empty trigger": "empty", "plain, polling watcher": "polled",
          "empty trigger, polling watcher": "empty_polled",
          "wake lock, polling watcher": "lock_polled", "wake lock": "lock",
          "wake lock, watcher": "lock_watched", "uncoalesced, watcher": "uncoalesced",
          "notify always, watcher": "always"}
#: The wake-up function before coalescing: every send notifies while a watcher waits.
UNCOALESCED_FUNCTION = '''CREATE OR REPLACE FUNCTION "{schema}".sqlqueue_wake_uncoalesced() RETURNS trigger
LANGUAGE plpgsql AS $f$ BEGIN
IF NOT pg_try_advisory_xact_lock_shared(1644256948, TG_RELID::integer) THEN
PERFORM pg_notify('sqlqueue', json_build_array(TG_TABLE_SCHEMA, TG_TABLE_NAME)::text); END IF; RETURN NULL; END $f$'''
UNCOALESCED_TRIGGER = ('CREATE TRIGGER "{table}_notify" AFTER INSERT ON "{schema}"."{table}" FOR EACH STATEMENT '
                       'EXECUTE FUNCTION "{schema}".sqlqueue_wake_uncoalesced()')
#: A statement-level trigger whose body returns at once: what running a plpgsql trigger costs a send.
EMPTY_FUNCTION = '''CREATE OR REPLACE FUNCTION "{schema}".sqlqueue_wake_empty() RETURNS trigger LANGUAGE plpgsql
AS $f$ BEGIN RETURN NULL; END $f$'''
EMPTY_TRIGGER = ('CREATE TRIGGER "{table}_notify" AFTER INSERT ON "{schema}"."{table}" FOR EACH STATEMENT '
                 'EXECUTE FUNCTION "{schema}".sqlqueue_wake_empty()')
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
    """A set-up's receiver: wait, then receive what is there, as the triggers do (``poll_rate`` None), or receive
    ``poll_rate`` times a second without any wake-up (sleeping while the queue is empty)."""

    def __init__(self, transport: Any, queue: str, poll_rate: float | None = None) -> None:
        self.transport, self.queue, self.poll_rate = transport, queue, poll_rate
        self.stop = False
        self.receives = 0
        self.waits = 0
        self.cpu = 0.0
        self.wakeups = transport.wakeups(queue, poll_interval=0.5)
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        cpu = time.thread_time()
        if self.poll_rate is None:
            self.wakeups.start()
        began = time.monotonic()
        while not self.stop:
            found = bool(self.transport.receive(self.queue, 100))
            self.receives += 1
            if found:
                continue
            if self.poll_rate is None:
                self.waits += 1
                self.wakeups.wait(found=False)
            elif (pause := began + self.receives / self.poll_rate - time.monotonic()) > 0:
                time.sleep(pause)
        self.cpu = (time.thread_time() - cpu) / max(time.monotonic() - began, 1e-9)

    def __enter__(self) -> Watcher:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop = True
        if self.poll_rate is None:
            self.wakeups.close()  # ends a wait at once
        self.thread.join()
        self.wakeups.close()


def count_notifies(listener: Any, queue: str) -> int:
    """Wake-ups for ``queue`` (``"schema"."table"``) delivered to a bare LISTEN connection since the last count."""
    listener.execute("SELECT 1")
    schema, table = (part.strip('"') for part in queue.split("."))
    payload = f'["{schema}", "{table}"]'
    return sum(1 for n in listener.notifies(timeout=0) if n.payload == payload)


def throughput(args: argparse.Namespace, transport: Any, admin: Any, listener: Any, error_queue: str,
               queues: dict[str, str]) -> dict:
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
        extra: dict[str, list[tuple[float, float, float]]] = {s: [] for s in SETUPS}
        poll_rate = 200.0  # receives a second of the polling watcher until the push watcher's is measured
        for round_no in range(args.repeats):
            order = list(args.setups) if round_no % 2 == 0 else list(reversed(args.setups))
            for setup in order:
                admin.execute(f"TRUNCATE {queues[setup]}")
                checkpoint(admin)  # no set-up pays for the writes of the one before it
                count_notifies(listener, queues[setup])
                for _ in procs:
                    commands.put((queues[setup], args.seconds))
                watcher = None
                if setup.endswith("watcher"):
                    watcher = Watcher(transport, queues[setup], poll_rate if "polling" in setup else None)
                    watcher.__enter__()
                try:
                    start.wait()
                    began = time.monotonic()
                    sent = sum(results.get() for _ in procs)
                    elapsed = time.monotonic() - began
                    receives = watcher.receives if watcher else 0
                finally:
                    if watcher:
                        watcher.__exit__()
                rates[setup].append(sent / args.seconds)
                notes = ""
                if watcher:
                    stats = (count_notifies(listener, queues[setup]) / args.seconds, receives / elapsed, watcher.cpu)
                    extra[setup].append(stats)
                    if setup == "wake lock, watcher":
                        poll_rate = max(stats[1], 1.0)
                    notes = f"  ({stats[0]:.0f} NOTIFY/s, {stats[1]:.0f} receives/s, watcher CPU {stats[2]:.0%})"
                    if "polling" not in setup:
                        w = watcher.wakeups
                        notes += (f" [waits/s {watcher.waits / elapsed:.0f}, armings/s {w.covers / elapsed:.0f}, "
                                  f"woken/s {w.woken / elapsed:.0f}]")
                print(f"  {writers:>2} writers, {setup:<24} round {round_no + 1}: {sent / args.seconds:8.0f} msg/s"
                      + notes, flush=True)
        out[writers] = {"rates": rates, "extra": extra}
        for _ in procs:
            commands.put(None)
        for p in procs:
            p.join()
    return out


def paired_ratios(rates: dict[str, list[float]], setup: str) -> list[float]:
    """``setup``'s rate over ``plain``'s, round by round (the two ran next to each other in each round)."""
    return [mine / plain for mine, plain in zip(rates[setup], rates["plain"], strict=True) if plain > 0]


def bootstrap_median(values: list[float], resamples: int = 4000, seed: int = 30) -> tuple[float, float]:
    """A 95 % percentile-bootstrap interval of the median (seeded: the same rounds give the same interval)."""
    draw = random.Random(seed)
    medians = sorted(statistics.median(draw.choices(values, k=len(values))) for _ in range(resamples))
    return medians[int(0.025 * resamples)], medians[min(resamples - 1, int(0.975 * resamples))]


def sign_test(values: list[float], floor: float) -> tuple[int, int, float, float]:
    """(rounds below ``floor``, rounds counted, p-value for "the median is below the floor", p-value for "the
    median is above it"): one-sided binomial tails at 1/2 (a small p is evidence for that side), ties (a ratio
    exactly at the floor) left out."""
    below = sum(v < floor for v in values)
    above = sum(v > floor for v in values)
    n = below + above

    def tail(k: int) -> float:  # P(X >= k), X ~ Binomial(n, 1/2)
        return sum(math.comb(n, i) for i in range(k, n + 1)) / 2 ** n if n else 1.0

    return below, n, tail(below), tail(above)


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
    parser.add_argument("--setups", type=lambda v: [x.strip() for x in v.split(",")], default=list(TABLES.values()),
                        help="comma-separated set-ups to run, by table name (plain always runs): "
                             + "; ".join(f"{table} = {setup}" for setup, table in TABLES.items()))
    parser.add_argument("--floor", type=float, default=0.95, help="the ratio the sign test is against")
    args = parser.parse_args(argv)
    unknown = [x for x in args.setups if x not in TABLES.values()]
    if unknown:
        parser.error(f"unknown set-up(s) {unknown}; known: {list(TABLES.values())}")
    args.setups = [x for x in SETUPS if x == "plain" or TABLES[x] in args.setups]

    import psycopg

    from airflow_sqlqueue.transport import SqlQueueTransport

    schema = "bench_wake_" + uuid.uuid4().hex[:8]
    with psycopg.connect(args.pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    error_queue = f'"{schema}"."error"'
    transport = SqlQueueTransport.from_url(args.pg_url, error_queue=error_queue)
    admin = psycopg.connect(args.pg_url, autocommit=True)
    listener = psycopg.connect(args.pg_url, autocommit=True)
    listener.execute("LISTEN sqlqueue")
    try:
        queues = {setup: f'"{schema}"."{table}"' for setup, table in TABLES.items()}
        for setup, queue in queues.items():
            transport.create_queue(queue, notify=setup.startswith("wake lock"))
            admin.execute(f"ALTER TABLE {queue} SET (autovacuum_enabled = off)")  # emptied every round
        with psycopg.connect(args.pg_url, autocommit=True) as conn:
            conn.execute(EMPTY_FUNCTION.format(schema=schema))
            conn.execute(EMPTY_TRIGGER.format(schema=schema, table=TABLES["empty trigger, polling watcher"]))
            conn.execute(EMPTY_TRIGGER.format(schema=schema, table=TABLES["empty trigger"]))
            conn.execute(LEGACY_FUNCTION.format(schema=schema))
            conn.execute(LEGACY_TRIGGER.format(schema=schema, table=TABLES["notify always, watcher"]))
            conn.execute(UNCOALESCED_FUNCTION.format(schema=schema))
            conn.execute(UNCOALESCED_TRIGGER.format(schema=schema, table=TABLES["uncoalesced, watcher"]))
        transport.create_queue(f'"{schema}"."lat"', notify=True)
        rates = throughput(args, transport, admin, listener, error_queue, queues) if args.repeats else {}
        print("\nwriters | " + " | ".join(args.setups))
        for writers, found in rates.items():
            plain = statistics.median(found["rates"]["plain"])
            cells = [f"{statistics.median(v):.0f} msg/s ({statistics.median(v) / plain:.2f}x)"
                     for v in found["rates"].values() if v]
            print(f"{writers} | " + " | ".join(cells))
        print(f"\nwriters | set-up | rounds | ratio to plain round by round: median [bootstrap 95 %] | min - max | "
              f"rounds < {args.floor} | sign test p-value: median below {args.floor} | median above {args.floor}")
        for writers, found in rates.items():
            for setup in args.setups[1:]:
                ratios = paired_ratios(found["rates"], setup)
                if not ratios:
                    continue
                low, high = bootstrap_median(ratios)
                below, counted, p_below, p_above = sign_test(ratios, args.floor)
                print(f"{writers} | {setup} | {len(ratios)} | {statistics.median(ratios):.3f}x [{low:.3f}, {high:.3f}]"
                      f" | {min(ratios):.2f} - {max(ratios):.2f} | {below} of {counted} | {p_below:.3g} | "
                      f"{p_above:.3g}")
        print("\nwriters | set-up | NOTIFY/s | watcher receives/s | watcher client CPU (medians)")
        for writers, found in rates.items():
            for setup, stats in found["extra"].items():
                if stats:
                    notifies, receives, cpu = (statistics.median(x) for x in zip(*stats, strict=True))
                    print(f"{writers} | {setup} | {notifies:.0f} | {receives:.0f} | {cpu:.0%}")
        if args.trials:
            samples = latency(args, transport, admin, schema, f'"{schema}"."lat"')
            print(f"\nwake-up after a plain INSERT's commit, {len(samples)} trials: "
                  f"p50 {_pct(samples, 0.5) * 1000:.1f} ms, p95 {_pct(samples, 0.95) * 1000:.1f} ms")
    finally:
        transport.close()
        admin.close()
        listener.close()
        with psycopg.connect(args.pg_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


if __name__ == "__main__":
    main()
