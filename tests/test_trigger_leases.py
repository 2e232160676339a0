"""SQLite's event trigger leases its batch instead of holding the write lock until Airflow stored the event.

A pending event must not block senders; two live triggers (processes) never emit one message twice and lose none;
a gone owner's rows come back to the queue first (the SIGKILL case is in tests/test_triggers.py).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
from airflow.triggers.shared_stream import AdvanceItem

import tests.airflow_env  # noqa: F401  (sets AIRFLOW_HOME before any airflow import)
from airflow_sqlqueue.transport.processing import lease
from tests.conftest import Db, make_db
from tests.test_triggers import ACKED, FAILED, airflow_conn, count, leased, pending, producer_for, run, send


@pytest.fixture
def lite(tmp_path: Path) -> Db:
    db = next(make_db("sqlite", tmp_path))
    db.transport.create_queues([db.q("orders"), db.q("error")])
    return db


def write_lock_free(db: Db) -> bool:
    """Whether another connection gets SQLite's write lock at once (no wait: timeout 0)."""
    other = sqlite3.connect(db.url[len("sqlite:///"):], timeout=0, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError as exc:
        assert "locked" in str(exc)
        return False
    finally:
        other.close()


def test_a_pending_event_does_not_block_a_sender(lite: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    sent = send(lite, 2)
    producer = producer_for(lite, airflow_conn(lite, monkeypatch))

    async def scenario() -> None:
        stream = producer.open_stream()
        first, number = await anext(stream)
        assert [m["id"] for m in first["messages"]] == sent
        # the event is not stored yet: no transaction of the trigger holds the write lock meanwhile
        assert await asyncio.to_thread(write_lock_free, lite)
        later = await asyncio.to_thread(send, lite, 1, "orders", "later")
        second, second_number = await anext(stream)  # the next claim does not wait for the first event either
        assert [m["id"] for m in second["messages"]] == later
        assert await asyncio.to_thread(pending, lite, "orders") == 3
        await producer.advance([AdvanceItem(number, ACKED), AdvanceItem(second_number, FAILED)])
        assert await asyncio.to_thread(count, lite, "orders") == 1  # the failed event's message is back
        assert await asyncio.to_thread(leased, lite, "orders") == 0
        again, number = await anext(stream)
        assert [m["id"] for m in again["messages"]] == later  # emitted again, same Id
        await stream.aclose()
        await producer.aclose()

    run(scenario())
    assert pending(lite, "orders") == 1 and leased(lite, "orders") == 0  # closing returned the leased batch


def lease_oldest(db: Db, count: int) -> lease.Leases:
    """A new lease owner holding the ``count`` oldest rows of ``orders`` (claimed, leased, committed)."""
    address = db.transport.address(db.q("orders"))
    owner = db.transport.leases(address)
    owner.create()
    claim = db.transport.claim(address, count)
    owner.lease(claim.cursor, [m.seq for m in claim.messages])
    claim.ack_all()
    claim.commit()
    return owner


def test_leases_of_a_gone_owner_are_put_back_first_in_queue_order(lite: Db) -> None:
    """Rows leased by an owner whose lease ended come back at their positions, ahead of later sends."""
    sent = send(lite, 3)
    address = lite.transport.address(lite.q("orders"))
    lease_oldest(lite, 2).close()
    lite.sql('UPDATE "SqlQueueLeases" SET LeasedUntil = 0')  # its lease ended
    assert leased(lite, "orders") == 2 and count(lite, "orders") == 1
    later = send(lite, 1, prefix="later")
    mine = lite.transport.leases(address)
    with lite.transport.claim(address, 10, before=mine.recover) as again:
        assert [str(m.native_id) for m in again.messages] == sent + later
        for message in again.messages:
            again.release(message)
    assert leased(lite, "orders") == 0 and count(lite, "orders") == 4


def test_a_live_owner_keeps_its_lease(lite: Db) -> None:
    send(lite, 2)
    address = lite.transport.address(lite.q("orders"))
    lease_oldest(lite, 1)
    other = lite.transport.leases(address)
    with lite.transport.claim(address, 10, before=other.recover) as second:
        assert len(second.messages) == 1  # the leased row is not put back: its owner lives
        second.abandon()
    assert leased(lite, "orders") == 1


TWO_TRIGGERERS = textwrap.dedent("""
    import tests.airflow_env
    import asyncio, faulthandler, sys
    from airflow.triggers.shared_stream import AdvanceItem, AdvanceOutcome
    from airflow_sqlqueue.transport.processing import lease
    from airflow_sqlqueue.triggers import sqlqueue
    from airflow_sqlqueue.triggers.sqlqueue import SqlQueueStreamProducer

    # leases shorter than the time an event waits to be stored: only renewal keeps them
    lease.LEASE_SECONDS, sqlqueue.RENEW_EVERY, sqlqueue.RECOVER_EVERY = 1.0, 0.2, 0.0
    faulthandler.dump_traceback_later(100, exit=True)  # a child stuck this long shows where (stderr), then ends

    async def main():
        producer = SqlQueueStreamProducer(conn_id=sys.argv[1], queue_name=sys.argv[2], error_queue=sys.argv[3],
                                          batch_size=3, poll_interval=0.1, min_event_interval=0.0)
        stream = producer.open_stream()
        pending = []

        async def store(number):
            await asyncio.sleep(1.5)  # Airflow stores the event later than the lease lasts
            await producer.advance([AdvanceItem(number, AdvanceOutcome(acked=1, failed=0))])

        try:
            while True:
                try:
                    event, number = await asyncio.wait_for(anext(stream), 6)
                except TimeoutError:
                    break
                for message in event["messages"]:
                    print("emitted", message["id"], flush=True)
                pending.append(asyncio.create_task(store(number)))
            await asyncio.gather(*pending)
        finally:
            await stream.aclose()
            await producer.aclose()

    asyncio.run(main())
""")


def test_two_live_triggerers_emit_every_message_once(lite: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    conn_id = airflow_conn(lite, monkeypatch)
    root = Path(__file__).resolve().parent.parent
    sent = send(lite, 30)
    children = [subprocess.Popen([sys.executable, "-c", TWO_TRIGGERERS, conn_id, lite.q("orders"), lite.q("error")],
                                 cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, stdout=subprocess.PIPE,
                                 text=True) for _ in range(2)]
    outputs: list[str] = []
    try:
        sent += send(lite, 30, prefix="more")  # while both run
        for child in children:
            out, _ = child.communicate(timeout=120)
            outputs.append(out)
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait(10)
    emitted = [line.split()[1] for out in outputs for line in out.splitlines() if line.startswith("emitted ")]
    counts = Counter(emitted)
    assert sorted(counts) == sorted(sent), "a message was lost"
    assert set(counts.values()) == {1}, counts.most_common(3)
    assert pending(lite, "orders") == 0
    assert all(child.returncode == 0 for child in children)


def test_owner_alive_reads_the_process() -> None:
    now = 100.0
    mine = lease.new_owner()
    assert not lease.owner_alive(mine, now + 10, now)  # this process, but never registered: closed
    host = mine.split("/", 1)[0]
    assert not lease.owner_alive(f"{host}/{os.getpid()}/x/y", 50.0, now)  # ended
    assert lease.owner_alive(f"another-host-{host}/1/x/y", now + 1, now)  # another host: the lease decides
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert not lease.owner_alive(f"{host}/{dead.pid}/1/y", now + 10, now)
    parent = os.getppid()
    assert lease.owner_alive(f"{host}/{parent}/{lease._start_time(parent)}/y", now + 10, now)  # runs
    assert not lease.owner_alive(f"{host}/{parent}/not-its-start/y", now + 10, now)  # the pid, reused
