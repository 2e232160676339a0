"""The error groups summary (``transport.errorqueue.summary``) on real SQLite and PostgreSQL: its counts agree with
the queue (a scan of every row) after sends by this provider, rows inserted by plain SQL as a .NET endpoint inserts
them, retries, deletes, edit and retry, concurrent retries of the same messages, rows taken out behind its back
(drift, then a rebuild), and a table created again (positions going backwards)."""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any

import pytest

from airflow_sqlqueue.dashboard import failed
from airflow_sqlqueue.transport import OutgoingMessage
from airflow_sqlqueue.transport.errorqueue.previews import Position
from airflow_sqlqueue.transport.errorqueue.summary import ErrorGroupSummary
from airflow_sqlqueue.transport.wire import headers as h
from tests.conftest import Db

KINDS = ["System.TimeoutException", "Sales.RejectedException", "System.IO.IOException"]


def headers_of(db: Db, i: int, kind: str | None = None) -> dict[str, str]:
    return {h.FAILED_Q: db.transport.name(db.q("orders")), h.EXCEPTION_TYPE: kind or KINDS[i % 3],
            h.ENCLOSED_MESSAGE_TYPES: f"Sales.Message{i % 2}",
            h.TIME_OF_FAILURE: f"2026-11-01 10:00:{i % 60:02d}:000000 Z"}


def fill(db: Db, n: int, start: int = 0) -> None:
    db.transport.create_queues([db.q("orders"), db.q("error")])
    db.transport.send_many(db.q("error"), [OutgoingMessage(body=b"{}", headers=headers_of(db, start + i))
                                           for i in range(n)])


def insert_as_dotnet(db: Db, n: int, kind: str = "Dotnet.ForeignException") -> None:
    """Rows written by plain SQL, as a .NET endpoint moves a message into the error queue (no summary involved)."""
    table = db.transport.dialect.qualified(db.transport.address(db.q("error")))
    for i in range(n):
        text = json.dumps(headers_of(db, i, kind))
        if db.kind == "sqlite":
            db.sql(f"INSERT INTO {table} (id, expires, headers, body) VALUES (?, NULL, ?, ?)",  # noqa: S608
                   (str(uuid.uuid4()), text, b"{}"))
        else:
            db.sql(f"INSERT INTO {table} (id, expires, headers, body) VALUES (%s, NULL, %s, %s)",  # noqa: S608
                   (uuid.uuid4(), text, b"{}"))


def scanned(db: Db) -> dict[tuple[Any, ...], int]:
    """The groups as a scan of every row counts them (the truth)."""
    return {(g["failed_q"], g["exception_type"], g["message_type"]): g["count"]
            for g in db.transport.failed_groups(db.q("error"))}


def summarized(db: Db) -> tuple[dict[tuple[Any, ...], int], Any]:
    groups, state = db.transport.errors(db.q("error")).summary_groups()
    return {(g["failed_q"], g["exception_type"], g["message_type"]): g["count"] for g in groups}, state


def assert_agrees(db: Db) -> None:
    groups, state = summarized(db)
    assert groups == scanned(db)
    assert state.drift == 0 and state.behind == 0 and state.counted == state.rows == db.transport.count(db.q("error"))


def some(db: Db, n: int, after: int = 0) -> list[Position]:
    page = db.transport.failed_page(db.q("error"), after_seq=after, limit=n)
    return [Position(p.seq, p.id) for p in page]


def test_counts_agree_with_the_queue_through_every_change_by_this_provider_and_by_plain_sql(db: Db) -> None:
    fill(db, 60)
    assert_agrees(db)  # first read: tables made, every row counted
    insert_as_dotnet(db, 7)  # a .NET endpoint's rows: above the high water, counted by the next read
    fill(db, 5, start=60)
    assert_agrees(db)
    errors = db.transport.errors(db.q("error"), allowed=[db.q("orders")])
    errors.retry(some(db, 4))  # all or none
    errors.retry_batch(some(db, 5, after=20))
    db.transport.delete_positions(db.q("error"), some(db, 3, after=40))
    first = some(db, 1, after=50)[0]
    errors.edit_and_retry(first)
    assert len(errors.delete_found(some(db, 2, after=55) + [Position(10**9, str(uuid.uuid4()))])) == 1
    assert_agrees(db)
    summary = errors.retry_all(lambda m: m.headers.get(h.EXCEPTION_TYPE) == "Dotnet.ForeignException")
    assert summary.total_returned == 7
    assert_agrees(db)
    assert ("Dotnet.ForeignException" not in {k[1] for k in summarized(db)[0]})


