"""Push wake-ups on PostgreSQL (the opt-in NOTIFY trigger) and the idle back-off of polling watchers."""

from __future__ import annotations

import threading
import uuid

import psycopg
import pytest

from airflow_sqlqueue.transport import SqlQueueTransport, ddl_script
from tests.conftest import PG_URL, make_db


@pytest.fixture
def lite(tmp_path):
    yield from make_db("sqlite", tmp_path)


def _later(seconds: float, action) -> threading.Thread:
    timer = threading.Timer(seconds, action)
    timer.start()
    return timer


def test_a_send_wakes_a_listening_watcher_before_its_poll_interval(pg):
    t, q = pg.transport, pg.q("orders")
    t.create_queue(q, notify=True)
    wakeups = t.wakeups(q, poll_interval=600)  # a poll would take ten minutes: only a wake-up returns early
    try:
        assert wakeups.start() and wakeups.push
        _later(0.2, lambda: t.send(q, b"now"))
        assert wakeups.wait(found=False) is True
        assert wakeups.woken == 1
        [message] = t.receive(q)
        assert message.body == b"now"
    finally:
        wakeups.close()


def test_a_dotnet_style_insert_wakes_the_watcher_and_is_stored_unchanged(pg):
    t, q = pg.transport, pg.q("orders")
    t.create_queue(q, notify=True)
    wakeups = t.wakeups(q, poll_interval=600)
    row_id = uuid.uuid4()
    try:
        assert wakeups.start()
        with psycopg.connect(PG_URL, autocommit=True) as conn:  # the column list a 9.x .NET sender writes
            conn.execute(f'INSERT INTO "{pg.schema}"."orders" (id, expires, headers, body) VALUES (%s, NULL, %s, %s)',  # noqa: S608
                         (row_id, '{"NServiceBus.MessageId":"m1"}', b"dotnet"))
        assert wakeups.wait(found=False) is True
    finally:
        wakeups.close()
    [(stored_id, headers, body, expires)] = pg.sql(
        f'SELECT id, headers, body, expires FROM "{pg.schema}"."orders"')  # noqa: S608
    assert (stored_id, headers, body, expires) == (row_id, '{"NServiceBus.MessageId":"m1"}', b"dotnet", None)


def test_sends_to_other_queues_do_not_wake_the_watcher(pg):
    t = pg.transport
    t.create_queue(pg.q("orders"), notify=True)
    t.create_queue(pg.q("replies"), notify=True)
    wakeups = t.wakeups(pg.q("orders"), poll_interval=0.5)
    try:
        assert wakeups.start()
        _later(0.1, lambda: t.send(pg.q("replies"), b"not for orders")).join()
        assert wakeups.wait(found=False) is False  # the poll interval passed, no wake-up for this queue
        assert wakeups.woken == 0
    finally:
        wakeups.close()


def test_without_the_trigger_the_watcher_polls_with_an_idle_back_off(pg):
    t, q = pg.transport, pg.q("orders")
    t.create_queue(q)
    wakeups = t.wakeups(q, poll_interval=1.0, max_poll_interval=5.0)
    try:
        assert wakeups.start() is False and not wakeups.push
        pauses = [wakeups.next_pause(found) for found in (False, False, False, False, True, False)]
        assert pauses == [2.0, 4.0, 5.0, 5.0, 1.0, 2.0]
    finally:
        wakeups.close()


def test_disable_removes_the_trigger_and_enable_is_idempotent(pg):
    t, q = pg.transport, pg.q("orders")
    t.create_queue(q)
    t.enable_notifications(q)
    t.enable_notifications(q)
    assert len(pg.sql("SELECT tgname FROM pg_trigger WHERE tgrelid = to_regclass(%s)", (t.name(q),))) == 1
    assert t.check(q) == [] or all(f.severity != "error" for f in t.check(q))
    t.disable_notifications(q)
    wakeups = t.wakeups(q, poll_interval=0.2)
    try:
        assert wakeups.start() is False
    finally:
        wakeups.close()


def test_a_lost_listener_falls_back_to_polling_then_listens_again(pg):
    t, q = pg.transport, pg.q("orders")
    t.create_queue(q, notify=True)
    wakeups = t.wakeups(q, poll_interval=600)
    try:
        assert wakeups.start()
        pid = wakeups._listener.info.backend_pid
        pg.sql("SELECT pg_terminate_backend(%s)", (pid,))
        assert wakeups.wait(found=False) is False and not wakeups.push  # lost: told, not raised
        _later(0.3, lambda: t.send(q, b"after"))
        assert wakeups.wait(found=False) is True  # listening again on a new connection
    finally:
        wakeups.close()


