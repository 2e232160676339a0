"""Competing consumers, counted message by message, on SQLite and on the real PostgreSQL.

8 receiver threads in one process, and 4 processes of 2 threads each, drain ``MESSAGES`` (20,000 by default):
- no handler fails: every message is handled exactly once (every mode, and ``drain()``), and more than one
  receiver took messages on PostgreSQL (they really competed; SQLite's one writer is reported, not asserted);
- handlers fail at random (RECEIVE_ONLY, SENDS_ATOMIC_WITH_RECEIVE; TRANSACTION_SCOPE with threads): every
  message ends processed or in the error queue, never both, never neither; in SENDS_ATOMIC_WITH_RECEIVE and
  TRANSACTION_SCOPE no send of a failed attempt escapes, in RECEIVE_ONLY every attempt's send lands (ghost
  sends, as the reference says).
"""

from __future__ import annotations

import json
import multiprocessing
import threading
import time
from collections import Counter

import pytest

from airflow_sqlqueue.transport import TransactionMode
from airflow_sqlqueue.transport.wire import headers as h
from airflow_sqlqueue.transport.wire.failures import FailureInfoStorage

from .helpers import MESSAGES, SEED, bodies, count, duplicates, error_rows, fill, lost, summary
from .workers import ALWAYS_FAILS_EVERY, CountingHandler, InjectedFailure, process_in_child, should_fail

THREADS = 8
PROCESSES = 4
THREADS_PER_PROCESS = 2
FAIL_RATE = 0.2
RETRIES = 2
CTX = multiprocessing.get_context("spawn")


def _expected_errors(sent: set[bytes]) -> set[bytes]:
    """Messages whose first RETRIES + 1 attempts all fail (one process: attempts counted per message)."""
    return {b for b in sent if all(should_fail(b, a, FAIL_RATE, SEED) for a in range(1, RETRIES + 2))}


def _assert_threads_competed(db, threads: set[str]) -> None:
    """On PostgreSQL more than one receiver thread took messages (lock-skipping receivers really competed).
    SQLite has one writer and its lock is not fair: one thread may take nearly everything, so it is reported."""
    if db.kind == "postgres":
        assert len(threads) > 1, f"only {len(threads)} receiver thread took messages: nothing competed"


# -- no handler fails: exactly once --------------------------------------------------------------------
@pytest.mark.parametrize("mode", list(TransactionMode), ids=lambda m: m.value)
def test_threads_deliver_exactly_once(queues, mode):
    t, q = queues.transport, queues.q("orders")
    sent = fill(queues, q, MESSAGES)
    handler = CountingHandler(None, 0.0, SEED)
    result = t.process(q, handler, mode=mode, concurrency=THREADS, batch_size=50, immediate_retries=0)
    assert not duplicates(handler.succeeded), "a message was handled twice"
    missing = lost(sent, handler.succeeded)
    assert not missing
    assert len(handler.succeeded) == MESSAGES == result.succeeded == result.received
    assert count(queues, "orders") == 0 and count(queues, "error") == 0
    _assert_threads_competed(queues, handler.threads)
    summary(f"threads_exactly_once[{mode.value}]", queues.kind, messages=MESSAGES, faults=0, lost=len(missing),
            receivers=f"{len(handler.threads)}/{THREADS}", duplicates=0)


def test_drain_threads_store_exactly_once(queues):
    t, q = queues.transport, queues.q("orders")
    sent = fill(queues, q, MESSAGES)
    stored: list[bytes] = []
    lock = threading.Lock()

    threads: set[str] = set()

    def sink(messages):
        with lock:
            stored.extend(m.body for m in messages)
            threads.add(threading.current_thread().name)
        return len(messages)

    result = t.drain(q, sink, batch_size=100, concurrency=THREADS)
    assert not duplicates(stored)
    missing = lost(sent, stored)
    assert not missing and result.delivered == MESSAGES
    assert count(queues, "orders") == 0
    _assert_threads_competed(queues, threads)
    summary("drain_threads_exactly_once", queues.kind, messages=MESSAGES, faults=0, lost=len(missing),
            receivers=f"{len(threads)}/{THREADS}", batches=result.batches)


