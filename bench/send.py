"""Send cases: one message per transaction, and batches of 100 and 1,000 per round trip."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

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


def baseline_send(db: BenchDb, count: int, batch: int) -> Callable[[], int]:
    """The same INSERTs by hand: one per transaction, or one statement per batch (executemany on SQLite).

    Like any sender, it makes each message's Id and Headers JSON (one ``json.dumps``; no validation).
    """
    one = db.sql("send", QUEUE)
    many = db.sql("send_many", QUEUE) if db.dialect == "postgres" else one

    def headers() -> str:
        return json.dumps(HEADERS, separators=(",", ":"))

    def params() -> dict:
        return {"id": str(uuid.uuid4()), "ttbr_ms": None, "headers": headers(), "body": BODY}

    def work() -> int:
        conn = db.connect()
        try:
            cur = conn.cursor()
            for start in range(0, count, batch):
                n = min(batch, count - start)
                db.begin(cur)
                if n == 1:
                    cur.execute(one, params())
                elif db.dialect == "postgres":
                    cur.execute(many, {"ids": [str(uuid.uuid4()) for _ in range(n)], "ttbr_ms": [None] * n,
                                       "headers": [headers() for _ in range(n)], "bodies": [BODY] * n})
                else:
                    cur.executemany(many, [params() for _ in range(n)])
                conn.commit()
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
