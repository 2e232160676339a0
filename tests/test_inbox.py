"""The inbox: each message handled once per consumer, recorded in the consumer's own transaction.

Core tests on SQLite and PostgreSQL, then ``dag.test()`` runs of ``tests/dags/sqlqueue_inbox_once.py`` whose DAG
runs get asset events attached as the scheduler attaches them (``consumed_asset_events``), carrying the payloads
``SqlQueueMessageTrigger`` emits for real messages: the same messages in two runs (a triggerer that re-emitted a
batch after a crash) are handled once, counted per id; a run that fails mid-way leaves the rest for the next run.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest

from airflow_sqlqueue.transport import InvalidMessageError, QueueNotFoundError
from airflow_sqlqueue.triggers.sqlqueue import batch_payload, message_payload
from tests import airflow_env
from tests.airflow_env import airflow_db  # noqa: F401  (fixture)
from tests.conftest import Db

DAG_FILE = "sqlqueue_inbox_once.py"
CONN_ID = "sqlqueue_inbox"


def _inbox(db: Db) -> str:
    return db.q("SqlQueueInbox")


# -- core ---------------------------------------------------------------------------------------------
def test_mark_counts_once_per_consumer_and_only_when_committed(db: Db) -> None:
    transport = db.new_transport(inbox_table=_inbox(db))
    with pytest.raises(QueueNotFoundError, match="create_inbox"):
        transport.run(lambda cur: transport.inbox.mark(cur, "c", "m1"))
    assert transport.create_inbox() is True
    assert transport.create_inbox() is False
    inbox = transport.inbox
    assert transport.run(lambda cur: inbox.mark(cur, "c", "m1")) is True
    assert transport.run(lambda cur: inbox.mark(cur, "c", "m1")) is False
    assert transport.run(lambda cur: inbox.mark(cur, "other", "m1")) is True  # another consumer handles it too

    def fails(cur: Any) -> None:
        assert inbox.mark(cur, "c", "m2") is True
        raise RuntimeError("handler failed")

    with pytest.raises(RuntimeError):
        transport.run(fails)
    assert inbox.handled("c", "m2") is False  # rolled back: the next attempt handles it
    assert transport.run(lambda cur: inbox.mark(cur, "c", "m2")) is True
    assert inbox.handled("c", "m2") is True
    with pytest.raises(InvalidMessageError, match="consumer"):
        transport.run(lambda cur: inbox.mark(cur, "", "m3"))
    with pytest.raises(InvalidMessageError, match="200"):
        transport.run(lambda cur: inbox.mark(cur, "c", "x" * 201))
    transport.close()


def test_purge_keeps_the_retention_period(db: Db) -> None:
    transport = db.new_transport(inbox_table=_inbox(db))
    assert transport.purge_inbox(0) == 0  # no table yet: nothing to purge, nothing created
    transport.create_inbox()
    for i in range(7):
        transport.run(lambda cur, i=i: transport.inbox.mark(cur, "c", f"m{i}"))
    assert transport.purge_inbox(3600) == 0  # all younger than an hour
    time.sleep(1.1)
    assert transport.purge_inbox(1, batch_size=3) == 7
    assert not transport.inbox.handled("c", "m0")
    with pytest.raises(ValueError, match="older_than"):
        transport.purge_inbox(-1)
    transport.close()


def test_a_concurrent_mark_waits_for_the_first_transaction(db: Db) -> None:
    """Two attempts on the same message at once: the second waits, and skips it once the first committed."""
    first = db.new_transport(inbox_table=_inbox(db))
    second = db.new_transport(inbox_table=_inbox(db))
    first.create_inbox()
    results: dict[str, bool] = {}
    marked = threading.Event()

    def slow(cur: Any) -> None:
        results["first"] = first.inbox.mark(cur, "c", "m")
        marked.set()
        time.sleep(0.5)

    thread = threading.Thread(target=lambda: first.run(slow))
    thread.start()
    marked.wait(5)
    results["second"] = second.run(lambda cur: second.inbox.mark(cur, "c", "m"))
    thread.join()
    assert results == {"first": True, "second": False}
    first.close()
    second.close()


# -- DAG runs ------------------------------------------------------------------------------------------
def _events(db: Db, queue: str, count: int, per_event: int) -> list[dict[str, Any]]:
    """Payloads of events for ``count`` real messages, as the trigger builds them (claimed, then released)."""
    transport = db.transport
    transport.send_many(queue, [f"body {i}" for i in range(count)])
    with transport.claim(queue, count) as claim:
        messages = sorted(claim.messages, key=lambda m: m.seq)
        for message in messages:
            claim.release(message)
    items = [message_payload(m) for m in messages]
    return [batch_payload(transport.name(queue), items[i:i + per_event]) for i in range(0, len(items), per_event)]


def _run(monkeypatch: pytest.MonkeyPatch, events: list[dict[str, Any]], conf: dict[str, Any],
         later: list[dict[str, Any]] = ()) -> Any:
    """One ``dag.test()`` run with ``events`` attached as its triggering asset events; ``later`` events of the same
    asset are stored after the run was created, not attached (events Airflow 3.3 left waiting)."""
    from airflow.models import dagrun
    from airflow.models.asset import AssetEvent, AssetModel
    from sqlalchemy import select

    original = dagrun.get_or_create_dagrun

    def with_events(**kwargs: Any) -> Any:
        run = original(**kwargs)
        session = kwargs["session"]
        asset = session.scalar(select(AssetModel).where(AssetModel.uri == "sqlqueue-inbox-once-events"))
        for payload in events:
            event = AssetEvent(asset_id=asset.id, extra={"payload": payload})
            session.add(event)
            session.flush()
            run.consumed_asset_events.append(event)
        for payload in later:
            session.add(AssetEvent(asset_id=asset.id, extra={"payload": payload}))
        session.commit()
        return run

    dag = airflow_env.load_dag("sqlqueue_inbox_once", DAG_FILE)
    with monkeypatch.context() as patch:
        patch.setattr(dagrun, "get_or_create_dagrun", with_events)
        return dag.test(run_conf=conf)


def _done(db: Db, queue: str) -> Counter:
    received = []
    while batch := db.transport.receive(queue, 500):
        received.extend(batch)
    return Counter((m.body or b"").decode() for m in received)


@pytest.fixture
def consumer_db(db: Db) -> dict[str, Any]:
    db.transport.create_queues([db.q("events"), db.q("done"), db.q("error")])
    if db.kind == "sqlite":
        airflow_env.sqlite_connection(CONN_ID, db.url[len("sqlite:///"):])
    else:
        from urllib.parse import urlsplit

        parts = urlsplit(db.url)
        airflow_env.set_connection(CONN_ID, {"conn_type": "postgres", "host": parts.hostname, "port": parts.port,
                                             "login": parts.username, "schema": parts.path.lstrip("/")})
    return {"conn_id": CONN_ID, "done_queue": db.q("done"), "inbox_table": _inbox(db)}


def test_the_same_messages_in_two_runs_are_handled_once(airflow_db, db: Db, consumer_db,  # noqa: F811
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    events = _events(db, db.q("events"), 30, per_event=10)
    ids = [m["id"] for e in events for m in e["messages"]]
    first = _run(monkeypatch, events[:2], consumer_db)
    assert first.state == "success"
    # The triggerer died after the second event was stored: it is emitted again, with the third batch.
    second = _run(monkeypatch, [events[1], events[2]], consumer_db)
    assert second.state == "success"
    assert airflow_env.xcom_value(second, "handle") == {"handled": 10, "skipped": 10}
    done = _done(db, db.q("done"))
    assert done == Counter(ids)  # every id exactly once
    assert set(done.values()) == {1}


def test_a_run_that_fails_midway_leaves_the_rest_for_the_next(airflow_db, db: Db, consumer_db,  # noqa: F811
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    events = _events(db, db.q("events"), 12, per_event=12)
    ids = [m["id"] for m in events[0]["messages"]]
    failed = _run(monkeypatch, events, {**consumer_db, "batch_size": 4, "fail_at": ids[6]})
    assert failed.state == "failed"
    assert _done(db, db.q("done")) == Counter(ids[:4])  # the first batch committed; the second rolled back
    again = _run(monkeypatch, events, {**consumer_db, "batch_size": 4})
    assert again.state == "success"
    assert airflow_env.xcom_value(again, "handle") == {"handled": 8, "skipped": 4}
    assert _done(db, db.q("done")) == Counter(ids[4:])


@pytest.mark.parametrize("later_events", [True, False])
def test_events_stored_after_the_run_was_triggered_are_handled_by_it(airflow_db, db: Db, consumer_db,  # noqa: F811
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      later_events: bool) -> None:
    """apache/airflow#56050: a max_active_runs DAG's run can leave out events stored after it was triggered, and
    they wait for the next message. handle_once takes their messages too (later_events, the default); the run
    they belong to, if one comes, skips them."""
    events = _events(db, db.q("events"), 30, per_event=10)
    ids = [m["id"] for e in events for m in e["messages"]]
    run = _run(monkeypatch, events[:1], {**consumer_db, "later_events": later_events}, later=events[1:])
    assert run.state == "success"
    done = _done(db, db.q("done"))
    if later_events:
        assert airflow_env.xcom_value(run, "handle") == {"handled": 30, "skipped": 0}
        assert done == Counter(ids)
        again = _run(monkeypatch, events[1:], consumer_db)  # their own run, had the scheduler made one
        assert airflow_env.xcom_value(again, "handle") == {"handled": 0, "skipped": 20}
        assert _done(db, db.q("done")) == Counter()
    else:
        assert airflow_env.xcom_value(run, "handle") == {"handled": 10, "skipped": 0}
        assert done == Counter(ids[:10])


def test_more_than_a_page_of_later_events_are_all_handled(airflow_db, db: Db, consumer_db,  # noqa: F811
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """More events left in no run than one page of the execution API's listing (apache/airflow#56050 with
    max_active_runs=1): handle_once pages through every one (the listing read 20 at most before)."""
    from airflow_sqlqueue.triggers import once

    monkeypatch.setattr(once, "LATER_EVENTS_PAGE", 7)  # pages of 7 through 44 later events
    events = _events(db, db.q("events"), 45, per_event=1)
    ids = [m["id"] for e in events for m in e["messages"]]
    run = _run(monkeypatch, events[:1], consumer_db, later=events[1:])
    assert run.state == "success"
    assert airflow_env.xcom_value(run, "handle") == {"handled": 45, "skipped": 0}
    assert _done(db, db.q("done")) == Counter(ids)


def test_page_events_reads_every_event_once_across_shared_timestamps() -> None:
    """The listing is inclusive (timestamp >= after) and has no offset: pages start at the last timestamp seen;
    events sharing it are neither skipped nor repeated, even more of them than a page holds."""
    from types import SimpleNamespace

    from airflow_sqlqueue.triggers.once import page_events

    stamps = [0, 1, 1, 2] + [3] * 9 + [4, 5, 5, 6] + list(range(7, 30))
    stored = [SimpleNamespace(id=i, timestamp=t) for i, t in enumerate(stamps)]
    calls: list[tuple[int, int]] = []

    def fetch(after: int, size: int) -> list[SimpleNamespace]:
        calls.append((after, size))
        return [e for e in stored if e.timestamp >= after][:size]

    assert [e.id for e in page_events(fetch, 0, page_size=4)] == list(range(len(stored)))
    assert max(size for _, size in calls) == 16  # nine events at one timestamp: the page grew to hold them
    assert [e.id for e in page_events(fetch, 0, page_size=4, limit=10)] == list(range(10))
    assert page_events(lambda after, size: [], 0) == []
    assert [e.id for e in page_events(fetch, 29, page_size=1)] == [len(stored) - 1]


@pytest.mark.parametrize("dialect", ["sqlite", "postgres", "mssql"])
def test_the_inbox_ddl_for_a_dba(dialect: str) -> None:
    """The statements a DBA runs instead of create_inbox() (no database needed; SQL Server's parse with sqlglot in
    tests/test_mssql_driver_statements.py)."""
    from airflow_sqlqueue.transport import SqlQueueTransport

    address = "ops.SqlQueueInbox" if dialect == "postgres" else "SqlQueueInbox"
    ddl = SqlQueueTransport(lambda: None, dialect, inbox_table=address).inbox.ddl()
    table, index = ddl.split(";\n")
    assert table.startswith("CREATE TABLE") and "PRIMARY KEY" in table and "SqlQueueInbox" in table
    assert "INDEX" in index and "SqlQueueInbox_processed_ix" in index
