"""Paired batches: the provider's batch and the loop by hand, alternated one batch at a time, each on its own table.

A whole run per contestant (``python -m bench``) carries the drift of a shared machine between the runs; here the
two take turns batch by batch in one process on one database, so what differs is their own work. Each has its own
queue table of the same shape (made by the provider; a backlog split in two halves): on one shared table, strict
turns make the same contestant pay for every page SQLite fills or splits, and which one pays depends on the parity
of the writes before the first turn (one warm-up send moved the SQLite one-message send from 0.89x to 0.98x, same
code); ``--one-table`` runs the old shared-table pairing to show it, ``--lead 1`` shifts that parity.

Reported per message: wall time, the client's CPU time (``time.thread_time``: the driver and Python, not the
server), and the ratio (total wall of the baseline over the provider's); beside it the median of the ratios of each
pair of turns (a stall of the shared machine falls on one turn: it moves the total, not the median) and the ratio
of client CPU (what the wall ratio tends to on a slower CPU: ``python -m bench.slow_cpu`` runs this on one).

    .venv/bin/python -m bench.paired --case send --batch 1 --dialect postgres
    .venv/bin/python -m bench.paired --case receive --batch 100 --dialect postgres
    .venv/bin/python -m bench.paired --case drain --dialect sqlite --messages 40000

``send`` pairs ``transport.send(q, m)`` (``--batch 1``) or ``transport.send_many(q, batch)`` with the send
baseline (one autocommit INSERT; a batch in one statement) into empty queues; ``receive`` pairs
``transport.receive(q, batch)`` with the receive baseline (one autocommit DELETE ... RETURNING) on backlogs;
``drain`` pairs one batch of the handler pump (no-op handler, the operator's default mode) with the drain
baseline's DELETE ... RETURNING, handle, commit (batches of 100, the operator's default). One sender or receiver:
concurrency is what ``python -m bench`` measures.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from .databases import DEFAULT_PG_URL, BenchDb, outgoing
from .drain import BATCH, baseline_batch, noop
from .receive import baseline_receive_batch
from .send import baseline_sender
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


Pair = tuple[Callable[[], int], Callable[[], int]]


def send_pair(db: BenchDb, transport: Any, queues: tuple[str, str], batch: int, messages: int,
              opened: list[Any], lead: int = 0) -> Pair:
    """The provider's send (one message) or send_many, and the send baseline's; each sends half of ``messages``
    (then returns 0). The baseline first sends ``lead`` more, one at a time, not timed (``--lead``)."""
    address = db.address(queues[0])
    conn = db.connect(autocommit=True)
    opened.append(conn)
    ready = outgoing(messages // 2)
    left = {"provider": messages // 2, "baseline": messages // 2}
    send = baseline_sender(db, conn, queues[1], batch)
    for _ in range(lead):
        send(1)

    def provider() -> int:
        n = min(batch, left["provider"])
        if n == 1:
            transport.send(address, ready[left["provider"] - 1])
        elif n:
            start = left["provider"] - n
            transport.send_many(address, ready[start:start + n])
        left["provider"] -= n
        return n

    def baseline() -> int:
        n = min(batch, left["baseline"])
        if n:
            send(n)
        left["baseline"] -= n
        return n

    return provider, baseline


def receive_pair(db: BenchDb, transport: Any, queues: tuple[str, str], batch: int, messages: int,
                 opened: list[Any]) -> Pair:
    """The provider's receive (its list held until the next, as a caller holds it) and the receive baseline's."""
    address = db.address(queues[0])
    held: list[Any] = []

    def provider() -> int:
        held[:] = transport.receive(address, batch)
        return len(held)

    opened.append(db.connect(autocommit=True))
    return provider, baseline_receive_batch(db, queues[1], opened[-1], batch)


def drain_pair(db: BenchDb, transport: Any, queues: tuple[str, str], batch: int, messages: int,
               opened: list[Any]) -> Pair:
    """One batch of the handler pump and one of the drain baseline (always batches of ``BATCH``)."""
    from airflow_sqlqueue.transport.processing.summaries import ProcessSummary

    pump = transport.pump(db.address(queues[0]), noop, batch_size=BATCH)

    def provider() -> int:
        part = ProcessSummary()
        pump.strategy.batch(BATCH, part)
        return part.deliveries

    opened.append(db.connect())
    return provider, baseline_batch(db, queues[1], opened[-1])


PAIRS = {"send": send_pair, "receive": receive_pair, "drain": drain_pair}


def run(case: str, dialect: str, messages: int, pg_url: str, batch: int = BATCH,
        one_table: bool = False, lead: int = 0) -> dict[str, Any]:
    """Fill the backlogs (not for ``send``: half of ``messages`` in each contestant's table, or all of it in the
    one shared table), take turns in batches until one finds nothing left, return the figures."""
    if lead and case != "send":
        raise ValueError("--lead is for --case send")
    pairing = partial(send_pair, lead=lead) if case == "send" else PAIRS[case]
    db = BenchDb.open(dialect, pg_url)
    base = f"bench_paired_{case}"
    queues = (base, base) if one_table else (f"{base}_provider", f"{base}_baseline")
    tables = sorted(set(queues))
    if case == "drain":
        batch = BATCH
    opened: list[Any] = []
    try:
        with db.transport() as transport:
            for queue in tables:
                db.reset(queue)
                if case != "send":
                    db.fill(queue, messages // len(tables))
            db.settle()
            provider, baseline = pairing(db, transport, queues, batch, messages, opened)
            tallies = {"provider": Tally(), "baseline": Tally()}
            turns = [(tallies["provider"], provider), (tallies["baseline"], baseline)]
            turn = 0
            provider_turn = 0.0
            pairs: list[float] = []  # each pair of turns (provider, then baseline): baseline wall / provider wall
            while True:  # until one of them finds nothing left to do
                tally, step = turns[turn % 2]
                before = tally.wall
                if not tally.timed(step):
                    break
                if turn % 2:
                    pairs.append((tally.wall - before) / max(provider_turn, 1e-9))
                else:
                    provider_turn = tally.wall - before
                turn += 1
        check_counts(db, case, queues, messages, tallies, lead)
    finally:
        for conn in opened:
            conn.close()
        db.close()
    (p_wall, p_cpu), (b_wall, b_cpu) = tallies["provider"].per_message(), tallies["baseline"].per_message()
    return {"case": case, "dialect": dialect, "messages": messages, "batch": batch, "one_table": one_table,
            "taken": {who: tally.messages for who, tally in tallies.items()},
            "provider_us": p_wall, "provider_cpu_us": p_cpu, "baseline_us": b_wall, "baseline_cpu_us": b_cpu,
            "ratio": b_wall / p_wall if p_wall else 0.0,
            "pair_median": statistics.median(pairs) if pairs else 0.0, "pairs": len(pairs)}


def check_counts(db: BenchDb, case: str, queues: tuple[str, str], messages: int, tallies: dict[str, Tally],
                 lead: int = 0) -> None:
    """Every message was sent (each table holds what its contestants sent, the baseline's ``lead`` too) or taken
    (each backlog was taken whole, by its contestants), else AssertionError. Not timed."""
    counted = {who: t.messages for who, t in tallies.items()}
    holders: dict[str, list[str]] = {}
    for queue, who in zip(queues, ("provider", "baseline"), strict=True):
        holders.setdefault(queue, []).append(who)
    for queue, whose in holders.items():
        [(left,)] = db.execute("count", queue)
        done = sum(counted[who] for who in whose)
        if case == "send":
            expected, taken = done + (lead if "baseline" in whose else 0), done
        else:
            expected, taken = 0, messages // len(holders)
        if left != expected or done != taken:
            raise AssertionError(f"{case}: {left} rows left in {queue}, {expected} expected; {counted} counted")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.paired", description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=sorted(PAIRS), default="drain")
    parser.add_argument("--dialect", choices=("sqlite", "postgres"), default="postgres")
    parser.add_argument("--batch", type=int, default=BATCH, help="messages a call (send, receive; drain: 100)")
    parser.add_argument("--messages", type=int, default=2 * Sizes().messages)
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL)
    parser.add_argument("--one-table", action="store_true",
                        help="both contestants on one shared table (the pairing before 2026-11-28: biased, see above)")
    parser.add_argument("--lead", type=int, default=0,
                        help="send: the baseline sends this many messages first, not timed (the parity of the "
                             "writes before the first turn: --one-table --lead 1 against --one-table)")
    args = parser.parse_args(argv)
    r = run(args.case, args.dialect, args.messages, args.pg_url, args.batch, args.one_table, args.lead)
    print(f"{r['case']} on {r['dialect']}, {r['messages']:,} messages in batches of {r['batch']}, one client"
          f"{', one shared table' if r['one_table'] else ''}{f', {args.lead} sent first' if args.lead else ''}: "
          f"provider {r['provider_us']:.1f} µs a message (client CPU {r['provider_cpu_us']:.1f}), "
          f"baseline {r['baseline_us']:.1f} (client CPU {r['baseline_cpu_us']:.1f}): {r['ratio']:.2f}x "
          f"(median of {r['pairs']} turn pairs {r['pair_median']:.2f}x; CPU ratio "
          f"{r['baseline_cpu_us'] / max(r['provider_cpu_us'], 1e-9):.2f}x)")


if __name__ == "__main__":
    main()
