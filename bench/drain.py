"""Drain cases: the drain operator's core paths.

* handler (no-op) with concurrency 1 and 4: ``transport.process`` as ``SqlQueueDrainOperator(handler=...)``
  runs it (lock a batch of 100, handle each row, delete the batch, commit);
* to Parquet: ``transport.drain`` with the operator's ``ParquetBatchWriter`` as the sink (one file per batch,
  written, fsync'ed and renamed before the receive commits).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .databases import BenchDb
from .hand_pipeline import write_whole
from .receive import in_threads
from .report import BASELINE, PROVIDER, Result, compare
from .sizes import Sizes

QUEUE = "bench_drain"
#: The drain operator's default batch size.
BATCH = 100


def noop(*_: Any) -> None:
    """The handler: does nothing, so the figure is the receive path's own cost."""


# -- handler path ----------------------------------------------------------------------------------------
def provider_process(db: BenchDb, concurrency: int) -> Callable[[], int]:
    def work() -> int:
        with db.transport() as transport:
            summary = transport.process(db.address(QUEUE), noop, batch_size=BATCH, concurrency=concurrency)
        return summary.succeeded

    return work


def baseline_batch(db: BenchDb, queue: str, conn: Any) -> Callable[[], int]:
    """One batch by hand on ``conn`` (not in autocommit): in one transaction, DELETE ... RETURNING a batch (SKIP
    LOCKED), parse each row's headers and call the handler (expired rows dropped), commit. A handler that raises
    rolls the batch back: every row returns, as the provider's pump guarantees. Returns the rows it took."""
    take = db.sql("receive", queue)
    cur = conn.cursor()
    params = {"batch_size": BATCH}
    loads = json.loads

    def batch() -> int:
        db.begin(cur)
        rows = cur.execute(take, params).fetchall()
        for row in rows:
            if not row[2]:
                noop(row, loads(row[3]))
        conn.commit()
        return len(rows)

    return batch


def baseline_process(db: BenchDb, concurrency: int) -> Callable[[], int]:
    """By hand: ``baseline_batch`` until the queue is empty, one connection per receiver."""

    def receiver() -> int:
        conn = db.connect()
        done = 0
        try:
            batch = baseline_batch(db, QUEUE, conn)
            while taken := batch():
                done += taken
            return done
        finally:
            conn.close()

    return lambda: in_threads(concurrency, receiver)


# -- Parquet path ----------------------------------------------------------------------------------------
def parquet_sink(directory: Path) -> Callable[[list[Any]], int]:
    """The drain operator's sink: ``ParquetBatchWriter.write`` of one file per batch."""
    from airflow_sqlqueue.operators.parquet import ParquetBatchWriter

    target = ParquetBatchWriter(str(directory))

    def sink(messages: list[Any]) -> int:
        target.write(messages, f"bench-{uuid.uuid4().hex}.parquet")
        return len(messages)

    return sink


def write_parquet_by_hand(rows: list[tuple], queue: str, directory: Path) -> None:
    """The baseline's file: the same columns from the raw rows, written, fsync'ed and renamed into place."""
    import pyarrow as pa

    now = datetime.now(timezone.utc)
    table = pa.table({"id": [str(r[0]) for r in rows], "seq": [r[1] for r in rows], "queue": [queue] * len(rows),
                      "headers": [r[3] for r in rows], "body": [bytes(r[4]) for r in rows],
                      "received_at": [now] * len(rows)})
    write_whole(table, directory / f"raw-{uuid.uuid4().hex}.parquet")


def provider_to_parquet(db: BenchDb, queue: str, directory: Path, batch: int) -> Callable[[], int]:
    sink = parquet_sink(directory)  # imports the operator module now, not on the clock

    def work() -> int:
        with db.transport() as transport:
            return transport.drain(db.address(queue), sink, batch_size=batch).delivered

    return work


def baseline_to_parquet(db: BenchDb, queue: str, directory: Path, batch: int) -> Callable[[], int]:
    """By hand: DELETE ... RETURNING a batch, read each row's headers (a drain must know a row is a message:
    not expired, readable, not to be forwarded; the provider's drain reads them to sort rows out), write the
    batch's file, commit."""
    import pyarrow.parquet  # noqa: F401 - imported now, not on the clock

    receive = db.sql("receive", queue)

    def work() -> int:
        directory.mkdir(parents=True, exist_ok=True)
        conn = db.connect()
        done = 0
        try:
            cur = conn.cursor()
            while True:
                db.begin(cur)
                taken = cur.execute(receive, {"batch_size": batch}).fetchall()
                rows = [row for row in taken if not row[2]]  # expired: dropped
                for row in rows:
                    json.loads(row[3])
                if rows:
                    write_parquet_by_hand(rows, db.address(queue), directory)
                conn.commit()
                if not taken:
                    return done
                done += len(rows)
        finally:
            conn.close()

    return work


def run(db: BenchDb, sizes: Sizes) -> list[Result]:
    count = sizes.messages
    results = []
    for concurrency in (1, 4):
        def setup(_: str) -> None:
            db.reset(QUEUE)
            db.fill(QUEUE, count)

        contestants = {BASELINE: baseline_process(db, concurrency), PROVIDER: provider_process(db, concurrency)}
        results.append(compare(Result(f"drain, no-op handler, concurrency {concurrency}", db.dialect, count),
                               sizes.repeats, contestants, setup, settle=db.settle))
    out = db.workdir / "parquet"
    out.mkdir(parents=True, exist_ok=True)
    write_parquet_by_hand([(uuid.uuid4(), 0, False, "{}", b"")], "warm-up", out)  # pyarrow's first write is slow

    def setup_files(_: str) -> None:
        setup("")
        for path in out.glob("*.parquet"):
            path.unlink()

    contestants = {BASELINE: baseline_to_parquet(db, QUEUE, out, BATCH),
                   PROVIDER: provider_to_parquet(db, QUEUE, out, BATCH)}
    results.append(compare(Result("drain to Parquet, batches of 100", db.dialect, count), sizes.repeats,
                           contestants, setup_files, settle=db.settle))
    return results
