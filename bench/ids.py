"""Native Id kinds side by side: random UUIDv4 against time-ordered UUIDv7 (``transport/ids.py``).

Sends the same messages into a fresh PostgreSQL queue (primary key on id, as upstream's shape) once per kind,
on a table that already holds a backlog, and reports the send time and the size of the primary key index (random
keys split pages all over the index; time-ordered ones fill its right edge). Run:
``python -m bench.ids [--pg-url URL] [--backlog N] [--messages N] [--batch N] [--repeats N]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable

from airflow_sqlqueue.transport.processing import sending
from airflow_sqlqueue.transport.wire.ids import new_id

from .databases import BenchDb, outgoing

KINDS: dict[str, Callable[[], uuid.UUID]] = {"uuid4": uuid.uuid4, "uuid7": new_id}


def run_kind(pg_url: str, kind: str, backlog: int, messages: int, batch: int) -> tuple[float, int]:
    """(seconds to send ``messages`` after a ``backlog`` sent the same way, primary key bytes at the end)."""
    db = BenchDb.open("postgres", pg_url)
    saved = sending._new_id
    sending._new_id = KINDS[kind]
    try:
        with db.transport() as transport:
            queue = db.address("ids")
            transport.create_queue(queue)
            fill = outgoing(batch)
            for _ in range(0, backlog, batch):
                transport.send_many(queue, fill)
            batches = [outgoing(batch) for _ in range(0, messages, batch)]
            start = time.perf_counter()
            for part in batches:
                transport.send_many(queue, part)
            seconds = time.perf_counter() - start
            import psycopg

            with psycopg.connect(pg_url) as conn:
                size = conn.execute("SELECT pg_relation_size(%s::regclass)",
                                    (f'"{db.schema}"."ids_pkey"',)).fetchone()[0]
        return seconds, int(size)
    finally:
        sending._new_id = saved
        db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--backlog", type=int, default=200_000)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"backlog {args.backlog}, then {args.messages} messages in batches of {args.batch}; "
          f"median of {args.repeats} (kinds interleaved)")
    results: dict[str, list[tuple[float, int]]] = {k: [] for k in KINDS}
    for _ in range(args.repeats):
        for kind in KINDS:
            results[kind].append(run_kind(args.pg_url, kind, args.backlog, args.messages, args.batch))
    print(f"{'ids':<6} {'send s':>8} {'msg/s':>9} {'pkey MB':>8}")
    for kind, runs in results.items():
        seconds = statistics.median(r[0] for r in runs)
        size = statistics.median(r[1] for r in runs)
        print(f"{kind:<6} {seconds:8.3f} {args.messages / seconds:9.0f} {size / 2**20:8.1f}")


if __name__ == "__main__":
    main()