def _run_processes(db, tmp_path, mode: str, rate: float, replies: str | None) -> list[dict]:
    ready, start = CTX.Semaphore(0), CTX.Event()
    outs = [tmp_path / f"consumer-{i}.json" for i in range(PROCESSES)]
    workers = [CTX.Process(target=process_in_child,
                           args=(db.url, db.q("orders"), db.q("error"), replies, mode, rate, SEED,
                                 THREADS_PER_PROCESS, RETRIES, str(out), ready, start))
               for out in outs]
    for worker in workers:
        worker.start()
    try:
        for _ in workers:
            assert ready.acquire(timeout=120), "a consumer process did not start"
        start.set()
        for worker in workers:
            worker.join(timeout=240)
    finally:
        for worker in workers:
            if worker.is_alive():
                worker.kill()
                worker.join()
    results = [json.loads(out.read_text()) for out in outs]
    errors = [r["error"] for r in results if not r["ok"]]
    assert not errors, errors
    return results


def _assert_processes_competed(db, per_process: list[int]) -> None:
    """Every process took messages (PostgreSQL: lock-skipping receivers share the queue); SQLite's single
    writer lock is not fair, so there at least two processes must have taken some."""
    busy = sum(1 for n in per_process if n)
    wanted = PROCESSES if db.kind == "postgres" else 2
    assert busy >= wanted, f"only {busy} of {PROCESSES} consumer processes took messages: {per_process}"


def test_processes_deliver_exactly_once(queues, tmp_path):
    sent = fill(queues, queues.q("orders"), MESSAGES)
    results = _run_processes(queues, tmp_path, TransactionMode.SENDS_ATOMIC_WITH_RECEIVE.value, 0.0, None)
    handled = [b.encode() for r in results for b in r["succeeded"]]
    assert not duplicates(handled), "a message was handled by two consumers"
    missing = lost(sent, handled)
    assert not missing and len(handled) == MESSAGES
    assert count(queues, "orders") == 0 and count(queues, "error") == 0
    per_process = [len(r["succeeded"]) for r in results]
    _assert_processes_competed(queues, per_process)
    summary("processes_exactly_once", queues.kind, messages=MESSAGES, faults=0, lost=len(missing),
            receivers=f"{PROCESSES}x{THREADS_PER_PROCESS}", per_process=per_process)


# -- handlers fail at random -------------------------------------------------------------------------
def _check_outcome(db, sent: set[bytes], succeeded: list[bytes], attempts: Counter, mode: TransactionMode) -> dict:
    """Every message processed xor in the error queue; the sends as the mode promises. Returns figures."""
    errors = error_rows(db)
    in_error = [body for _, _, body in errors]
    assert not duplicates(succeeded), "a message was processed twice"
    assert not duplicates(in_error), "a message is in the error queue twice"
    assert not set(succeeded) & set(in_error), "a message is both processed and in the error queue"
    missing = lost(sent, succeeded, in_error)
    assert not missing, f"{len(missing)} messages lost, e.g. {sorted(missing)[:5]}"
    # process() returns with the queue empty: rows returned for a retry by a batch still in flight are not left
    assert count(db, "orders") == 0
    for _, error_headers, _ in errors:
        parsed = h.parse_headers(error_headers)
        assert parsed[h.FAILED_Q] == db.transport.wire_address(db.q("orders"))
        assert parsed[h.EXCEPTION_TYPE].endswith("InjectedFailure")
        assert parsed["NServiceBus.EnclosedMessageTypes"] == "Reliability.Test"
    replies = Counter(bodies(db, "replies"))
    if mode.atomic_sends:
        # only the attempt that succeeded sent anything: one reply per processed message, none for failures
        assert replies == Counter(b"reply-" + b for b in succeeded)
    else:
        # RECEIVE_ONLY: sends commit at once, so every attempt's send landed, failed ones too (ghost sends)
        assert replies == Counter({b"reply-" + b: n for b, n in attempts.items()})
    failures = sum(attempts.values()) - len(succeeded)
    return {"faults": failures, "lost": len(missing), "errors": len(in_error), "processed": len(succeeded),
            "replies": sum(replies.values())}


