"""PostgreSQL push wake-ups that notify only while a watcher waits (the queue's wake-up lock).

Every sender here is a plain INSERT from its own connection, as a .NET endpoint writes: it knows nothing of the
wake-ups. The notifications are counted on a bare LISTEN connection (one that waits for nothing), so the tests
assert how many NOTIFYs senders issued, not how fast anything happened.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from tests.conftest import PG_URL


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


@pytest.fixture
def orders(pg):
    """The transport and the queue ``orders``, created with push wake-ups."""
    t, q = pg.transport, pg.q("orders")
    t.create_queue(q, notify=True)
    return t, q


@contextmanager
def watching(t, q, **intervals) -> Iterator[Any]:
    """A started watcher of ``q``, closed after. It polls every ten minutes unless told: only a wake-up returns
    early."""
    wakeups = t.wakeups(q, **({"poll_interval": 600} | intervals))
    try:
        assert wakeups.start()
        yield wakeups
    finally:
        wakeups.close()


class Waiting:
    """``wakeups.wait(found=False)`` in a thread (a wait blocks only once the queue looked empty after asking)."""

    def __init__(self, wakeups: Any) -> None:
        self.wakeups = wakeups
        self.returned: bool | None = None
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        self.returned = self.wakeups.wait(found=False)

    def armed(self) -> Waiting:
        """Return once it waits for a notification: its listening connection holds the queue's wake-up lock and its
        look after asking (the last statement) is done."""
        pid = self.wakeups._listener.info.backend_pid
        with psycopg.connect(PG_URL, autocommit=True) as probe:
            while not probe.execute(
                    "SELECT EXISTS (SELECT 1 FROM pg_stat_activity AS a JOIN pg_locks AS l ON l.pid = a.pid"
                    " WHERE a.pid = %s AND a.state = 'idle' AND a.query LIKE 'SELECT EXISTS%%'"
                    " AND l.locktype = 'advisory' AND l.classid = 1644256948 AND l.mode = 'ExclusiveLock'"
                    " AND l.granted)", (pid,)).fetchone()[0]:
                assert self.thread.is_alive(), f"the wait returned {self.returned} instead of waiting"
                self.thread.join(0.01)
        return self

    def result(self) -> bool | None:
        self.thread.join(30)
        assert not self.thread.is_alive(), "the wait did not end"
        return self.returned


def _waiting_for_advisory(probe: psycopg.Connection, thread: threading.Thread) -> None:
    """Return once a connection waits for an advisory lock (the thread must still be running)."""
    while not probe.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").fetchone()[0]:
        assert thread.is_alive(), "the watcher did not wait for the open send"
        thread.join(0.01)


def test_senders_notify_only_while_a_watcher_waits(pg, orders, counter):
    t, q = orders
    with psycopg.connect(PG_URL, autocommit=True) as sender:
        _insert(pg, sender, b"nobody waits")
        assert counter.count() == 0  # no watcher: no NOTIFY, no global notify lock
        with watching(t, q) as wakeups:
            assert wakeups.push
            _insert(pg, sender, b"the watcher listens, its caller looks")
            assert counter.count() == 0  # listening is not waiting: start asks senders for nothing
            assert wakeups.wait(found=False) is True  # its look before asking finds rows: busy, it asks nothing
            assert [m.body for m in t.receive(q, 10)] == [b"nobody waits", b"the watcher listens, its caller looks"]
            waiting = Waiting(wakeups).armed()  # empty: it asks for wake-ups, looks once more, waits
            _insert(pg, sender, b"a watcher waits")
            assert counter.count() == 1
            assert waiting.result() is True and wakeups.woken == 1
            _insert(pg, sender, b"the woken watcher is busy")
            assert counter.count() == 0  # woken: it released the lock, senders stopped notifying
            assert [m.body for m in t.receive(q, 10)] == [b"a watcher waits", b"the woken watcher is busy"]
            waiting = Waiting(wakeups).armed()
            _insert(pg, sender, b"it waits again")
            assert counter.count() == 1
            assert waiting.result() is True and wakeups.woken == 2
    assert [m.body for m in t.receive(q, 10)] == [b"it waits again"]


def test_a_watcher_busy_from_its_start_makes_no_sender_notify(pg, orders, counter):
    """A watcher whose caller finds messages at every look never waits: started, it listens but asks for nothing,
    so none of the sends it is busy with notifies (earlier, start asked, and the lock stayed held, every sender
    notifying one transaction after another, until the caller's first empty look)."""
    t, q = orders
    with watching(t, q) as wakeups, psycopg.connect(PG_URL, autocommit=True) as sender:
        for n in range(3):
            _insert(pg, sender, f"busy {n}".encode())
            assert [m.body for m in t.receive(q, 10)] == [f"busy {n}".encode()]
        assert counter.count() == 0
        assert _wake_lock_modes(pg) == []
        assert wakeups.covers == 0


def test_a_watcher_that_asks_on_an_empty_queue_waits_at_once_holding_the_lock(pg, orders, counter):
    """Asking for wake-ups, the watcher looks once more on its listening connection; empty, it waits at once (every
    send committed before is in that look, every later one notifies) instead of returning for one more look of its
    caller's with the lock held: should that look find a send of the instant between, the lock would stay held
    while the caller works, and every sender notify."""
    t, q = orders
    with watching(t, q, poll_interval=0.2, max_poll_interval=0.2) as wakeups, \
            psycopg.connect(PG_URL, autocommit=True) as sender:
        _insert(pg, sender, b"first")
        assert wakeups.wait(found=False) is True  # rows: busy
        assert [m.body for m in t.receive(q, 10)] == [b"first"]
        began = time.monotonic()
        assert wakeups.wait(found=False) is False  # no wake-up came: the poll interval ended the wait
        assert time.monotonic() - began >= 0.15
        assert _wake_lock_modes(pg) == [("ExclusiveLock",)]
        _insert(pg, sender, b"wakes it")
        assert wakeups.wait(found=False) is True and counter.count() == 1
        assert _wake_lock_modes(pg) == []  # woken: busy, the lock let go


def _wake_lock_modes(pg) -> list[tuple[str]]:
    """The modes in which connections hold the wake-up lock of the queue ``orders``."""
    with psycopg.connect(PG_URL, autocommit=True) as probe:
        return probe.execute(
            "SELECT mode FROM pg_locks WHERE locktype = 'advisory' AND classid = 1644256948 AND objsubid = 2"
            " AND granted AND objid = to_regclass(%s)::oid"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            (f'"{pg.schema}"."orders"',)).fetchall()


def test_a_watcher_that_starts_waiting_during_an_open_send_sees_that_send_at_its_next_look(pg, orders, counter):
    """The race: a send's statement ran before the watcher asked for wake-ups (so it will not notify), and commits
    only after. Asking waits for that commit, so the watcher's next look finds the message."""
    t, q = orders
    with watching(t, q) as wakeups, psycopg.connect(PG_URL) as sender, \
            psycopg.connect(PG_URL, autocommit=True) as probe:
        _insert(pg, sender, b"in flight")  # not committed yet
        waiting = Waiting(wakeups)
        _waiting_for_advisory(probe, waiting.thread)
        assert _wake_lock_modes(pg) == [("ShareLock",)]  # the check "does a receiver hold it" kept nothing
        sender.commit()  # commits while the watcher waits for its lock
        assert waiting.result() is True  # its look after asking finds the send: busy again, it lets go of the lock
        assert _wake_lock_modes(pg) == []
        assert counter.count() == 0  # the send notified nobody ...
        [message] = t.receive(q)  # ... and the watcher's look found it
        assert message.body == b"in flight"


def test_every_waiting_watcher_of_a_queue_is_woken(pg, orders, counter):
    t, q = orders
    first, second = t.wakeups(q, poll_interval=600), t.wakeups(q, poll_interval=600)
    try:
        assert first.start() and second.start()
        waiting = Waiting(first).armed()
        assert second.wait(found=False) is True  # it finds the lock held by the first: senders notify; it looks
        with psycopg.connect(PG_URL, autocommit=True) as sender:
            _insert(pg, sender, b"for both")
        assert waiting.result() is True and second.wait(found=False) is True
        assert (first.woken, second.woken, counter.count()) == (1, 1, 1)
    finally:
        first.close()
        second.close()


def test_a_second_watcher_sees_the_lock_held_and_leaves_no_lock_behind(pg, orders, counter):
    """The second watcher tells "another receiver holds it" by a shared take that fails (no pg_locks scan); a take
    that succeeds is given back in the same statement, so senders keep notifying for the first watcher."""
    t, q = orders
    first, second = t.wakeups(q, poll_interval=600), t.wakeups(q, poll_interval=600)
    try:
        assert first.start() and second.start()
        waiting = Waiting(first).armed()
        assert second.wait(found=False) is True
        assert (first._covered, second._covered) == ("held", "other")
        assert _wake_lock_modes(pg) == [("ExclusiveLock",)]
        with psycopg.connect(PG_URL, autocommit=True) as sender:  # the sender still notifies for the first watcher
            _insert(pg, sender, b"for both")
        assert waiting.result() is True and counter.count() == 1
    finally:
        first.close()
        second.close()


def test_a_closed_watcher_stops_the_notifications(pg, orders, counter):
    t, q = orders
    wakeups = t.wakeups(q, poll_interval=600)
    assert wakeups.start()
    waiting = Waiting(wakeups).armed()
    wakeups.close()  # also what a killed watcher's lost connection does: PostgreSQL releases its lock
    assert waiting.result() is False  # the close ended the wait
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
    with watching(t, q) as wakeups:
        with psycopg.connect(PG_URL, autocommit=True) as sender:
            _insert(pg, sender, b"old trigger")
        assert wakeups.wait(found=False) is True
    t.enable_notifications(q)
    assert function() == "sqlqueue_wake"
    with psycopg.connect(PG_URL, autocommit=True) as sender:
        _insert(pg, sender, b"nobody waits")
    assert counter.count() == 1  # the old trigger's send above; none since the move


def test_concurrent_sends_into_a_waiting_watcher_notify_once(pg, orders, counter):
    """Two sends in flight at once while a watcher waits: the first notifies, the second relies on it."""
    t, q = orders
    with watching(t, q) as wakeups:
        waiting = Waiting(wakeups).armed()
        with psycopg.connect(PG_URL) as first, psycopg.connect(PG_URL) as second:
            _insert(pg, first, b"first")  # takes the notifier lock: NOTIFY at its commit
            _insert(pg, second, b"second")  # a notification is in flight: no NOTIFY of its own
            second.commit()
            first.commit()
        assert counter.count() == 1
        assert waiting.result() is True
        assert wakeups.wait(found=True) is True  # its look before asking again finds both
        assert sorted(m.body for m in t.receive(q, 10)) == [b"first", b"second"]


def test_a_send_relying_on_a_notification_is_seen_even_when_it_commits_after_the_wake_up(pg, orders, counter):
    """The race of the coalesced wake-up: the second send relied on the first one's NOTIFY, which woke the watcher
    before the second committed. The watcher, going back to wait, waits for that commit before its last look."""
    t, q = orders
    with watching(t, q) as wakeups:
        waiting = Waiting(wakeups).armed()
        with psycopg.connect(PG_URL) as first, psycopg.connect(PG_URL) as second, \
                psycopg.connect(PG_URL, autocommit=True) as probe:
            _insert(pg, first, b"first")
            _insert(pg, second, b"second")  # relies on the first's NOTIFY; stays open
            first.commit()
            assert waiting.result() is True  # woken by the first; it releases the wake-up lock
            assert [m.body for m in t.receive(q, 10)] == [b"first"]  # the second is not committed yet
            rearm = Waiting(wakeups)
            _waiting_for_advisory(probe, rearm.thread)  # going back to wait: it waits for the second's commit
            second.commit()
            assert rearm.result() is True  # its look after asking finds the second: busy again
        assert counter.count() == 1  # the second never notified ...
        assert [m.body for m in t.receive(q, 10)] == [b"second"]  # ... and the look after re-arming finds it
        assert wakeups.covers == 2


def test_a_send_that_cannot_be_sure_of_a_notification_in_flight_notifies(pg, orders, counter):
    """While a watcher is re-arming (it waits for the covered lock), a send that finds the notifier lock taken
    cannot rely on it and notifies itself: unsure means NOTIFY."""
    t, q = orders
    oid = pg.sql(f"SELECT to_regclass('\"{pg.schema}\".\"orders\"')::oid::integer")[0][0]
    with watching(t, q) as wakeups:
        waiting = Waiting(wakeups).armed()
        with psycopg.connect(PG_URL) as first, psycopg.connect(PG_URL) as blocker, \
                psycopg.connect(PG_URL, autocommit=True) as sender:
            _insert(pg, first, b"first")  # notifier lock taken, its NOTIFY pending
            blocker.execute("SELECT pg_advisory_xact_lock(1644256950, %s)", (oid,))  # as a re-arming watcher
            _insert(pg, sender, b"unsure")  # commits: NOTIFY
            assert counter.count() == 1
            blocker.rollback()
            first.commit()
        assert counter.count() == 1
        assert waiting.result() is True


@pytest.mark.parametrize("race", range(4))
def test_many_concurrent_senders_wake_a_watcher_without_a_miss(pg, orders, counter, race):
    """Eight plain senders (as .NET writes) race a watcher that receives what comes and waits whenever the queue
    is empty: every message arrives once, no wait ends by its fallback poll (a missed wake-up), and senders
    issue no more NOTIFYs than the watcher has wake cycles plus one per wake-up in flight. Run four times: each a
    new race of the watcher looking, arming and going to sleep against the senders' commits."""
    t, q = orders
    senders, each = 8, 40
    wakeups = t.wakeups(q, poll_interval=60)
    received: list[bytes] = []
    polls: list[bool] = []

    def watch() -> None:
        while len(received) < senders * each + 1:
            got = t.receive(q, 100)
            received.extend(m.body for m in got)
            if not got and not wakeups.wait(found=False):
                polls.append(True)  # a fallback poll: a wake-up was missed

    def send(n: int) -> None:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            for i in range(each):
                _insert(pg, conn, f"{n}-{i}".encode())

    assert wakeups.start()
    watcher = threading.Thread(target=watch)
    watcher.start()
    threads = [threading.Thread(target=send, args=(n,)) for n in range(senders)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    with psycopg.connect(PG_URL, autocommit=True) as last:
        _insert(pg, last, b"last")
    watcher.join()
    wakeups.close()
    assert sorted(received) == sorted([f"{n}-{i}".encode() for n in range(senders) for i in range(each)] + [b"last"])
    assert polls == []
    assert 1 <= counter.count() <= senders * each + 1


def test_wake_ups_that_came_before_the_look_after_re_arming_do_not_start_another_cycle(pg, orders, counter):
    """Two sends notify while the watcher waits: two NOTIFYs. The first wakes it; the second, for a commit its look
    saw, is dropped when it asks for wake-ups again (else it would wake it once more
    for nothing, and each extra cycle makes more senders notify)."""
    t, q = orders
    oid = pg.sql(f"SELECT to_regclass('\"{pg.schema}\".\"orders\"')::oid::integer")[0][0]
    with watching(t, q, poll_interval=0.2, max_poll_interval=0.2) as wakeups:
        waiting = Waiting(wakeups).armed()
        with psycopg.connect(PG_URL) as first, psycopg.connect(PG_URL) as blocker, \
                psycopg.connect(PG_URL, autocommit=True) as sender:
            # two NOTIFYs for one wake cycle, whichever the watcher reads first: the first send takes the notifier
            # lock, the second cannot be sure of it (the covered lock is taken, as by a re-arming watcher)
            _insert(pg, first, b"first")
            blocker.execute("SELECT pg_advisory_xact_lock(1644256950, %s)", (oid,))
            _insert(pg, sender, b"second")
            blocker.rollback()
            first.commit()
        assert counter.count() == 2
        assert waiting.result() is True and wakeups.woken == 1
        assert sorted(m.body for m in t.receive(q, 10)) == [b"first", b"second"]  # the look after the wake-up
        # asks again, drops the second's wake-up, looks once more (empty) and waits: its fallback poll ends the
        # wait, not a stale wake-up
        assert wakeups.wait(found=False) is False
        assert wakeups.woken == 1


def test_a_watcher_that_finds_messages_when_it_asks_for_wake_ups_lets_go_of_the_lock(pg, orders, counter):
    """Asking for wake-ups again while messages wait (they came during the last look): the watcher is busy again at
    once, so it does not keep senders notifying while it works; it looks before asking, so it does not even ask
    (no lock wait for the senders' transactions, no notification). Rows another receiver holds do not count, so
    the two never loop on them."""
    t, q = orders
    with watching(t, q) as wakeups:
        with psycopg.connect(PG_URL, autocommit=True) as sender:
            waiting = Waiting(wakeups).armed()
            _insert(pg, sender, b"wakes it")
            assert waiting.result() is True
            _insert(pg, sender, b"came during the look")
            assert wakeups.wait(found=False) is True  # rows: its look before asking found them, no arming
            _insert(pg, sender, b"while it works")
            assert counter.count() == 1  # only the first send notified
            with psycopg.connect(PG_URL) as other:  # another receiver holds every row
                other.execute(f'SELECT 1 FROM "{pg.schema}"."orders" FOR UPDATE')  # noqa: S608
                waiting = Waiting(wakeups).armed()  # no row it could take: it asks, keeps the lock and waits
                _insert(pg, sender, b"while it waits")
                assert counter.count() == 1
                assert waiting.result() is True
        assert wakeups.covers == 2  # the first wait and the one that kept the lock: rows seen first arm nothing