def test_rows_inserted_but_not_yet_read_are_behind_and_a_bounded_read_counts_them_in_steps(db: Db) -> None:
    fill(db, 30)
    errors = db.transport.errors(db.q("error"))
    state = errors.summary.read(catch_up_rows=10)
    assert state.rows == 30 and state.counted == 10 and state.behind == 20 and state.drift == 0
    state = errors.summary.read(catch_up_rows=10)
    assert state.counted == 20 and state.behind == 10
    assert errors.summary.catch_up() == 10
    assert_agrees(db)


def test_totals_that_must_include_every_message_count_the_rows_a_page_read_left_behind(
        db: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batched retry's "to do" and the spellings of a queue name include rows above the high water (a page's read
    counts a bounded number; the rest would be missing from the run's total and from the filter)."""
    from airflow_sqlqueue.transport.errorqueue import summary as summary_module

    monkeypatch.setattr(summary_module, "READ_CATCH_UP_ROWS", 10)
    monkeypatch.setattr(summary_module.ErrorGroupSummary.read, "__defaults__", (10,))
    # a page's read counts the rest in the background: not here (as when that thread has not run yet)
    monkeypatch.setattr(summary_module.ErrorGroupSummary, "in_background", lambda self, **kw: None)
    fill(db, 30)
    other = "orders" if db.kind == "sqlite" else f'"{db.schema}"."orders"'  # the same queue, spelled otherwise
    table = db.transport.dialect.qualified(db.transport.address(db.q("error")))
    text = json.dumps({**headers_of(db, 0), h.FAILED_Q: other})
    marker = "?" if db.kind == "sqlite" else "%s"
    db.sql(f"INSERT INTO {table} (id, expires, headers, body) VALUES ({marker}, NULL, {marker}, {marker})",  # noqa: S608
           (str(uuid.uuid4()) if db.kind == "sqlite" else uuid.uuid4(), text, b"{}"))
    errors = db.transport.errors(db.q("error"))
    assert errors.summary_groups()[1].behind == 21  # a page's read: 10 counted, the rest behind
    groups, state = errors.summary_groups(complete=True)
    assert state.behind == 0 and sum(g["count"] for g in groups) == 31
    if db.kind != "sqlite":  # one queue, two spellings: both found, the second only in the last row
        assert other in errors.failed_q_spellings(db.transport.name(db.q("orders")))
    assert_agrees(db)


def test_concurrent_retries_of_the_same_messages_count_each_message_once(db: Db) -> None:
    fill(db, 120)
    assert_agrees(db)
    chosen = some(db, 120)
    results: list[tuple[dict[str, int], list[dict[str, str]]]] = []
    lock = threading.Lock()

    def worker(offset: int) -> None:
        transport = db.new_transport()
        try:
            errors = transport.errors(db.q("error"), allowed=[db.q("orders")])
            for start in range(0, 120, 20):  # overlapping batches: every message asked for by three workers
                batch = chosen[(start + offset * 20) % 120:][:20]
                done = errors.retry_batch(batch)
                with lock:
                    results.append(done)
        finally:
            transport.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    returned = sum(sum(r[0].values()) for r in results)
    assert returned == 120  # each message returned exactly once
    assert db.transport.count(db.q("orders")) == 120 and db.transport.count(db.q("error")) == 0
    assert_agrees(db)
    fill(db, 9, start=3)
    assert_agrees(db)


def test_rows_taken_out_behind_its_back_show_as_drift_and_a_rebuild_counts_again(db: Db) -> None:
    fill(db, 40)
    errors = db.transport.errors(db.q("error"))
    assert_agrees(db)
    table = db.transport.dialect.qualified(db.transport.address(db.q("error")))
    db.sql(f"DELETE FROM {table} WHERE seq IN (SELECT seq FROM {table} ORDER BY seq LIMIT 6)")  # noqa: S608
    state = errors.summary.read()
    assert state.drift == -6 and state.rows == 34
    assert errors.summary.rebuild() == 34
    assert_agrees(db)
    db.sql(f"DELETE FROM {table} WHERE seq IN (SELECT seq FROM {table} ORDER BY seq LIMIT 4)")  # noqa: S608
    data = failed.failed_groups(db.transport, db.q("error"), by="exception_type")  # a small queue: rebuilt at once
    assert data["total"] == data["grouped"] == 30 and data["summary"]["drift"] == 0


def test_a_table_created_again_is_counted_again(db: Db) -> None:
    fill(db, 25)
    assert_agrees(db)
    table = db.transport.dialect.qualified(db.transport.address(db.q("error")))
    db.sql(f"DROP TABLE {table}")
    fill(db, 8)  # positions start again at 1, under the high water
    assert_agrees(db)


def test_the_tables_are_made_beside_the_error_queue_once(db: Db) -> None:
    fill(db, 3)
    summary = ErrorGroupSummary(db.transport.session, db.transport.book.queue(db.q("error")))
    summary.create()
    summary.create()
    assert summary.session.run(summary.exists, read_only=True)
    assert summary.groups_address.schema == db.transport.address(db.q("error")).schema


def test_the_command_line_catches_up_reports_drift_and_rebuilds(db: Db) -> None:
    from tests.test_cli import Cli

    fill(db, 12)
    cli = Cli(db)
    first = json.loads(cli("error-groups", "--json").out)
    assert (first["rows"], first["grouped"], first["counted_now"], first["drift"]) == (12, 12, 12, 0)
    table = db.transport.dialect.qualified(db.transport.address(db.q("error")))
    db.sql(f"DELETE FROM {table} WHERE seq IN (SELECT seq FROM {table} ORDER BY seq LIMIT 2)")  # noqa: S608
    drifted = cli("error-groups")
    assert "--rebuild" in drifted.err
    rebuilt = json.loads(cli("error-groups", "--rebuild", "--json").out)
    assert (rebuilt["rows"], rebuilt["grouped"], rebuilt["drift"], rebuilt["rebuilt"]) == (10, 10, 0, True)


def test_a_group_action_walks_only_the_positions_its_group_spans(db: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_sqlqueue.dashboard import group_actions
    from airflow_sqlqueue.transport.errorqueue.error_queue import ErrorQueue
    from airflow_sqlqueue.transport.errorqueue.previews import FailedFilter

    fill(db, 50)
    insert_as_dotnet(db, 4, kind="Late.Exception")  # a group at the end of the queue
    where = FailedFilter(exception_type="Late.Exception")
    count, after, through = group_actions.check_count(db.transport, db.q("error"), where, 4)
    assert count == 4 and after >= 50 and through is not None
    reads: list[tuple[int, int | None]] = []
    real = ErrorQueue.page

    def recorded(self: ErrorQueue, **kw: Any) -> Any:
        reads.append((kw.get("after_seq", 0), kw.get("through_seq")))
        return real(self, **kw)

    monkeypatch.setattr(ErrorQueue, "page", recorded)
    done = group_actions.return_group(db.transport, db.q("error"), [db.q("orders")], where, 4)
    assert done["total_returned"] == 4 and done["left"] == []
    assert reads and all(a >= after for a, _ in reads)  # never from the start of the queue
    insert_as_dotnet(db, 3, kind="Late.Other")
    other = FailedFilter(exception_type="Late.Other")
    assert group_actions.delete_group(db.transport, db.q("error"), other, 3) == {"deleted": 3, "not_found": 0}
    assert_agrees(db)
