"""Receivers that start past the last row they took (PostgreSQL), and never strand a row below it.

The pump's and the drain's receivers on PostgreSQL start each receive past the last position they took, so a
receive does not walk the dead index entries earlier receives left at the head of the queue (they stay while a
long transaction holds the xmin horizon). Rows below the position (a sender whose transaction took its position
earlier and committed later, a released message, a rolled-back batch, delayed messages coming back) must still
be received: these tests count every message with real PostgreSQL, with out-of-order commits, put-backs,
rollbacks and deferred messages, and check the bound on how long a row below the position can wait.
"""

from __future__ import annotations

import random
import threading
from collections import Counter

import psycopg
import pytest

from airflow_sqlqueue.transport import OutgoingMessage
from airflow_sqlqueue.transport.dialects import get_dialect
from airflow_sqlqueue.transport.processing import claim as claim_module
from airflow_sqlqueue.transport.processing.claim import Claim, ReceivePosition, ReceivePositions
from airflow_sqlqueue.transport.tables.queue import SeqRange, TableQueue
from tests.conftest import PG_URL


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def rows_at(*seqs):
    return [(None, s, False, "{}", b"") for s in seqs]


# -- the position itself -----------------------------------------------------------------------------------
def test_a_full_receive_moves_the_position_a_short_one_goes_back_to_the_head():
    position = ReceivePosition(every=100, seconds=10, clock=FakeClock())
    assert position.start() is None
    position.took(rows_at(3, 4, 5), asked=3)
    assert position.start() == 5
    position.took(rows_at(6, 9), asked=3)  # fewer than asked: the end of what it may take
    assert position.start() is None
    position.took(rows_at(10), asked=1)
    assert position.start() == 10
    position.took([], asked=1)
    assert position.start() is None
    position.took(rows_at(11), asked=1)
    position.restart()  # a rollback or a release
    assert position.start() is None
    position.took(rows_at(12, None), asked=2)  # a position it cannot read (a table of another program)
    assert position.start() is None


def test_the_position_goes_back_to_the_head_every_n_receives_and_every_t_seconds():
    clock = FakeClock()
    position = ReceivePosition(every=4, seconds=10, clock=clock)
    starts = []
    for seq in range(1, 13):
        starts.append(position.start())
        position.took(rows_at(seq), asked=1)
    # from the head, then 3 receives past the position, then the head again: at least every 4 receives
    assert starts == [None, 1, 2, 3, None, 5, 6, 7, None, 9, 10, 11]

    position = ReceivePosition(every=1000, seconds=10, clock=clock)
    assert position.start() is None
    position.took(rows_at(1), asked=1)
    clock.now += 9.9
    assert position.start() == 1
    position.took(rows_at(2), asked=1)
    clock.now += 0.1  # 10 s since the last receive from the head
    assert position.start() is None
    position.took(rows_at(3), asked=1)
    assert position.start() == 3


def test_positions_only_where_the_dialect_bounds_receives_one_per_thread():
    assert ReceivePositions(get_dialect("sqlite")).mine() is None
    assert ReceivePositions(get_dialect("mssql")).mine() is None
    positions = ReceivePositions(get_dialect("postgres"))
    mine = positions.mine()
    assert mine is positions.mine()
    other: list = []
    thread = threading.Thread(target=lambda: other.append(positions.mine()))
    thread.start()
    thread.join()
    assert other[0] is not None and other[0] is not mine


def test_a_range_receive_starts_past_the_position_and_stops_at_the_end_of_its_range():
    calls = []

    class Dialect:
        def execute(self, cursor, name, params, **ids):
            calls.append((name, params))

            class Rows:
                def fetchall(self):
                    return []
            return Rows()

        def runner(self, name, ids):
            return lambda cursor, params: self.execute(cursor, name, params, **ids)

    queue = TableQueue.__new__(TableQueue)
    queue.dialect, queue.ids, queue._runners = Dialect(), {}, {}
    assert queue.take(None, 5, SeqRange(10, 20), after=14) == []
    assert calls[-1] == ("receive_range", {"batch_size": 5, "first_seq": 15, "last_seq": 20})
    assert queue.take(None, 5, SeqRange(10, 20), after=3) == []
    assert calls[-1][1]["first_seq"] == 10
    n = len(calls)
    assert queue.take(None, 5, SeqRange(10, 20), after=20) == []  # past the end of its range: no statement
    assert len(calls) == n


# -- with real PostgreSQL --------------------------------------------------------------------------------
def spy_after(monkeypatch) -> list:
    """Record the position every receive of a claim starts after (None: the head)."""
    seen: list = []
    take, lock = TableQueue.take, TableQueue.lock

    def spy_take(self, cursor, count, within=None, after=None):
        seen.append(after)
        return take(self, cursor, count, within, after)

    def spy_lock(self, cursor, count, after=None):
        seen.append(after)
        return lock(self, cursor, count, after)

    monkeypatch.setattr(TableQueue, "take", spy_take)
    monkeypatch.setattr(TableQueue, "lock", spy_lock)
    return seen