def test_closing_while_a_wait_runs_ends_the_wait_quietly(pg, caplog):
    """A trigger that stops closes its wake-ups while a thread still waits on the listener: the wait ends at once
    and nothing claims the listener was lost."""
    t, q = pg.transport, pg.q("orders")
    t.create_queue(q, notify=True)
    wakeups = t.wakeups(q, poll_interval=600)
    assert wakeups.start() and wakeups.push
    _later(0.3, wakeups.close)
    with caplog.at_level("WARNING", logger="airflow_sqlqueue.transport.operations.wakeups"):
        assert wakeups.wait(found=False) is False  # not the 600 s poll: the close ended it
    assert not [r for r in caplog.records if "lost" in r.getMessage()]


def test_notify_is_refused_where_there_is_no_listen(lite):
    t = lite.transport
    with pytest.raises(ValueError, match="LISTEN/NOTIFY"):
        t.create_queue("orders", notify=True)
    assert not t.exists("orders"), "a refused create changes nothing"
    with pytest.raises(ValueError, match="LISTEN/NOTIFY"):
        ddl_script("mssql", ["orders"], notify=True)
    wakeups = t.wakeups("orders", poll_interval=0.5)
    assert wakeups.start() is False


@pytest.mark.parametrize("bad", [0, -1, float("nan"), "soon"])
def test_bad_intervals_are_refused(lite, bad):
    with pytest.raises(ValueError):
        lite.transport.wakeups("orders", poll_interval=bad)


def test_max_poll_interval_below_poll_interval_is_refused(lite):
    with pytest.raises(ValueError, match="max_poll_interval"):
        lite.transport.wakeups("orders", poll_interval=5, max_poll_interval=1)


def test_the_ddl_script_installs_the_trigger_when_a_dba_runs_it(pg):
    q = pg.q("orders")
    script = ddl_script("postgres", [q], notify=True)
    assert f'CREATE TRIGGER "orders_notify" AFTER INSERT ON {q} FOR EACH STATEMENT' in script
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(script)
    wakeups = pg.transport.wakeups(q, poll_interval=600)
    try:
        assert wakeups.start()
        _later(0.2, lambda: pg.transport.send(q, b"x"))
        assert wakeups.wait(found=False) is True
    finally:
        wakeups.close()


def test_async_wait_wakes_on_send(pg):
    import asyncio

    t, q = pg.transport, pg.q("orders")
    t.create_queue(q, notify=True)
    other = SqlQueueTransport.from_url(PG_URL)

    async def scenario() -> bool:
        wakeups = t.wakeups(q, poll_interval=600)
        try:
            await asyncio.to_thread(wakeups.start)
            asyncio.get_running_loop().call_later(0.2, lambda: other.send(q, b"x"))
            return await wakeups.wait_async(found=False)
        finally:
            wakeups.close()

    try:
        assert asyncio.run(scenario()) is True
    finally:
        other.close()


# -- SQLite: the database's files as the wake-up -----------------------------------------------------------------
def test_a_send_wakes_a_sqlite_watcher_through_the_files(lite):
    """A send from another connection changes the WAL: the watcher wakes within a file check, having run no query
    meanwhile; an empty claim of its own changes nothing, so it does not wake itself."""
    import time

    t = lite.transport
    t.create_queues(["orders", "error"])
    wakeups = t.wakeups("orders", poll_interval=0.3, max_poll_interval=600)
    other = SqlQueueTransport.from_url(lite.url)
    try:
        assert wakeups.start() is False and wakeups.watching_files  # no push: the files instead
        t.claim("orders", 10).commit()  # the watcher's own empty look
        started = time.monotonic()
        assert wakeups.wait(found=False) is False  # no change: the whole (first) back-off pause passes
        assert time.monotonic() - started >= 0.55
        _later(0.3, lambda: other.send("orders", b"x"))
        assert wakeups.wait(found=False) is True  # True only when woken (the pause's end returns False)
        assert wakeups.woken == 1
    finally:
        wakeups.close()
        other.close()


def _posix_locks(path: str) -> int:
    """How many POSIX locks this process holds on ``path`` (``/proc/locks``)."""
    import os

    inode, pid = os.stat(path).st_ino, str(os.getpid())
    with open("/proc/locks") as locks:
        return sum(1 for line in locks if line.split()[4] == pid and line.split()[5].endswith(f":{inode}"))


