"""The error groups summary's drift check off a page's path, on real SQLite and PostgreSQL: a page read of a large
queue counts no rows of the queue (every statement it sends is traced on the real connection: SQLite's trace
callback, a recording psycopg cursor), rows a .NET endpoint inserts by plain SQL show at once, and rows deleted
behind the summary's back show by the first read after ``CHECK_SECONDS`` (the check started by a read, in the
background) or at once when asked ("count again", the CLI)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import pytest

from airflow_sqlqueue.dashboard import failed, group_actions
from airflow_sqlqueue.transport import SqlQueueTransport
from airflow_sqlqueue.transport.errorqueue import error_queue as error_queue_module
from airflow_sqlqueue.transport.errorqueue import summary as summary_module
from airflow_sqlqueue.transport.errorqueue.previews import FailedFilter
from tests.conftest import Db
from tests.test_error_groups_summary import fill, insert_as_dotnet, scanned

#: The bound the test sets (seconds): a deletion must show by the first read this long after the last check.
BOUND = 1.0


def traced(db: Db) -> tuple[SqlQueueTransport, list[str]]:
    """A transport whose every statement text (on its real connections) is recorded."""
    seen: list[str] = []
    transport = db.new_transport()
    real = transport.session._connect

    def connect() -> Any:
        connection = real()
        if db.kind == "sqlite":
            connection.set_trace_callback(seen.append)
        else:
            base = connection.cursor_factory

            class Recording(base):  # type: ignore[misc, valid-type]
                def execute(self, query: Any, *args: Any, **kwargs: Any) -> Any:
                    seen.append(query if isinstance(query, str) else
                                query.decode() if isinstance(query, bytes) else query.as_string(connection))
                    return super().execute(query, *args, **kwargs)

            connection.cursor_factory = Recording
        return connection

    transport.session._connect = connect
    transport.session.close()  # no connection made before the trace
    return transport, seen


def full_counts(db: Db, statements: list[str]) -> list[str]:
    """The statements that count every row of the error queue (a count of it with no WHERE)."""
    table = re.escape(db.transport.dialect.qualified(db.transport.address(db.q("error"))))
    whole = re.compile(r"count\(\*\)\s+from\s+" + table + r"(?!\s+where)", re.IGNORECASE)
    return [s for s in statements if whole.search(s)]


@pytest.fixture
def large(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every queue counts as large (checked in the background, never rebuilt inline), the bound ``BOUND``."""
    monkeypatch.setattr(summary_module, "CHECK_INLINE_ROWS", 5)
    monkeypatch.setattr(summary_module, "CHECK_SECONDS", BOUND)
    monkeypatch.setattr(error_queue_module, "REBUILD_INLINE_ROWS", 5)


def read_until(condition: Callable[[dict[str, Any]], bool], read: Callable[[], dict[str, Any]],
               bound: float) -> tuple[dict[str, Any], float]:
    """Read the page (and let the background check a read started end) until ``condition``; (page, seconds)."""
    started = time.monotonic()
    while True:
        page = read()
        summary_module.wait_for_checks(30)
        if condition(page) or time.monotonic() - started > bound + 10:
            return page, time.monotonic() - started
        time.sleep(0.05)


@pytest.mark.usefixtures("large")
def test_a_page_read_counts_no_row_and_inserts_show_at_once(db: Db) -> None:
    fill(db, 40)
    transport, seen = traced(db)
    try:
        first = failed.failed_groups(transport, db.q("error"), by="all")  # the first read counts the 40 rows in
        assert first["total"] == first["grouped"] == 40
        summary_module.wait_for_checks(30)
        seen.clear()
        again = failed.failed_groups(transport, db.q("error"), by="all")
        count = group_actions.group_count(transport, db.q("error"), FailedFilter(exception_type=None))
        assert again["total"] == 40 and count == 40
        assert seen and full_counts(db, seen) == [], full_counts(db, seen)  # the hot path: no count of the queue
        insert_as_dotnet(db, 6)  # a .NET endpoint's rows, above the high water
        seen.clear()
        caught = failed.failed_groups(transport, db.q("error"), by="all")
        assert caught["total"] == caught["grouped"] == 46 and caught["summary"]["behind"] == 0  # at once
        assert full_counts(db, seen) == []
        seen.clear()
        checked = failed.failed_groups(transport, db.q("error"), by="all", check=True)  # "count again"
        assert checked["summary"]["drift"] == 0 and checked["summary"]["checked_at"]
        assert full_counts(db, seen), "the trace sees a full count when there is one"
        assert {(g["failed_q"], g["exception_type"], g["message_type"]): g["count"]
                for g in transport.errors(db.q("error")).summary_groups()[0]} == scanned(db)
    finally:
        transport.close()