def test_a_claim_that_finds_nothing_past_its_position_looks_from_the_head(pg, monkeypatch):
    t, q = pg.transport, pg.q("orders")
    t.create_queue(q)
    seen = spy_after(monkeypatch)
    with psycopg.connect(PG_URL) as late:
        t.send(q, b"late", cursor=late.cursor())  # takes its position now, commits below
        t.send(q, b"first")
        position = ReceivePosition()
        table = t.book.queue(q)
        with Claim(t.session, table, take=True, position=position).open(1) as claim:
            assert [m.body for m in claim.messages] == [b"first"]
        first = claim.messages[0].seq
        assert position.after == first
        late.commit()
    with Claim(t.session, table, take=True, position=position).open(1) as claim:
        # nothing past the position; the same claim looked from the head: an empty claim means an empty queue
        assert [m.body for m in claim.messages] == [b"late"]
        assert claim.messages[0].seq < first
    assert seen == [None, first, None]
    assert t.count(q) == 0


@pytest.mark.parametrize("take", [True, False])
def test_a_rolled_back_or_released_claim_sends_its_receiver_back_to_the_head(pg, take):
    t, q = pg.transport, pg.q("orders")
    t.create_queue(q)
    t.send_many(q, [b"a", b"b", b"c", b"d"])
    table = t.book.queue(q)
    position = ReceivePosition()
    with Claim(t.session, table, take=True, position=position).open(1) as claim:
        assert [m.body for m in claim.messages] == [b"a"]
    assert position.after is not None
    claim = Claim(t.session, table, take=take, position=position).open(1)
    assert [m.body for m in claim.messages] == [b"b"] and position.after == claim.messages[0].seq
    if take:
        claim.abandon()
    else:
        claim.release(claim.messages[0])
        claim.commit()
    assert position.after is None
    with Claim(t.session, table, take=True, position=position).open(4) as claim:
        assert [m.body for m in claim.messages] == [b"b", b"c", b"d"]


def test_a_row_committed_late_below_the_position_is_received_within_the_restart_count(pg, monkeypatch):
    """A saturated queue (never empty): the receiver passes a row whose sender commits later; it goes back to
    the head within RESTART_EVERY receives, so the row is received then, not when the queue runs dry."""
    t, q = pg.transport, pg.q("orders")
    t.create_queue(q)
    monkeypatch.setattr(claim_module, "RESTART_SECONDS", 3600.0)  # only the count: deterministic
    every = claim_module.RESTART_EVERY
    seen = spy_after(monkeypatch)
    late = psycopg.connect(PG_URL)
    try:
        t.send(q, b"late", cursor=late.cursor())
        sent = [f"m{i}".encode() for i in range(3 * every)]
        t.send_many(q, sent)
        handled: list[bytes] = []
        committed_at: list[int] = []

        def handler(message, context):
            handled.append(message.body)
            if len(handled) == 5:
                late.commit()  # below every receiver's position now
                committed_at.append(len(handled))

        summary = t.process(q, handler, batch_size=1, max_messages=len(sent) + 1)
    finally:
        late.close()
    assert summary.succeeded == len(sent) + 1
    assert Counter(handled) == Counter([*sent, b"late"])  # each once
    assert t.count(q) == 0
    where = handled.index(b"late")
    assert committed_at[0] < where <= committed_at[0] + every
    assert handled[:where] + handled[where + 1:] == sent  # the others in queue order
    assert sum(a is not None for a in seen) >= 2 * every  # most receives started past the position


def _senders(t, q, n_threads: int, per_thread: int, rollback_every: int, kept: list, lock: threading.Lock) -> list:
    """Threads sending in transactions of their own that take positions and commit out of order."""

    def send(k: int) -> None:
        rnd = random.Random(k)
        with psycopg.connect(PG_URL) as conn:
            for i in range(per_thread):
                bodies = [f"s{k}-{i}-{j}".encode() for j in range(rnd.randint(1, 3))]
                t.send_many(q, bodies, cursor=conn.cursor())
                if rnd.random() < 0.5:
                    threading.Event().wait(rnd.random() * 0.004)  # others take later positions meanwhile
                if i % rollback_every == rollback_every - 1:
                    conn.rollback()
                else:
                    conn.commit()
                    with lock:
                        kept.extend(bodies)

    return [threading.Thread(target=send, args=(k,)) for k in range(n_threads)]


class FailsFirst:
    """A pump handler that fails the first attempt of each message ``fails(body)`` picks and counts, per body,
    attempts and successes."""

    def __init__(self, fails, lock: threading.Lock) -> None:
        self.fails, self.lock = fails, lock
        self.attempts: Counter = Counter()
        self.succeeded: Counter = Counter()

    def __call__(self, message, context) -> None:
        with self.lock:
            self.attempts[message.body] += 1
            first = self.attempts[message.body] == 1
        if first and self.fails(message.body):
            raise RuntimeError("first attempt fails")
        with self.lock:
            self.succeeded[message.body] += 1


