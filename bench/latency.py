"""Wake-up latency: from a send's commit to the trigger's event, with push wake-ups and with polling.

``python -m bench.latency [--trials 25] [--poll-interval 2] [--pg-url URL] [--out DIR]``

For each trial a ``SqlQueueTrigger`` (the deferrable sensor's trigger, as the triggerer runs it) waits on an
empty PostgreSQL queue; after a random idle time one message is sent and the time until the trigger yields
its event is taken. Three set-ups, in the same run and interleaved: the queue with its wake-up trigger
(push, ``poll_interval`` as the fallback), the same queue without it (polling with the idle back-off to
4 x ``poll_interval``), and polling without back-off (``max_poll_interval = poll_interval``). Prints p50/p95
and writes ``latency.json`` / ``latency.md`` under ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .databases import DEFAULT_PG_URL

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="sqlqueue-bench-airflow-"))

SETUPS = ("push", "poll, idle back-off", "poll, no back-off")


def connection_json(pg_url: str) -> str:
    """The database as an Airflow connection in JSON (the value of an ``AIRFLOW_CONN_<ID>`` variable)."""
    parts = urlsplit(pg_url)
    return json.dumps({
        "conn_type": "postgres", "host": parts.hostname or "127.0.0.1", "port": parts.port or 5432,
        "login": parts.username or "postgres", "password": parts.password, "schema": parts.path.lstrip("/")})


def _conn_env(pg_url: str) -> str:
    """Register the database as an Airflow connection (environment variable) for the trigger."""
    conn_id = "bench_latency_" + uuid.uuid4().hex[:8]
    os.environ["AIRFLOW_CONN_" + conn_id.upper()] = connection_json(pg_url)
    return conn_id


async def one_trial(transport: Any, conn_id: str, queue: str, poll: float, max_poll: float, idle: float) -> float:
    """Seconds from the send's return (its commit) to the trigger's event."""
    from airflow_sqlqueue.triggers.sqlqueue import SqlQueueTrigger

    trigger = SqlQueueTrigger(conn_id=conn_id, queue=queue, min_messages=1, poll_interval=poll,
                              max_poll_interval=max_poll)
    events = trigger.run()
    first = asyncio.ensure_future(anext(events))
    await asyncio.sleep(idle)
    if first.done():
        raise RuntimeError(f"the trigger fired on an empty queue: {first.result().payload}")
    await asyncio.to_thread(transport.send, queue, b"ping")
    sent = time.perf_counter()
    event = await first
    latency = time.perf_counter() - sent
    await events.aclose()
    if event.payload.get("status") != "success":
        raise RuntimeError(f"trigger error: {event.payload}")
    while await asyncio.to_thread(transport.receive, queue, 100):
        pass
    return latency


def run(trials: int, poll: float, pg_url: str) -> dict[str, list[float]]:
    import psycopg

    from airflow_sqlqueue.transport import SqlQueueTransport

    conn_id = _conn_env(pg_url)
    schema = "bench_" + uuid.uuid4().hex[:10]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    transport = SqlQueueTransport.from_url(pg_url)
    pushed, polled = f'"{schema}"."push"', f'"{schema}"."poll"'
    transport.create_queue(pushed, notify=True)
    transport.create_queue(polled)
    rng = random.Random(42)
    samples: dict[str, list[float]] = {name: [] for name in SETUPS}
    try:
        for trial in range(trials):
            for name in SETUPS:
                queue = pushed if name == "push" else polled
                max_poll = poll if name == "poll, no back-off" else 4 * poll
                # idle long enough for the back-off to be anywhere in its cycle (push: the listener is set up)
                idle = rng.uniform(0.5, 1.5) if name == "push" else rng.uniform(0.5, 2 * max_poll)
                latency = asyncio.run(one_trial(transport, conn_id, queue, poll, max_poll, idle))
                samples[name].append(latency)
            print(f"trial {trial + 1}/{trials}: " + ", ".join(f"{n} {samples[n][-1]:.3f} s" for n in SETUPS),
                  file=sys.stderr, flush=True)
    finally:
        transport.close()
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    return samples


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


def table(samples: dict[str, list[float]], poll: float) -> str:
    lines = [f"| set-up (poll_interval {poll:g} s) | trials | p50 | p95 | max |", "|---|---:|---:|---:|---:|"]
    for name, values in samples.items():
        lines.append(f"| {name} | {len(values)} | {statistics.median(values) * 1000:.0f} ms | "
                     f"{percentile(values, 95) * 1000:.0f} ms | {max(values) * 1000:.0f} ms |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.latency", description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=25)
    parser.add_argument("--poll-interval", type=float, default=2.0)
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args(argv)
    samples = run(args.trials, args.poll_interval, args.pg_url)
    text = table(samples, args.poll_interval)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "load_average": os.getloadavg(),
            "poll_interval": args.poll_interval, "trials": args.trials}
    (args.out / "latency.json").write_text(json.dumps({"meta": meta, "samples": samples}, indent=1))
    (args.out / "latency.md").write_text(f"Run of {meta['date']} (load average {meta['load_average'][0]:.1f})\n\n"
                                         + text + "\n")
    return 0


if __name__ == "__main__":
    import logging

    logging.getLogger("airflow_sqlqueue").setLevel(logging.WARNING)
    raise SystemExit(main())
