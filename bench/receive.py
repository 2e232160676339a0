"""Receive cases: one message per transaction and batches of 100 per statement, with 1 and 4 receivers."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from .databases import BenchDb
from .peer import Pgqueuer
from .report import BASELINE, PEER, PROVIDER, Result, compare
from .sizes import Sizes

QUEUE = "bench_receive"


def in_threads(receivers: int, receiver: Callable[[], int]) -> int:
    """Run ``receiver`` in ``receivers`` threads at once; return the sum of what they received."""
    if receivers == 1:
        return receiver()
    counts: list[int] = []
    threads = [threading.Thread(target=lambda: counts.append(receiver())) for _ in range(receivers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts)


def provider_receive(db: BenchDb, batch: int, receivers: int) -> Callable[[], int]:
    def work() -> int:
        with db.transport() as transport:
            address = db.address(QUEUE)

            def receiver() -> int:
                done = 0
                while messages := transport.receive(address, batch):
                    done += len(messages)
                return done

            return in_threads(receivers, receiver)

    return work


def baseline_receive_batch(db: BenchDb, queue: str, conn: Any, batch: int) -> Callable[[], int]:
    """One receive by hand on ``conn`` (made with ``db.connect(autocommit=True)``): one DELETE ... RETURNING in
    autocommit (its own transaction, one round trip; one message on SQLite: the key as a scalar), then like any
    receiver it drops the expired rows, parses each other row's Headers JSON (one ``json.loads``; no validation)
    and hands the batch back: each row with its headers, held until the next receive, as the provider's list of
    messages is. Returns the rows it took."""
    sql = db.sql("receive_one" if batch == 1 and db.dialect == "sqlite" else "receive", queue)
    cur = conn.cursor()
    params = {"batch_size": batch}
    loads = json.loads
    received: list[tuple[Any, Any]] = []

    def receive() -> int:
        rows = cur.execute(sql, params).fetchall()
        received[:] = [(row, loads(row[3])) for row in rows if not row[2]]
        return len(rows)

    return receive


def baseline_receive(db: BenchDb, batch: int, receivers: int) -> Callable[[], int]:
    """``baseline_receive_batch`` until the queue is empty, one connection per receiver."""

    def receiver() -> int:
        conn = db.connect(autocommit=True)
        done = 0
        try:
            receive = baseline_receive_batch(db, QUEUE, conn, batch)
            while taken := receive():
                done += taken
            return done
        finally:
            conn.close()

    return lambda: in_threads(receivers, receiver)


def run(db: BenchDb, sizes: Sizes, peer: Pgqueuer | None) -> list[Result]:
    results = []
    for batch, count in ((1, sizes.single), (100, sizes.messages)):
        for receivers in (1, 4):
            shape = "1 per transaction" if batch == 1 else f"batches of {batch}"
            case = f"receive, {shape}, {receivers} receiver{'s' if receivers > 1 else ''}"
            contestants = {BASELINE: baseline_receive(db, batch, receivers),
                           PROVIDER: provider_receive(db, batch, receivers)}
            if peer is not None:
                contestants[PEER] = lambda batch=batch, receivers=receivers: peer.dequeue(batch, receivers)

            def setup(who: str, count: int = count) -> None:
                if who == PEER:
                    peer.reset(count)
                else:
                    db.reset(QUEUE)
                    db.fill(QUEUE, count)

            results.append(compare(Result(case, db.dialect, count), sizes.repeats, contestants, setup,
                                   settle=db.settle))
    return results
