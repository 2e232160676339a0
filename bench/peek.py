"""Peek on a backlog of 1,000 and of 1,000,000 rows: the cost must not grow with the backlog."""

from __future__ import annotations

from collections.abc import Callable

from .databases import BenchDb
from .report import BASELINE, PROVIDER, Result, compare
from .sizes import Sizes


def provider_peek(db: BenchDb, queue: str, calls: int) -> Callable[[], int]:
    def work() -> int:
        with db.transport() as transport:
            for _ in range(calls):
                transport.peek(db.address(queue))
        return calls

    return work


def baseline_peek(db: BenchDb, queue: str, calls: int) -> Callable[[], int]:
    """A depth estimate by hand (newest minus oldest key), one autocommit statement each."""
    sql = db.sql("peek", queue)

    def work() -> int:
        conn = db.connect(autocommit=True)
        try:
            cur = conn.cursor()
            for _ in range(calls):
                cur.execute(sql).fetchone()
        finally:
            conn.close()
        return calls

    return work


def run(db: BenchDb, sizes: Sizes) -> list[Result]:
    results = []
    for backlog in (sizes.peek_small, sizes.backlog):
        queue = f"bench_peek_{backlog}"
        db.reset(queue)
        db.fill(queue, backlog)
        db.vacuum(queue)
        result = Result(f"peek, backlog of {backlog:,}", db.dialect, sizes.peek_calls, unit="peeks",
                        notes={"backlog": backlog})
        contestants = {BASELINE: baseline_peek(db, queue, sizes.peek_calls),
                       PROVIDER: provider_peek(db, queue, sizes.peek_calls)}
        results.append(compare(result, sizes.repeats, contestants))
        db.execute("drop_queue", queue)
    return results
