"""Paired batches: the provider's batch and the loop by hand, alternated one batch at a time on one backlog.

A whole run per contestant (``python -m bench``) carries the drift of a shared machine between the runs; here the
two take turns batch by batch on the same table, so what differs is their own work. Reported per message: wall
time, the client's CPU time (``time.thread_time``: the driver and Python, not the server), and the ratio.

    .venv/bin/python -m bench.paired --case receive --dialect postgres
    .venv/bin/python -m bench.paired --case drain --dialect sqlite --messages 40000

``receive`` pairs ``transport.receive(q, 100)`` with the receive baseline's batch; ``drain`` pairs one batch of
the handler pump (no-op handler, the operator's default mode) with the drain baseline's lock, handle, delete,
commit. One receiver: concurrency is what ``python -m bench`` measures.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from contextlib import closing
from typing import Any

from .databases import DEFAULT_PG_URL, BenchDb
from .drain import BATCH, baseline_batch, noop
from .receive import baseline_receive_batch
from .sizes import Sizes


class Tally:
    """Messages, wall seconds and client CPU seconds of one contestant."""

    def __init__(self) -> None:
        self.messages = 0
        self.wall = 0.0
        self.cpu = 0.0

    def timed(self, batch: Callable[[], int]) -> int:
        cpu, wall = time.thread_time(), time.perf_counter()
        taken = batch()
        self.wall += time.perf_counter() - wall
        self.cpu += time.thread_time() - cpu
        self.messages += taken
        return taken

    def per_message(self) -> tuple[float, float]:
        """(wall, cpu) in µs a message."""
        n = max(self.messages, 1)
        return self.wall / n * 1e6, self.cpu / n * 1e6


def receive_pair(db: BenchDb, transport: Any, queue: str, conn: Any) -> tuple[Callable[[], int], Callable[[], int]]:
    """The provider's batched receive (its list held until the next, as a caller holds it) and the receive
    baseline's batch."""
    address = db.address(queue)
    held: list[Any] = []

    def provider() -> int:
        held[:] = transport.receive(address, BATCH)
        return len(held)

    return provider, baseline_receive_batch(db, queue, conn, BATCH)


def drain_pair(db: BenchDb, transport: Any, queue: str, conn: Any) -> tuple[Callable[[], int], Callable[[], int]]:
    """One batch of the handler pump and one of the drain baseline."""
    from airflow_sqlqueue.transport.processing.summaries import ProcessSummary

    pump = transport.pump(db.address(queue), noop, batch_size=BATCH)

    def provider() -> int:
        part = ProcessSummary()
        pump.strategy.batch(BATCH, part)
        return part.deliveries

    return provider, baseline_batch(db, queue, conn)


PAIRS = {"receive": receive_pair, "drain": drain_pair}


def run(case: str, dialect: str, messages: int, pg_url: str) -> dict[str, Any]:
    """Fill one backlog, take it in alternating batches, return the figures."""
    db = BenchDb.open(dialect, pg_url)
    queue = f"bench_paired_{case}"
    try:
        with db.transport() as transport, closing(db.connect()) as conn:
            db.reset(queue)
            db.fill(queue, messages)
            db.settle()
            provider, baseline = PAIRS[case](db, transport, queue, conn)
            tallies = {"provider": Tally(), "baseline": Tally()}
            turns = [(tallies["provider"], provider), (tallies["baseline"], baseline)]
            turn = 0
            while True:  # until one of them finds the queue empty
                tally, batch = turns[turn % 2]
                if not tally.timed(batch):
                    break
                turn += 1
    finally:
        db.close()
    (p_wall, p_cpu), (b_wall, b_cpu) = tallies["provider"].per_message(), tallies["baseline"].per_message()
    return {"case": case, "dialect": dialect, "messages": messages,
            "taken": {who: tally.messages for who, tally in tallies.items()},
            "provider_us": p_wall, "provider_cpu_us": p_cpu, "baseline_us": b_wall, "baseline_cpu_us": b_cpu,
            "ratio": b_wall / p_wall if p_wall else 0.0}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.paired", description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=sorted(PAIRS), default="drain")
    parser.add_argument("--dialect", choices=("sqlite", "postgres"), default="postgres")
    parser.add_argument("--messages", type=int, default=2 * Sizes().messages)
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL)
    args = parser.parse_args(argv)
    r = run(args.case, args.dialect, args.messages, args.pg_url)
    print(f"{r['case']} on {r['dialect']}, {r['messages']:,} messages in batches of {BATCH}, one receiver: "
          f"provider {r['provider_us']:.1f} µs a message (client CPU {r['provider_cpu_us']:.1f}), "
          f"baseline {r['baseline_us']:.1f} (client CPU {r['baseline_cpu_us']:.1f}): {r['ratio']:.2f}x")


if __name__ == "__main__":
    main()
