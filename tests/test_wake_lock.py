"""PostgreSQL push wake-ups that notify only while a watcher waits (the queue's wake-up lock).

Every sender here is a plain INSERT from its own connection, as a .NET endpoint writes: it knows nothing of the
wake-ups. The notifications are counted on a bare LISTEN connection (one that waits for nothing), so the tests
assert how many NOTIFYs senders issued, not how fast anything happened.
"""

from __future__ import annotations

import threading
import uuid

import psycopg
import pytest

from tests.conftest import PG_URL, make_db


@pytest.fixture
def pg(tmp_path):
    yield from make_db("postgres", tmp_path)


def _insert(pg, conn: psycopg.Connection, body: bytes) -> None:
    conn.execute(f'INSERT INTO "{pg.schema}"."orders" (id, expires, headers, body) VALUES (%s, NULL, %s, %s)',  # noqa: S608
                 (uuid.uuid4(), '{"NServiceBus.MessageId":"m"}', body))


class Counter:
    """A LISTEN connection that only counts the queue's wake-ups (it holds no lock: it is not a waiting watcher)."""

    def __init__(self, pg) -> None:
        self.conn = psycopg.connect(PG_URL, autocommit=True)
        self.conn.execute("LISTEN sqlqueue")
        self.payload = f'["{pg.schema}", "orders"]'

    def count(self) -> int:
        """Wake-ups delivered so far (a round trip first, so every committed NOTIFY has arrived)."""
        self.conn.execute("SELECT 1")
        return sum(1 for n in self.conn.notifies(timeout=0) if n.payload == self.payload)

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def counter(pg):
    c = Counter(pg)
    yield c
    c.close()


def test_senders_notify_only_while_a_watcher_waits(pg, counter):
    t, q = pg.transport, pg.q("orders")
    t.create_queue(q, notify=True)
    with psycopg.connect(PG_URL, autocommit=True) as sender:
        _insert(pg, sender, b"nobody waits")
        assert counter.count() == 0  # no watcher: no NOTIFY, no global notify lock
        wakeups = t.wakeups(q, poll_interval=600)
        try:
            assert wakeups.start() and wakeups.push
            _insert(pg, sender, b"a watcher waits")
            assert counter.count() == 1
            assert wakeups.wait(found=False) is True and wakeups.woken == 1
            _insert(pg, sender, b"the woken watcher is busy")
            assert counter.count() == 0  # woken: it released the lock, senders stopped notifying
            # its next wait asks for wake-ups again and looks once more before waiting: the send above is found
            assert wakeups.wait(found=True) is True and wakeups.woken == 1
            _insert(pg, sender, b"it waits again")
            assert counter.count() == 1
            assert wakeups.wait(found=False) is True and wakeups.woken == 2
        finally:
            wakeups.close()
    assert [m.body for m in t.receive(q, 10)] == [b"nobody waits", b"a watcher waits", b"the woken watcher is busy",
                                                  b"it waits again"]


def test_a_watcher_that_starts_waiting_during_an_open_send_sees_that_send_at_its_next_look(pg, counter):
    """The race: a send's statement ran before the watcher asked for wake-ups (so it will not notify), and commits
    only after. Asking waits for that commit, so the watcher's next look finds the message."""
    t, q = pg.transport, pg.q("orders")
    t.create_queue(q, notify=True)
    wakeups = t.wakeups(q, poll_interval=600)
    with psycopg.connect(PG_URL) as sender, psycopg.connect(PG_URL, autocommit=True) as probe:
        _insert(pg, sender, b"in flight")  # not committed yet
        started = threading.Thread(target=wakeups.start)
        started.start()
        while not probe.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                                ).fetchone()[0]:
            assert started.is_alive(), "the watcher did not wait for the open send"
            started.join(0.01)
        sender.commit()  # commits while the watcher waits for its lock
        started.join()
    try:
        assert wakeups.push
        assert counter.count() == 0  # the send notified nobody ...
        [message] = t.receive(q)  # ... and the watcher's first look (after start) finds it
        assert message.body == b"in flight"
    finally:
        wakeups.close()


def test_every_waiting_watcher_of_a_queue_is_woken(pg, counter):
    t, q = pg.transport, pg.q("orders")
    t.create_queue(q, notify=True)
    first, second = t.wakeups(q, poll_interval=600), t.wakeups(q, poll_interval=600)
    try:
        assert first.start() and second.start()  # the second finds the lock held by the first: senders notify
        with psycopg.connect(PG_URL, autocommit=True) as sender:
            _insert(pg, sender, b"for both")
        assert first.wait(found=False) is True and second.wait(found=False) is True
        assert (first.woken, second.woken, counter.count()) == (1, 1, 1)
    finally:
        first.close()
        second.close()


def test_a_closed_watcher_stops_the_notifications(pg, counter):
    t, q = pg.transport, pg.q("orders")
    t.create_queue(q, notify=True)
    wakeups = t.wakeups(q, poll_interval=600)
    assert wakeups.start()
    wakeups.close()  # also what a killed watcher's lost connection does: PostgreSQL releases its lock
    with psycopg.connect(PG_URL, autocommit=True) as sender:
        _insert(pg, sender, b"after")
    assert counter.count() == 0


def test_a_queue_with_the_earlier_trigger_keeps_waking_watchers_and_moves_on_reinstall(pg, counter):
    """Queues whose trigger an earlier version installed (a NOTIFY on every send) keep working unchanged;
    ``enable_notifications`` moves them to the wake-up lock."""
    t, q = pg.transport, pg.q("orders")
    t.create_queue(q)
    pg.sql(f'''CREATE FUNCTION "{pg.schema}".sqlqueue_notify() RETURNS trigger LANGUAGE plpgsql AS $f$
               BEGIN PERFORM pg_notify('sqlqueue', json_build_array(TG_TABLE_SCHEMA, TG_TABLE_NAME)::text);
               RETURN NULL; END $f$''')
    pg.sql(f'CREATE TRIGGER orders_notify AFTER INSERT ON "{pg.schema}"."orders" FOR EACH STATEMENT '
           f'EXECUTE FUNCTION "{pg.schema}".sqlqueue_notify()')

    def function() -> str:
        return t.run(lambda cur: t.dialect.notify_function_of(cur, t.address(q)), what="trigger", read_only=True)

    assert function() == "sqlqueue_notify"
    wakeups = t.wakeups(q, poll_interval=600)
    try:
        assert wakeups.start()
        with psycopg.connect(PG_URL, autocommit=True) as sender:
            _insert(pg, sender, b"old trigger")
        assert wakeups.wait(found=False) is True
    finally:
        wakeups.close()
    t.enable_notifications(q)
    assert function() == "sqlqueue_wake"
    with psycopg.connect(PG_URL, autocommit=True) as sender:
        _insert(pg, sender, b"nobody waits")
    assert counter.count() == 1  # the old trigger's send above; none since the move