@pytest.mark.usefixtures("large")
def test_rows_deleted_behind_its_back_show_within_the_bound(db: Db) -> None:
    fill(db, 40)
    transport = db.new_transport()
    try:
        read = lambda: failed.failed_groups(transport, db.q("error"), by="all")  # noqa: E731
        assert read()["summary"]["drift"] == 0
        summary_module.wait_for_checks(30)
        table = db.transport.dialect.qualified(db.transport.address(db.q("error")))
        db.sql(f"DELETE FROM {table} WHERE seq IN (SELECT seq FROM {table} ORDER BY seq LIMIT 6)")  # noqa: S608
        deleted_at = time.monotonic()
        page, _ = read_until(lambda p: p["summary"]["drift"] != 0, read, BOUND)
        shown_after = time.monotonic() - deleted_at
        assert page["summary"]["drift"] == -6 and page["total"] == 34  # the rows the queue holds
        assert shown_after <= BOUND + 5, shown_after  # the bound, plus the check itself on a loaded machine
        where = FailedFilter(exception_type="System.TimeoutException")
        assert group_actions.group_span(transport, db.q("error"), where) is None  # an action walks the queue
        assert transport.errors(db.q("error")).summary.rebuild() == 34
        assert read()["summary"]["drift"] == 0  # a rebuild counts nothing wrongly
    finally:
        transport.close()


def test_a_small_queue_is_checked_on_every_read_and_counted_again_at_once(db: Db) -> None:
    fill(db, 30)
    assert failed.failed_groups(db.transport, db.q("error"))["total"] == 30
    table = db.transport.dialect.qualified(db.transport.address(db.q("error")))
    db.sql(f"DELETE FROM {table} WHERE seq IN (SELECT seq FROM {table} ORDER BY seq LIMIT 3)")  # noqa: S608
    data = failed.failed_groups(db.transport, db.q("error"), by="all")
    assert data["total"] == data["grouped"] == 27 and data["summary"]["drift"] == 0


def test_the_newest_rows_retried_do_not_make_the_next_read_count_everything_again(db: Db) -> None:
    """A retry of the newest failed message leaves the newest position under the high water: nothing to count
    (it once cleared the groups and counted every row again, as for a table created anew)."""
    fill(db, 20)
    errors = db.transport.errors(db.q("error"), allowed=[db.q("orders")])
    _, before = errors.summary_groups()
    newest = db.transport.failed_page(db.q("error"), after_seq=0, limit=20)[-1]
    from airflow_sqlqueue.transport.errorqueue.previews import Position

    errors.retry([Position(newest.seq, newest.id)])
    groups, state = errors.summary_groups()
    assert state.rebuilt_at == before.rebuilt_at and state.high_water == before.high_water
    assert sum(g["count"] for g in groups) == 19 and state.drift == 0


def test_a_page_read_counts_a_bounded_number_of_new_rows_and_the_rest_in_the_background(
        db: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(summary_module, "READ_CATCH_UP_ROWS", 10)
    monkeypatch.setattr(summary_module.ErrorGroupSummary.read, "__defaults__", (10,))
    monkeypatch.setattr(summary_module, "BACKGROUND_CATCH_UP_ROWS", 7)
    fill(db, 5)
    assert failed.failed_groups(db.transport, db.q("error"))["total"] == 5
    insert_as_dotnet(db, 40)
    started: list[Any] = []
    real = summary_module.ErrorGroupSummary.in_background

    def spy(self: Any, **kw: Any) -> Any:
        started.append(kw)
        return real(self, **kw)

    monkeypatch.setattr(summary_module.ErrorGroupSummary, "in_background", spy)
    data = failed.failed_groups(db.transport, db.q("error"), by="all")
    assert data["total"] == 45  # every row in the total at once, counted in groups or behind
    assert started and started[0]["catch_up"] is True
    summary_module.wait_for_checks(30)
    done = failed.failed_groups(db.transport, db.q("error"), by="all")
    assert done["summary"]["behind"] == 0 and done["total"] == done["grouped"] == 45
    assert {(g["failed_q"], g["exception_type"], g["message_type"]): g["count"]
            for g in db.transport.errors(db.q("error")).summary_groups()[0]} == scanned(db)
