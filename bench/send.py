"""Send cases: one message per transaction, and batches of 100 and 1,000 per round trip."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

from .databases import BODY, HEADERS, BenchDb, outgoing
from .peer import Pgqueuer
from .report import BASELINE, PEER, PROVIDER, Result, compare
from .sizes import Sizes

QUEUE = "bench_send"


def provider_send(db: BenchDb, count: int, batch: int) -> Callable[[], int]:
    messages = outgoing(count)

    def work() -> int:
        with db.transport() as transport:
            address = db.address(QUEUE)
            if batch == 1:
                for message in messages:
                    transport.send(address, message)
            else:
                for start in range(0, count, batch):
                    transport.send_many(address, messages[start:start + batch])
        return count

    return work


def baseline_sender(db: BenchDb, conn: Any, queue: str, batch: int) -> Callable[[int], int]:
    """The fastest plain send on ``conn`` (made with ``db.connect(autocommit=True)``): ``send(n)`` writes ``n``
    messages in one round trip and commits them.

    One message: one autocommit INSERT. A batch on PostgreSQL: one autocommit INSERT ... SELECT FROM unnest of
    binary arrays; on SQLite: BEGIN IMMEDIATE, executemany, COMMIT (autocommit would commit each row). Like any
    sender it makes each message's Id and Headers JSON (one ``json.dumps``; no validation).
    """
    one = db.sql("send", queue)
    many = db.sql("send_many", queue) if db.dialect == "postgres" else one
    cur = conn.cursor()
    dumps, uuid4 = json.dumps, uuid.uuid4

    def headers() -> str:
        return dumps(HEADERS, separators=(",", ":"))

    def send(n: int) -> int:
        if n == 1:
            cur.execute(one, {"id": str(uuid4()), "headers": headers(), "body": BODY})
        elif db.dialect == "postgres":
            cur.execute(many, {"ids": [str(uuid4()) for _ in range(n)], "headers": [headers() for _ in range(n)],
                               "bodies": [BODY] * n})
        else:
            cur.execute("BEGIN IMMEDIATE")
            cur.executemany(many, [{"id": str(uuid4()), "headers": headers(), "body": BODY} for _ in range(n)])
            cur.execute("COMMIT")
        return n

    return send


def baseline_send(db: BenchDb, count: int, batch: int) -> Callable[[], int]:
    """``baseline_sender`` for ``count`` messages, ``batch`` at a time, on one connection."""

    def work() -> int:
        conn = db.connect(autocommit=True)
        try:
            send = baseline_sender(db, conn, QUEUE, batch)
            for start in range(0, count, batch):
                send(min(batch, count - start))
        finally:
            conn.close()
        return count

    return work


def run(db: BenchDb, sizes: Sizes, peer: Pgqueuer | None) -> list[Result]:
    results = []
    for batch, count, case in ((1, sizes.single, "send, 1 per transaction"),
                               (100, sizes.messages, "send, batches of 100"),
                               (1000, sizes.messages, "send, batches of 1,000")):
        contestants = {BASELINE: baseline_send(db, count, batch), PROVIDER: provider_send(db, count, batch)}
        if peer is not None:
            contestants[PEER] = lambda count=count, batch=batch: peer.enqueue(count, batch)

        def setup(who: str) -> None:
            if who == PEER:
                peer.reset()
            else:
                db.reset(QUEUE)

        results.append(compare(Result(case, db.dialect, count), sizes.repeats, contestants, setup,
                                   settle=db.settle))
    return results
