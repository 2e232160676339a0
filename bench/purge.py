"""Purge of 100,000 expired rows in a 1,000,000-row table: the cost must follow the expired rows, not the table.

The baseline deletes the same rows by key (their seqs, collected before the clock starts) in the same batches
of 10,000, one transaction each: the floor for removing those rows.
"""

from __future__ import annotations

from collections.abc import Callable

from .databases import BenchDb
from .report import BASELINE, PROVIDER, Result, compare
from .sizes import Sizes

QUEUE = "bench_purge"
BATCH = 10_000
DAY = 86_400.0


def provider_purge(db: BenchDb) -> Callable[[], int]:
    def work() -> int:
        with db.transport() as transport:
            return transport.purge_expired(db.address(QUEUE), batch_size=BATCH)

    return work


def baseline_delete_by_key(db: BenchDb, keys: list[int]) -> Callable[[], int]:
    sql = db.sql("delete", QUEUE)

    def work() -> int:
        conn = db.connect()
        try:
            cur = conn.cursor()
            for start in range(0, len(keys), BATCH):
                db.begin(cur)
                cur.execute(sql, {"seqs": db.seqs(keys[start:start + BATCH])})
                conn.commit()
        finally:
            conn.close()
        return len(keys)

    return work


def run(db: BenchDb, sizes: Sizes) -> list[Result]:
    db.reset(QUEUE)
    db.fill(QUEUE, sizes.backlog - sizes.purge, expires_s=DAY)  # live rows, in the expires index too
    keys: list[int] = []

    def setup(_: str) -> None:
        db.vacuum(QUEUE)
        db.fill(QUEUE, sizes.purge, expires_s=-DAY)
        keys[:] = [row[0] for row in db.execute("expired_keys", QUEUE)]

    contestants = {BASELINE: lambda: baseline_delete_by_key(db, keys)(), PROVIDER: provider_purge(db)}
    result = Result(f"purge {sizes.purge:,} expired of {sizes.backlog:,}", db.dialect, sizes.purge, unit="rows",
                    notes={"table_rows": sizes.backlog})
    compare(result, sizes.repeats, contestants, setup, settle=db.settle)
    db.execute("drop_queue", QUEUE)
    return [result]
