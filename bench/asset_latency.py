"""Asset-event latency and throughput through a real ``AssetWatcher``, with push wake-ups and with polling.

``python -m bench.asset_latency [--trials 25] [--poll-interval 2] [--event-interval 0] [--steady-seconds 60]
[--rates 20,100] [--pg-url URL] [--out DIR]``

Starts a real Airflow deployment (``tests/deployment/harness.py``: scheduler, dag-processor, triggerer,
api-server, LocalExecutor, metadata on a fresh PostgreSQL database) with one DAG per set-up, each scheduled by an
``AssetWatcher`` on ``SqlQueueMessageTrigger`` for its own PostgreSQL queue: ``push`` (the queue carries the
wake-up trigger, ``create_queue(notify=True)``) and ``poll`` (no trigger: polling at ``poll_interval`` with the
idle back-off to 4 x). After a warm-up event per set-up (the triggerer's first event after start stalls):

* **latency**: per trial and set-up (interleaved), one message after a random idle time; the figure is the
  ``asset_event.timestamp`` Airflow stored for the event carrying it minus the time the send returned (its
  commit), same clock;
* **steady state**: per rate and set-up in turn, one message per transaction at each of ``--rates`` messages/s
  for ``--steady-seconds``; asset events/s and messages/s carried over the window after a ramp-up, and every message
  is counted (each must be in exactly one asset event).

Prints the tables and writes ``asset_latency.json`` / ``asset_latency.md`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from airflow_sqlqueue.transport import SqlQueueTransport
from bench.latency import DEFAULT_PG_URL, connection_json, percentile
from tests.deployment.harness import Deployment, wait_for

DAG_FILE = Path(__file__).resolve().parent / "dags" / "bench_asset_latency.py"
CONN_ID = "sqlqueue_bench"
#: Set-up name -> whether its queue carries the PostgreSQL wake-up trigger.
SETUPS = {"push": True, "poll": False}
#: Longest wait for one event (the warm-up waits for the triggerer's slow first connection lookup too).
EVENT_TIMEOUT = 180.0


@dataclass
class StoredEvent:
    """One asset event of a set-up's asset, as stored in the metadata database."""

    id: int
    stored_at: float  # asset_event.timestamp, seconds since the epoch
    bodies: list[str]


class AssetEvents:
    """Reads the asset events of the benchmark's assets from the metadata database, on one open connection."""

    def __init__(self, metadata_url: str, setups: list[str]) -> None:
        self.conn = psycopg.connect(metadata_url, autocommit=True)
        self.asset_ids: dict[str, int] = {}
        for setup in setups:
            row = self.conn.execute("SELECT id FROM asset WHERE name = %s", (f"sqlqueue-bench-{setup}",)).fetchone()
            if row is None:
                raise RuntimeError(f"the asset of set-up {setup!r} is not in the metadata database: was the DAG "
                                   "parsed?")
            self.asset_ids[setup] = row[0]
        self.last_id: dict[str, int] = dict.fromkeys(setups, 0)

    def new(self, setup: str) -> list[StoredEvent]:
        """The events of ``setup`` stored since the previous call."""
        rows = self.conn.execute(
            "SELECT id, timestamp, extra FROM asset_event WHERE asset_id = %s AND id > %s ORDER BY id",
            (self.asset_ids[setup], self.last_id[setup])).fetchall()
        events = []
        for event_id, stamp, extra in rows:
            messages = ((extra or {}).get("payload") or {}).get("messages") or []
            events.append(StoredEvent(event_id, stamp.timestamp(), [str(m.get("body")) for m in messages]))
            self.last_id[setup] = max(self.last_id[setup], event_id)
        return events

    def wait_for_bodies(self, setup: str, bodies: set[str], timeout: float = EVENT_TIMEOUT) -> list[StoredEvent]:
        """Every event of ``setup`` until the events carry all of ``bodies``; a TimeoutError naming what is missing."""
        seen: list[StoredEvent] = []
        missing = set(bodies)

        def arrived() -> bool:
            for event in self.new(setup):
                seen.append(event)
                missing.difference_update(event.bodies)
            return not missing
        wait_for(f"{len(missing)} of {len(bodies)} messages of set-up {setup!r} in asset events", arrived, timeout,
                 interval=0.05)
        return seen

    def close(self) -> None:
        self.conn.close()


