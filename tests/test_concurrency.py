"""Competing consumers and creators, on SQLite and on the real PostgreSQL: threads and processes.

Every message carries a unique body; the tests count them: none lost, none received twice.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections import Counter

import pytest

from airflow_sqlqueue.transport import OutgoingMessage, SqlQueueTransport

MESSAGES = 2_000
WORKERS = 4
# spawn: each child is a fresh interpreter that opens its own connections from the URL
CTX = multiprocessing.get_context("spawn")


def _table(db, name: str) -> str:
    return db.transport.dialect.qualified(db.transport.address(db.q(name)))


def _count(db, name: str) -> int:
    return db.sql(f"SELECT count(*) FROM {_table(db, name)}")[0][0]  # noqa: S608


def _fill(db, queue: str, n: int = MESSAGES) -> set[bytes]:
    sent = [f"msg-{i:05d}".encode() for i in range(n)]
    for start in range(0, n, 500):
        db.transport.send_many(queue, [OutgoingMessage(b) for b in sent[start:start + 500]])
    assert _count(db, "orders") == n
    return set(sent)


def _assert_exactly_once(received: list[bytes], sent: set[bytes]) -> None:
    duplicates = {body: n for body, n in Counter(received).items() if n > 1}
    assert not duplicates, f"received more than once: {sorted(duplicates)[:10]}"
    assert len(received) == len(sent), f"{len(sent) - len(set(received))} lost"
    assert set(received) == sent


# -- children (top-level so that spawn can import them) --------------------------------------------
def _drain_in_child(url: str, queue: str, error_queue: str, ready, start, results) -> None:
    transport = SqlQueueTransport.from_url(url, error_queue=error_queue)
    try:
        transport.peek(queue)  # connect before the start signal
        ready.release()
        start.wait(60)
        got: list[bytes] = []
        summary = transport.process(queue, lambda m, c: got.append(m.body), batch_size=25, immediate_retries=0)
        results.put(("ok", got, summary.as_dict()))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        results.put(("error", repr(exc), {}))
    finally:
        transport.close()


def _create_in_child(url: str, queue: str, barrier, results) -> None:
    transport = SqlQueueTransport.from_url(url)
    try:
        barrier.wait(60)
        transport.create_queue(queue, delayed=True)
        results.put("ok")
    except BaseException as exc:  # noqa: BLE001
        results.put(repr(exc))
    finally:
        transport.close()


# -- draining --------------------------------------------------------------------------------------
def test_four_threads_drain_exactly_once(queues):
    t, q = queues.transport, queues.q("orders")
    sent = _fill(queues, q)
    received: list[bytes] = []
    threads: set[str] = set()
    lock = threading.Lock()

    def handler(message, context):
        with lock:
            received.append(message.body)
            threads.add(threading.current_thread().name)

    summary = t.process(q, handler, concurrency=WORKERS, batch_size=20, immediate_retries=0)
    _assert_exactly_once(received, sent)
    assert (summary.received, summary.succeeded, summary.failed, summary.retries) == (MESSAGES, MESSAGES, 0, 0)
    if queues.kind == "postgres":
        # SQLite has one writer and its busy handler sleeps: the thread that commits usually takes the lock
        # again at once, so one receiver may do all the work there (correct, just not parallel)
        assert len(threads) >= 2, "the receivers did not run concurrently"
    assert _count(queues, "orders") == 0
    assert _count(queues, "error") == 0


def test_four_processes_drain_exactly_once(queues):
    q = queues.q("orders")
    sent = _fill(queues, q)
    ready, start, results = CTX.Semaphore(0), CTX.Event(), CTX.Queue()
    workers = [CTX.Process(target=_drain_in_child, args=(queues.url, q, queues.q("error"), ready, start, results))
               for _ in range(WORKERS)]
    for worker in workers:
        worker.start()
    try:
        for _ in workers:
            assert ready.acquire(timeout=60), "a worker process did not start"
        start.set()
        outcomes = [results.get(timeout=120) for _ in workers]
    finally:
        for worker in workers:
            worker.join(timeout=30)
            if worker.is_alive():
                worker.kill()
    errors = [o for o in outcomes if o[0] != "ok"]
    assert not errors, errors
    received = [body for _, got, _ in outcomes for body in got]
    _assert_exactly_once(received, sent)
    assert sum(s["succeeded"] for _, _, s in outcomes) == MESSAGES
    if queues.kind == "postgres":  # on SQLite one writer may take every batch (see the thread test)
        assert sum(1 for _, got, _ in outcomes if got) >= 2, "the processes did not compete"
    assert _count(queues, "orders") == 0
    assert _count(queues, "error") == 0


def test_receive_from_four_threads(queues):
    t, q = queues.transport, queues.q("orders")
    sent = _fill(queues, q, 1_000)
    received: list[bytes] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    barrier = threading.Barrier(WORKERS)

    def receiver() -> None:
        try:
            barrier.wait(30)
            while True:
                batch = t.receive(q, 7)
                assert len(batch) <= 7
                if not batch:
                    return
                with lock:
                    received.extend(m.body for m in batch)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=receiver) for _ in range(WORKERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    _assert_exactly_once(received, sent)
    assert _count(queues, "orders") == 0


# -- creating --------------------------------------------------------------------------------------
def _assert_one_queue(db, name: str) -> None:
    t = db.transport
    q = db.q(name)
    assert t.exists(q)
    assert t.check(q) == []
    if db.kind == "postgres":
        tables = db.sql("SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY tablename", (db.schema,))
        assert tables == [(name,), (name + ".Delayed",)]
        indexes = db.sql("SELECT indexname FROM pg_indexes WHERE schemaname = %s ORDER BY 1", (db.schema,))
        assert indexes == [(f"{name}.Delayed_Due",), (f"{name}.Delayed_pkey",), (f"{name}_exp_ix",),
                           (f"{name}_pkey",), (f"{name}_seq_key",)]
    else:
        objects = db.sql("SELECT type, count(*) FROM sqlite_master WHERE tbl_name IN (?, ?) GROUP BY type "
                         "ORDER BY type", (name, name + ".Delayed"))
        assert objects == [("index", 3), ("table", 2)]  # expires, due, and the unique id's
    t.send(q, b"x")
    assert [m.body for m in t.receive(q)] == [b"x"]


def test_eight_threads_create_the_same_queue(db):
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []
    transports = [db.transport] * 4 + [db.new_transport() for _ in range(4)]

    def create(transport: SqlQueueTransport) -> None:
        try:
            barrier.wait(30)
            transport.create_queue(db.q("fresh"), delayed=True)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=create, args=(tr,)) for tr in transports]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for transport in transports[4:]:
        transport.close()
    assert not errors, errors
    _assert_one_queue(db, "fresh")


def test_three_processes_create_the_same_queue(db):
    barrier, results = CTX.Barrier(3), CTX.Queue()
    workers = [CTX.Process(target=_create_in_child, args=(db.url, db.q("fresh"), barrier, results))
               for _ in range(3)]
    for worker in workers:
        worker.start()
    try:
        outcomes = [results.get(timeout=120) for _ in workers]
    finally:
        for worker in workers:
            worker.join(timeout=30)
            if worker.is_alive():
                worker.kill()
    assert outcomes == ["ok"] * 3
    _assert_one_queue(db, "fresh")


@pytest.mark.parametrize("n", [1, 3])
def test_concurrency_with_fewer_messages_than_receivers(queues, n):
    t, q = queues.transport, queues.q("orders")
    sent = _fill(queues, q, n)
    received: list[bytes] = []
    lock = threading.Lock()

    def handler(message, context):
        with lock:
            received.append(message.body)

    summary = t.process(q, handler, concurrency=WORKERS, batch_size=1)
    _assert_exactly_once(received, sent)
    assert summary.succeeded == n