def test_pump_with_out_of_order_senders_and_put_backs_loses_and_strands_nothing(pg):
    """Four senders commit out of order while six receivers run the pump; a message in ten fails its first
    attempt (released: put back below every position). Every committed message is handled exactly once."""
    t, q = pg.transport, pg.q("orders")
    t.create_queues([q, pg.q("error")])
    kept: list[bytes] = []
    lock = threading.Lock()
    senders = _senders(t, q, n_threads=4, per_thread=120, rollback_every=7, kept=kept, lock=lock)
    handler = FailsFirst(lambda body: hash(body) % 10 == 0, lock)
    succeeded = handler.succeeded
    pump = t.pump(q, handler, batch_size=3, concurrency=6, immediate_retries=5)
    for s in senders:
        s.start()
    done = threading.Event()
    runs = []

    def receive() -> None:
        while not done.is_set():
            runs.append(pump.run(max_duration=0.5, stop_when_empty=False))

    receiver = threading.Thread(target=receive)
    receiver.start()
    for s in senders:
        s.join()
    # every sender committed: receive until each kept message was handled (a stranded one would keep it waiting
    # forever: the safety stop below makes that a failure, not a hang)
    for _ in range(600):
        with lock:
            if len(succeeded) >= len(kept):
                break
        threading.Event().wait(0.1)
    done.set()
    receiver.join()
    assert set(succeeded) == set(kept), f"{len(set(kept) - set(succeeded))} stranded"
    assert all(n == 1 for n in succeeded.values())  # none twice
    assert t.count(q) == 0 and t.count(pg.q("error")) == 0
    assert sum(r.retries for r in runs) == sum(1 for b in kept if hash(b) % 10 == 0)


class SinkFailed(Exception):
    """The sink could not store a batch."""


def test_drain_with_out_of_order_senders_and_rollbacks_loses_and_strands_nothing(pg):
    """Three senders commit out of order while four drain receivers take batches; a batch in eight fails in the
    sink (rolled back: its rows back below every position). Every committed message is delivered, none twice."""
    t, q = pg.transport, pg.q("orders")
    t.create_queue(q)
    kept: list[bytes] = []
    lock = threading.Lock()
    senders = _senders(t, q, n_threads=3, per_thread=120, rollback_every=5, kept=kept, lock=lock)
    delivered: Counter = Counter()
    batches = [0]

    def sink(messages) -> int:
        with lock:
            batches[0] += 1
            fail = batches[0] % 8 == 0
        if fail:
            raise SinkFailed("not stored")  # the claim rolls back
        with lock:
            delivered.update(m.body for m in messages)
        return len(messages)

    for s in senders:
        s.start()
    for _ in range(20000):  # a safety stop: a stranded message fails the test instead of hanging it
        try:
            taken = t.drain(q, sink, batch_size=8, concurrency=4, max_duration=0.5).taken
        except SinkFailed:
            taken = 1
        if not any(s.is_alive() for s in senders):
            with lock:
                if len(delivered) >= len(kept):
                    break
        if not taken:
            threading.Event().wait(0.01)
    for s in senders:
        s.join()
    assert set(delivered) == set(kept), f"{len(set(kept) - set(delivered))} stranded"
    assert all(n == 1 for n in delivered.values())
    assert t.count(q) == 0


def test_deferred_messages_come_back_and_are_handled_while_the_queue_stays_full(pg):
    """Delayed sends and delayed retries leave the queue and come back (the mover) while four receivers keep
    a full queue busy: each is handled once, none stranded."""
    t, q = pg.transport, pg.q("orders")
    t.create_queue(q, delayed=True)
    t.create_queue(pg.q("error"))
    plain = [f"p{i}".encode() for i in range(600)]
    t.send_many(q, plain[:300])
    deferred = [f"d{i}".encode() for i in range(20)]
    t.send_many(q, [OutgoingMessage(b, delay=0.01) for b in deferred])
    retried = {b"p7", b"p150", b"p299"}  # fail once: a delayed retry, back through the delayed table
    lock = threading.Lock()
    handler = FailsFirst(retried.__contains__, lock)
    attempts, succeeded = handler.attempts, handler.succeeded
    pump = t.pump(q, handler, batch_size=2, concurrency=4, immediate_retries=0, delayed_retries=1,
                  delayed_retry_delay=0.01)
    done = threading.Event()

    def mover() -> None:
        sent_rest = False
        while not done.is_set():
            t.move_due_delayed(q)
            if not sent_rest:
                t.send_many(q, plain[300:])  # more behind the deferred ones
                sent_rest = True
            done.wait(0.02)

    thread = threading.Thread(target=mover)
    thread.start()
    expected = set(plain) | set(deferred)
    try:
        for _ in range(600):
            pump.run(max_duration=0.2, stop_when_empty=False)
            with lock:
                if set(succeeded) >= expected:
                    break
    finally:
        done.set()
        thread.join()
    assert set(succeeded) == expected
    assert all(n == 1 for n in succeeded.values())
    assert all(attempts[b] == 2 for b in retried)
    assert t.count(q) == 0 and t.count(pg.q("error")) == 0