@pytest.mark.skipif(not __import__("os").path.exists("/proc/locks"), reason="Linux /proc/locks")
def test_a_sqlite_watcher_leaves_the_locks_of_its_process_s_connections_on_the_wal_index(lite):
    """Looking at the WAL index (``-shm``) must not close a descriptor of it: closing any descriptor of a file drops
    every POSIX lock the process holds on it, SQLite's included, and another process then resets the index while
    this process's connections use it (commits lost, SIGBUS; seen on a deployment with three SQLite watchers in one
    triggerer). A connection of this process in a read transaction keeps its locks through the watcher's looks."""
    import sqlite3

    t = lite.transport
    t.create_queues(["orders", "error"])
    t.send("orders", b"x")
    database = str(lite.url).removeprefix("sqlite:///")
    reader = sqlite3.connect(database, isolation_level=None)
    wakeups = t.wakeups("orders", poll_interval=0.1, max_poll_interval=0.1)
    try:
        reader.execute("BEGIN")
        assert reader.execute('SELECT count(*) FROM "orders"').fetchone() == (1,)
        held = _posix_locks(database + "-shm")
        assert held > 0  # SQLite's read lock and its dead-man switch on the WAL index
        assert wakeups.start() is False and wakeups.watching_files
        for _ in range(3):
            wakeups.wait(found=False)  # each wait looks at the files, the -shm header included
        t.send("orders", b"y")
        wakeups.wait(found=False)
        assert _posix_locks(database + "-shm") == held
    finally:
        wakeups.close()
        reader.close()


def test_async_wait_on_sqlite_wakes_on_send(lite):
    import asyncio

    t = lite.transport
    t.create_queues(["orders"])
    other = SqlQueueTransport.from_url(lite.url)

    async def scenario() -> bool:
        wakeups = t.wakeups("orders", poll_interval=600)
        await asyncio.to_thread(wakeups.start)
        asyncio.get_running_loop().call_later(0.2, lambda: other.send("orders", b"x"))
        return await asyncio.wait_for(wakeups.wait_async(found=False), 10)

    try:
        assert asyncio.run(scenario()) is True
    finally:
        other.close()


def test_push_false_polls_sqlite_without_watching(lite):
    lite.transport.create_queues(["orders"])
    wakeups = lite.transport.wakeups("orders", poll_interval=0.5, push=False)
    assert wakeups.start() is False and not wakeups.watching_files


def test_a_sqlite_watcher_wakes_on_an_insert_of_another_process(lite):
    """A sender in another process that knows nothing of the watcher (a plain sqlite3 INSERT, as a hand-written or
    .NET-style sender writes a row) wakes it long before a 600 s poll, from the event loop's wait."""
    import asyncio
    import sys

    t = lite.transport
    t.create_queues(["orders", "error"])
    path = lite.url[len("sqlite:///"):]
    script = ("import sqlite3, sys, time, uuid; time.sleep(0.3); c = sqlite3.connect(sys.argv[1], timeout=60); "
              "c.execute('INSERT INTO orders (id, expires, headers, body) VALUES (?, NULL, ?, ?)', "
              "(str(uuid.uuid4()), '{}', b'other')); c.commit()")

    async def scenario() -> bool:
        wakeups = t.wakeups("orders", poll_interval=600)
        try:
            await asyncio.to_thread(wakeups.start)
            sender = await asyncio.create_subprocess_exec(sys.executable, "-c", script, path)
            woken = await asyncio.wait_for(wakeups.wait_async(found=False), 60)
            assert await sender.wait() == 0
            return woken
        finally:
            wakeups.close()

    assert asyncio.run(scenario()) is True
    assert [bytes(m.body) for m in t.receive("orders")] == [b"other"]


def test_push_comes_back_after_an_outage_that_outlasts_the_first_listen_again(tmp_path):
    """The listener is lost and the database is still down when the watcher tries to listen again: it polls, and
    listens once the database is back (before, it polled for good)."""
    if not PG_URL.startswith("postgresql://"):
        pytest.skip("needs the PostgreSQL test server")
    name = "sqw_" + uuid.uuid4().hex[:10]
    admin = psycopg.connect(PG_URL, autocommit=True)
    admin.execute(f'CREATE DATABASE "{name}"')
    url = PG_URL.rsplit("/", 1)[0] + "/" + name
    t = SqlQueueTransport.from_url(url)
    q = "orders"
    try:
        t.create_queue(q, notify=True)
        wakeups = t.wakeups(q, poll_interval=0.1, max_poll_interval=0.2)
        assert wakeups.start() and wakeups.push
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')  # the outage: no new connection
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
        assert wakeups.wait(found=False) is False and not wakeups.push  # the listener is lost
        assert wakeups.wait(found=False) is False and not wakeups.push  # listening again fails: still down
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')  # back
        for _ in range(50):
            if wakeups.push:
                break
            wakeups.wait(found=False)
        assert wakeups.push, "the watcher never listened again after the database came back"
        before = wakeups.woken
        t.send(q, b"after")  # committed: the listener has its notification
        assert any(wakeups.wait(found=False) for _ in range(3)) and wakeups.woken == before + 1
        [message] = t.receive(q)
        assert message.body == b"after"
        wakeups.close()
    finally:
        t.close()
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        admin.close()