class Bench:
    """The queues, the deployment and the figures of one run."""

    def __init__(self, pg_url: str, poll_interval: float, event_interval: float, root: Path) -> None:
        self.pg_url = pg_url
        self.poll_interval = poll_interval
        self.event_interval = event_interval
        self.schema = "bench_" + uuid.uuid4().hex[:10]
        self.queues = {setup: f'"{self.schema}"."{setup}"' for setup in SETUPS}
        self.tag = uuid.uuid4().hex[:8]
        self.count = 0
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{self.schema}"')
        self.transport = SqlQueueTransport.from_url(pg_url)
        for setup, notify in SETUPS.items():
            self.transport.create_queue(self.queues[setup], notify=notify)
        self.transport.create_queue(f'"{self.schema}"."error"')
        self.deployment = Deployment(root, [DAG_FILE], env={
            # the connection in the environment, not the metadata database: the triggerer's lookup of a stored
            # connection stalls its first event 30-70 s (docs/deployment.md)
            "AIRFLOW_CONN_" + CONN_ID.upper(): connection_json(pg_url),
            "SQLQUEUE_BENCH_QUEUES": json.dumps(self.queues),
            "SQLQUEUE_BENCH_POLL_INTERVAL": str(poll_interval),
            "SQLQUEUE_BENCH_EVENT_INTERVAL": str(event_interval),
        })
        self.events: AssetEvents | None = None

    def start(self) -> None:
        self.deployment.start()
        self.deployment.wait_parsed([f"bench_asset_{setup}" for setup in SETUPS])
        for setup in SETUPS:
            self.deployment.set_paused(f"bench_asset_{setup}", False)
        self.events = AssetEvents(self.deployment.metadata_url, list(SETUPS))

    def close(self) -> None:
        try:
            if self.events is not None:
                self.events.close()
            self.deployment.stop()
            self.transport.close()
        finally:
            with psycopg.connect(self.pg_url, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')

    def body(self, setup: str, kind: str) -> str:
        self.count += 1
        return f"{self.tag}-{setup}-{kind}-{self.count}"

    def send(self, setup: str, body: str) -> float:
        """Send one message in its own transaction; the time the send returned (after its commit)."""
        self.transport.send(self.queues[setup], body.encode())
        return time.time()

    # -- phases ----------------------------------------------------------------------------------
    def warm_up(self) -> dict[str, float]:
        """One event per set-up, waited for: the triggerer's first events after its start are slow."""
        took = {}
        for setup in SETUPS:
            body = self.body(setup, "warmup")
            sent = self.send(setup, body)
            assert self.events is not None
            self.events.wait_for_bodies(setup, {body})
            took[setup] = time.time() - sent
            print(f"warm-up {setup}: first event after {took[setup]:.1f} s", file=sys.stderr, flush=True)
        return took

    def trial(self, setup: str, idle: float) -> float:
        """Seconds from a send's commit to the asset event carrying it, after ``idle`` s with an empty queue."""
        assert self.events is not None
        time.sleep(idle)
        body = self.body(setup, "trial")
        sent = self.send(setup, body)
        events = self.events.wait_for_bodies(setup, {body})
        carrying = [e for e in events if body in e.bodies]
        if len(carrying) != 1 or carrying[0].bodies != [body]:
            raise RuntimeError(f"trial message of {setup!r} not alone in exactly one event: "
                               f"{[(e.id, len(e.bodies)) for e in events]}")
        return carrying[0].stored_at - sent

    def steady(self, setup: str, seconds: float, rate: float) -> dict[str, Any]:
        """Send at ``rate`` messages/s for ``seconds``; the events and messages carried per second after a ramp-up,
        and a count of every message (lost ones raise)."""
        assert self.events is not None
        self.events.new(setup)  # forget earlier events
        sent: dict[str, float] = {}
        period = 1.0 / rate
        start = time.time()
        tick = start
        while tick < start + seconds:
            body = self.body(setup, "steady")
            sent[body] = self.send(setup, body)
            tick += period
            time.sleep(max(0.0, tick - time.time()))
        end = time.time()
        events = self.events.wait_for_bodies(setup, set(sent))
        counts = Counter(body for event in events for body in event.bodies if body in sent)
        lost = [body for body in sent if counts[body] == 0]
        if lost:  # wait_for_bodies returned: cannot happen; kept as the count's own check
            raise RuntimeError(f"{len(lost)} messages of {setup!r} are in no asset event")
        ramp = min(5.0, seconds / 4)
        window = [e for e in events if start + ramp <= e.stored_at <= end]
        span = end - start - ramp
        first_event: dict[str, float] = {}
        for event in events:
            for body in event.bodies:
                first_event.setdefault(body, event.stored_at)
        latency = [first_event[body] - at for body, at in sent.items()]
        carried = sum(len(e.bodies) for e in window)
        return {"setup": setup, "rate": rate, "seconds": round(end - start, 2), "sent": len(sent),
                "send_rate": len(sent) / (end - start), "window_seconds": round(span, 2),
                "events": len(events), "events_per_s": len(window) / span, "messages_per_s": carried / span,
                "messages_per_event": carried / len(window) if window else None,
                "latency_p50": statistics.median(latency), "latency_p95": percentile(latency, 95),
                "duplicates": sum(c - 1 for c in counts.values()), "lost": len(lost)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(42)
    max_poll = 4 * args.poll_interval
    # random idle times covering the whole idle back-off cycle, and never shorter than event_interval (so the
    # spacing of events never delays a trial's message)
    idle_min = args.event_interval + 1.0
    idle_max = idle_min + 2 * max_poll
    root = Path(tempfile.mkdtemp(prefix="sqlqueue-bench-assets-"))
    bench = Bench(args.pg_url, args.poll_interval, args.event_interval, root)
    load = {"start": os.getloadavg()}
    kept = True
    try:
        bench.start()
        warm = bench.warm_up()
        samples: dict[str, list[float]] = {setup: [] for setup in SETUPS}
        for trial in range(args.trials):
            for setup in SETUPS:
                samples[setup].append(bench.trial(setup, rng.uniform(idle_min, idle_max)))
            print(f"trial {trial + 1}/{args.trials}: " + ", ".join(f"{s} {samples[s][-1]:.3f} s" for s in SETUPS),
                  file=sys.stderr, flush=True)
        load["after_latency"] = os.getloadavg()
        steady = []
        for rate in args.rates:
            for setup in SETUPS:
                steady.append(bench.steady(setup, args.steady_seconds, rate))
                print(f"steady {setup}: {steady[-1]}", file=sys.stderr, flush=True)
        load["end"] = os.getloadavg()
        kept = False
    finally:
        bench.close()
        if kept:
            print(f"component logs kept in {root / 'logs'}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    return {"samples": samples, "steady": steady, "warm_up_seconds": warm, "load_average": load,
            "idle_seconds": [idle_min, idle_max]}


def latency_table(samples: dict[str, list[float]], poll: float, event_interval: float) -> str:
    lines = [f"| set-up (poll_interval {poll:g} s, event_interval {event_interval:g} s) | trials | p50 | p95 | max |",
             "|---|---:|---:|---:|---:|"]
    for setup, values in samples.items():
        lines.append(f"| {setup} | {len(values)} | {statistics.median(values) * 1000:.0f} ms | "
                     f"{percentile(values, 95) * 1000:.0f} ms | {max(values) * 1000:.0f} ms |")
    return "\n".join(lines)


def steady_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| set-up | target msg/s | seconds | sent | send rate msg/s | asset events/s | messages/s carried "
             "| messages per event | send->event p50 | p95 | lost | duplicates |", "|---|" + "---:|" * 11]
    for r in rows:
        per_event = "-" if r["messages_per_event"] is None else f"{r['messages_per_event']:.1f}"
        lines.append(f"| {r['setup']} | {r['rate']:g} | {r['seconds']:.0f} | {r['sent']} | {r['send_rate']:.1f} | "
                     f"{r['events_per_s']:.2f} | {r['messages_per_s']:.1f} | {per_event} | "
                     f"{r['latency_p50'] * 1000:.0f} ms | {r['latency_p95'] * 1000:.0f} ms | {r['lost']} | "
                     f"{r['duplicates']} |")
    return "\n".join(lines)


def _rates(text: str) -> list[float]:
    try:
        rates = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--rates {text!r}: give messages/s as numbers, e.g. 20,100") from None
    if not rates or any(rate <= 0 for rate in rates):
        raise argparse.ArgumentTypeError(f"--rates {text!r}: give one or more positive rates, e.g. 20,100")
    return rates


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.asset_latency", description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=25)
    parser.add_argument("--poll-interval", type=float, default=2.0, help="the triggers' poll_interval (s)")
    parser.add_argument("--event-interval", type=float, default=0.0,
                        help="the triggers' event_interval (s); 0: events as fast as Airflow stores them")
    parser.add_argument("--steady-seconds", type=float, default=60.0)
    parser.add_argument("--rates", type=_rates, default=[20.0, 100.0],
                        help="messages/s sent in the steady state, comma-separated (one steady phase per rate)")
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL, help="the queues' database")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args(argv)
    if args.trials < 1 or args.steady_seconds <= 0:
        parser.error("--trials and --steady-seconds must be positive")
    result = run(args)
    text = (latency_table(result["samples"], args.poll_interval, args.event_interval) + "\n\n"
            + steady_table(result["steady"]))
    print(text)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "trials": args.trials,
            "poll_interval": args.poll_interval, "event_interval": args.event_interval,
            "steady_seconds": args.steady_seconds, "rates": args.rates, "idle_seconds": result["idle_seconds"],
            "load_average": result["load_average"], "warm_up_seconds": result["warm_up_seconds"]}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "asset_latency.json").write_text(json.dumps(
        {"meta": meta, "samples": result["samples"], "steady": result["steady"]}, indent=1))
    loads = ", ".join(f"{k} {v[0]:.1f}" for k, v in result["load_average"].items())
    (args.out / "asset_latency.md").write_text(f"Run of {meta['date']} (1-min load average: {loads})\n\n{text}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
