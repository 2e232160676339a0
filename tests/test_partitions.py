"""Partitioned drain in the core, on SQLite and the real PostgreSQL: the plan, disjoint claims, late messages.

The operators (manifest in the task state store, crash and resume) are tested in tests/test_partition_drain.py.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import pytest

from airflow_sqlqueue.transport import Partition
from airflow_sqlqueue.transport.operations.partitions import partition_count, split
from airflow_sqlqueue.transport.tables.queue import SeqRange


def _positions(db, queue: str) -> list[int]:
    return [r.seq for r in db.transport.browse(queue, limit=100_000)]


def test_partition_count_follows_the_depth() -> None:
    assert partition_count(0) == 1
    assert partition_count(1_000_000, messages_per_partition=250_000, max_partitions=8) == 4
    assert partition_count(1_000_001, messages_per_partition=250_000, max_partitions=8) == 5
    assert partition_count(10**9, messages_per_partition=1000, max_partitions=6) == 6
    with pytest.raises(ValueError, match="messages_per_partition must be a positive integer"):
        partition_count(10, messages_per_partition=0)


def test_split_covers_the_span_without_overlap() -> None:
    for first, last, n in [(1, 1000, 4), (7, 9, 8), (5, 5, 3), (100, 1099, 7), (1, 10, 4)]:
        parts = split("q", SeqRange(first, last), n)
        assert parts[0].first == first and parts[-1].last == last
        assert all(a.last + 1 == b.first for a, b in zip(parts, parts[1:], strict=False))  # contiguous, disjoint
        assert all(p.first <= p.last for p in parts) and len(parts) <= n
        assert [p.index for p in parts] == list(range(len(parts))) and {p.count for p in parts} == {len(parts)}
    assert split("q", SeqRange(1, 10), 2, open_end=True)[-1].last is None


def test_plan_splits_the_backlog_by_position(queues) -> None:
    t, q = queues.transport, queues.q("orders")
    assert t.plan_partitions(q, partitions=4) == []  # empty queue: nothing to map
    t.send_many(q, [f"m{i}" for i in range(1000)])
    seqs = _positions(queues, q)

    plan = t.plan_partitions(q, partitions=4)
    assert [(p.first, p.last) for p in plan][0][0] == seqs[0] and plan[-1].last == seqs[-1]
    assert len(plan) == 4 and all(p.queue == t.name(q) for p in plan)
    assert sum(1 for s in seqs for p in plan if s in p.seq_range) == 1000  # every row in exactly one
    derived = t.plan_partitions(q, messages_per_partition=300, max_partitions=8)
    assert len(derived) == 4  # ceil(1000 / 300): the depth decides
    assert len(t.plan_partitions(q, messages_per_partition=100, max_partitions=3)) == 3
    assert t.plan_partitions(q, partitions=2, open_end=True)[-1].last is None
    assert Partition.from_dict(plan[2].as_dict()) == plan[2]


@pytest.mark.parametrize("open_end", [False, True])
def test_partitions_drained_in_parallel_take_each_message_once(queues, open_end: bool) -> None:
    """Four partitions drained at once (two receivers each) while a sender adds messages: every message of the
    plan is delivered exactly once, by the partition whose range holds it; later ones wait for the next run
    (closed plan) or go to the last partition (open end)."""
    t, q = queues.transport, queues.q("orders")
    sent = {str(i) for i in t.send_many(q, [f"m{i}" for i in range(2000)])}
    plan = t.plan_partitions(q, partitions=4, open_end=open_end)
    late = {str(i) for i in t.send_many(q, [f"late{i}" for i in range(150)])}  # after the plan, before the drains
    delivered: list[tuple[int, str, int]] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def drain(partition: Partition) -> None:
        def sink(messages) -> int:
            with lock:
                delivered.extend((partition.index, str(m.id), m.seq) for m in messages)
            return len(messages)

        try:
            transport = queues.new_transport()
            try:
                transport.drain(q, sink, batch_size=50, concurrency=2, partition=partition)
            finally:
                transport.close()
        except BaseException as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)

    during: set[str] = set()
    sender = threading.Thread(target=lambda: during.update(str(i) for i in t.send_many(
        q, [f"during{i}" for i in range(100)])))
    threads = [threading.Thread(target=drain, args=(p,)) for p in plan]
    for thread in [*threads, sender]:
        thread.start()
    for thread in [*threads, sender]:
        thread.join()

    assert errors == []
    ids = [i for _, i, _ in delivered]
    assert len(ids) == len(set(ids))  # no message taken twice
    assert all(seq in plan[index].seq_range for index, _, seq in delivered)  # each from its own range
    left = {str(r.id) for r in t.browse(q, limit=10_000)}
    assert set(ids) | left == sent | late | during and len(during) == 100  # nothing lost
    if open_end:
        assert sent | late <= set(ids)
        assert {i for index, i, _ in delivered if index == 3} >= late
    else:
        assert set(ids) == sent and late <= left  # the plan's backlog only; the rest waits


def test_a_partition_of_another_queue_is_refused(queues) -> None:
    t = queues.transport
    t.send_many(queues.q("orders"), ["a", "b"])
    [partition] = t.plan_partitions(queues.q("orders"), partitions=1)
    with pytest.raises(ValueError, match="drain the queue the partitions were planned for"):
        t.drain(queues.q("replies"), lambda m: len(m), partition=partition)
    assert len(_positions(queues, queues.q("orders"))) == 2


@pytest.mark.parametrize("value, message", [
    ({"queue": "q", "index": 0}, "a dict with the keys"),
    ("[0, 10]", "a dict with the keys"),
    ({"queue": "q", "index": 3, "count": 2, "first": 1, "last": 5}, "index must be in 0..count-1"),
    ({"queue": "q", "index": 0, "count": 1, "first": 9, "last": 5}, "must not end"),
    ({"queue": "q", "index": 0, "count": 1, "first": "1", "last": 5}, "whole numbers"),
])
def test_a_malformed_partition_gets_a_clear_error(value, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Partition.from_dict(value)


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_a_partition_judges_expiry_as_every_receive_does(queues) -> None:
    """A partition's claim (``receive_range``) reads Expires as a date, as ``receive_batch`` does: an Expires another
    program wrote with an offset that is an hour past is expired, though as text it sorts after now; one that is no
    date at all is never taken for expired."""
    t, q = queues.transport, queues.q("orders")
    past_with_offset = (datetime.now(timezone.utc) + timedelta(hours=4)).strftime("%Y-%m-%d %H:%M:%S+05:00")
    future = (datetime.now(timezone.utc) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    rows = [(f"00000000-0000-0000-0000-00000000000{i}", expires, f"m{i}")
            for i, expires in enumerate([past_with_offset, future, "not a date", None])]
    for row_id, expires, body in rows:
        queues.sql(f"INSERT INTO {q} (id, expires, headers, body) VALUES (?, ?, '{{}}', ?)",  # noqa: S608
                   (row_id, expires, body.encode()))
    [partition] = t.plan_partitions(q, partitions=1)
    delivered: list[bytes] = []
    t.drain(q, lambda messages: delivered.extend(m.body for m in messages) or len(messages), batch_size=10,
            partition=partition)
    assert delivered == [b"m1", b"m2", b"m3"]  # m0 expired and dropped; the rest delivered
    assert t.peek(q) == 0