def test_inotify_reports_writes_to_the_database_files_only(tmp_path):
    """The inotify watch (Linux, through the C library) counts writes to the database's files, not to other files
    of the directory, and a close from another thread ends a wait without closing the descriptor under it."""
    import sqlite3
    import sys

    from airflow_sqlqueue.transport.operations.file_events import open_file_events

    if not sys.platform.startswith("linux"):
        pytest.skip("inotify is Linux only (elsewhere the files are stat'ed)")
    db = tmp_path / "q.db"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    events = open_file_events(str(db))
    assert events is not None
    try:
        events.read()
        (tmp_path / "other.txt").write_text("not the database")
        assert events.read() is False
        conn.execute("INSERT INTO t VALUES (1)")
        conn.commit()
        assert events.read() is True  # the -wal file was written
        assert events.read() is False  # taken
        waiting = threading.Thread(target=events.wait, args=(600,))
        waiting.start()
        events.close()
        conn.execute("INSERT INTO t VALUES (2)")  # an event for the wait in progress, which ends it
        conn.commit()
        waiting.join()
        assert events.closed and events.wait(600) is False
    finally:
        events.close()
        conn.close()


def test_a_cancelled_async_file_wait_is_always_cancelled(tmp_path):
    """Cancelling a watcher's wait on the database's files (the triggerer cancels the trigger) ends it with the
    cancellation even when a write ended the wait at that very moment: a wait that returned its result instead
    would leave the cancelled trigger watching forever (``asyncio.wait_for`` did that before Python 3.12). Many
    cancellations at random points while another thread writes all the time."""
    import asyncio
    import random
    import sqlite3
    import sys

    from airflow_sqlqueue.transport.operations.file_events import open_file_events

    if not sys.platform.startswith("linux"):
        pytest.skip("inotify is Linux only (elsewhere the files are stat'ed)")
    db = tmp_path / "q.db"
    setup = sqlite3.connect(db, isolation_level=None)
    setup.execute("PRAGMA journal_mode=WAL")
    setup.execute("CREATE TABLE t (x)")
    setup.close()
    writing = threading.Event()
    writing.set()

    def write() -> None:
        conn = sqlite3.connect(db, isolation_level=None)
        while writing.is_set():
            conn.execute("INSERT INTO t VALUES (1)")
        conn.close()

    events = open_file_events(str(db))
    assert events is not None
    writer = threading.Thread(target=write)
    writer.start()
    chance = random.Random(7)

    async def cancel_many() -> tuple[int, int]:
        cancelled = returned = 0
        for _ in range(3000):
            task = asyncio.ensure_future(events.wait_async(5))
            for _ in range(chance.randint(0, 6)):
                await asyncio.sleep(0)
            if not task.cancel():  # it ended before the cancellation: nothing to test this time
                await task
                continue
            try:
                await task
            except asyncio.CancelledError:
                cancelled += 1
            else:
                returned += 1
        return cancelled, returned

    try:
        cancelled, returned = asyncio.run(cancel_many())
    finally:
        writing.clear()
        writer.join()
        events.close()
    assert cancelled > 1000  # most cancellations met a wait in progress
    assert returned == 0, f"{returned} cancelled waits returned a result instead of being cancelled"


def test_a_sqlite_watcher_of_another_process_is_woken_by_inotify_and_finds_the_row(lite):
    """With inotify the blocking wait ends on the other process's write (not at a stat), and the looks that follow
    find the row: the wake-up may come before the commit is visible, so the files are looked at again (the WAL
    index header) until it is."""
    import subprocess
    import sys

    t = lite.transport
    t.create_queues(["orders", "error"])
    path = lite.url[len("sqlite:///"):]
    wakeups = t.wakeups("orders", poll_interval=600)
    try:
        wakeups.start()
        if wakeups._events is None:
            pytest.skip("no inotify here: the files are stat'ed (the tests above)")
        assert "inotify" in wakeups.describe()
        script = ("import sqlite3, sys, uuid; c = sqlite3.connect(sys.argv[1], timeout=60); "
                  "c.execute('INSERT INTO orders (id, expires, headers, body) VALUES (?, NULL, ?, ?)', "
                  "(str(uuid.uuid4()), '{}', b'other')); c.commit()")
        sender = subprocess.Popen([sys.executable, "-c", script, path])
        while True:
            assert wakeups.wait(found=False) is True  # a 600 s poll never ends this test: only wake-ups do
            if t.peek("orders"):  # a read: it sees the row only once the commit is visible
                break
        assert sender.wait() == 0
        assert [bytes(m.body) for m in t.receive("orders")] == [b"other"]
    finally:
        wakeups.close()