@pytest.mark.parametrize("mode", [TransactionMode.RECEIVE_ONLY, TransactionMode.SENDS_ATOMIC_WITH_RECEIVE,
                                  TransactionMode.TRANSACTION_SCOPE], ids=lambda m: m.value)
def test_threads_with_failing_handlers_lose_nothing(queues, mode):
    t, q = queues.transport, queues.q("orders")
    sent = fill(queues, q, MESSAGES)
    handler = CountingHandler(queues.q("replies"), FAIL_RATE, SEED)
    failures = FailureInfoStorage(max_entries=MESSAGES)
    t.pump(q, handler, mode=mode, batch_size=50, concurrency=THREADS, immediate_retries=RETRIES,
                failures=failures).run()
    figures = _check_outcome(queues, sent, handler.succeeded, handler.attempts, mode)
    # one process counts attempts per message exactly: the error queue holds exactly the predicted messages
    assert {b for _, _, b in error_rows(queues)} == _expected_errors(sent)
    assert figures["faults"] == handler.failures
    _assert_threads_competed(queues, handler.threads)
    summary(f"threads_failing_handlers[{mode.value}]", queues.kind, messages=MESSAGES,
            receivers=f"{len(handler.threads)}/{THREADS}", **figures)


@pytest.mark.parametrize("mode", [TransactionMode.RECEIVE_ONLY, TransactionMode.SENDS_ATOMIC_WITH_RECEIVE],
                         ids=lambda m: m.value)
def test_processes_with_failing_handlers_lose_nothing(queues, tmp_path, mode):
    sent = fill(queues, queues.q("orders"), MESSAGES)
    results = _run_processes(queues, tmp_path, mode.value, FAIL_RATE, queues.q("replies"))
    succeeded = [b.encode() for r in results for b in r["succeeded"]]
    attempts: Counter = Counter()
    for r in results:
        attempts.update({b.encode(): n for b, n in r["attempts"].items()})
    figures = _check_outcome(queues, sent, succeeded, attempts, mode)
    # a message that always fails ends in the error queue whichever processes tried it
    always = {b for b in sent if int(b.split(b"-")[1]) % ALWAYS_FAILS_EVERY == 0}
    assert always <= {b for _, _, b in error_rows(queues)}
    assert figures["faults"] == sum(r["failures"] for r in results)
    per_process = [len(r["attempts"]) for r in results]
    _assert_processes_competed(queues, per_process)
    summary(f"processes_failing_handlers[{mode.value}]", queues.kind, messages=MESSAGES,
            receivers=f"{PROCESSES}x{THREADS_PER_PROCESS}", **figures)



def test_process_stops_while_rows_are_returned_for_retry(db):
    if db.kind != "postgres":
        pytest.skip("SQLite has one writer: a second receiver waits instead of finding the queue empty")
    t, q = db.transport, db.q("orders")
    t.create_queues([q, db.q("error")])
    t.send_many(q, [b"slow-fail", b"fast"])
    calls: list[bytes] = []

    def handler(message, context):
        calls.append(message.body)
        if message.body == b"slow-fail" and calls.count(b"slow-fail") == 1:
            time.sleep(0.5)  # meanwhile the other receiver handles "fast" and finds nothing left to take
            raise InjectedFailure("first attempt fails")

    result = t.process(q, handler, concurrency=2, batch_size=1, immediate_retries=3)
    assert result.retries == 1
    # the promise of stop_when_empty: the queue is empty when process() returns
    assert count(db, "orders") == 0 and calls.count(b"slow-fail") == 2
