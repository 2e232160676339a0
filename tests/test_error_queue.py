"""The error queue as one object: every retry path moves a row with one primitive that never deletes a row it did
not copy, and one return policy decides where a retry may write.

Each test counts the rows of every table it touches before and after: a message is in exactly one place.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import uuid
from typing import Any

import pytest

from airflow_sqlqueue.transport import OutgoingMessage
from airflow_sqlqueue.transport.errorqueue.batches import BatchPlan
from airflow_sqlqueue.transport.errorqueue.error_queue import PositionsNotFoundError, RetryRefusedError
from airflow_sqlqueue.transport.errorqueue.previews import Position
from airflow_sqlqueue.transport.wire import headers as h
from tests.conftest import Db
from tests.reliability.helpers import run_cli


def table(db: Db, name: str) -> str:
    return db.transport.dialect.qualified(db.transport.address(db.q(name)))


def rows(db: Db, name: str) -> list[tuple[str, bytes]]:
    """(native Id text, body) of every row, in queue order."""
    return [(str(i), bytes(b)) for i, b in db.sql(f"SELECT id, body FROM {table(db, name)} ORDER BY seq")]  # noqa: S608


def insert(db: Db, name: str, native_id: str, body: bytes, headers: str = '{"k":"v"}') -> None:
    """A row written by another sender (plain INSERT), e.g. one that re-sent a message under the same Id."""
    p = "%s" if db.kind == "postgres" else "?"
    db.sql(f"INSERT INTO {table(db, name)} (id, expires, headers, body) VALUES ({p}, NULL, {p}, {p})",  # noqa: S608
           (native_id, headers, body))


def failed(db: Db, queue: str, body: bytes, **headers: str) -> str:
    """A message that failed in ``queue`` and is now in the error queue (same native Id); its Id."""
    t = db.transport
    t.send(db.q(queue), OutgoingMessage(body, {"Custom": "c", **headers}))
    summary = t.process(db.q(queue), lambda m, c: 1 / 0, immediate_retries=0)
    assert summary.failed == 1
    [(native_id, _)] = [r for r in rows(db, "error") if r[1] == body]
    return native_id


def failed_with(db: Db, failed_q: str, body: bytes) -> str:
    """A row in the error queue whose FailedQ header says ``failed_q`` (as anyone who can fail a message can)."""
    native_id = str(uuid.uuid4())
    insert(db, "error", native_id, body, h.serialize_headers({h.FAILED_Q: failed_q, h.EXCEPTION_TYPE: "Boom",
                                                               h.MESSAGE_ID: native_id}))
    return native_id


def position(db: Db, native_id: str) -> Position:
    [page] = [p for p in db.transport.errors(db.q("error")).page(limit=100) if p.id == native_id]
    return Position(page.seq, page.id)


@pytest.fixture
def qs(db: Db) -> Db:
    db.transport.create_queues([db.q(n) for n in ("orders", "billing", "payroll", "error")])
    return db


# -- the move primitive: a collision never loses the failed message ----------------------------------------------
def collide(qs: Db) -> tuple[str, list[tuple[str, bytes]], list[tuple[str, bytes]]]:
    """A failed orders message whose Id arrived in orders again; (its Id, orders rows, error rows) before."""
    native_id = failed(qs, "orders", b"the failed one")
    insert(qs, "orders", native_id, b"the one waiting")
    return native_id, rows(qs, "orders"), rows(qs, "error")


def test_retrying_selected_messages_over_a_collision_refuses_all_and_changes_nothing(qs: Db) -> None:
    other = failed(qs, "orders", b"no collision")
    native_id, orders, error = collide(qs)
    errors = qs.transport.errors(qs.q("error"), allowed=[qs.q("orders")])
    with pytest.raises(RetryRefusedError, match=f"already in {qs.transport.name(qs.q('orders'))}"):
        errors.retry([position(qs, native_id), position(qs, other)])
    assert rows(qs, "orders") == orders and rows(qs, "error") == error  # all or none
    assert errors.retry([position(qs, other)]) == {qs.transport.name(qs.q("orders")): 1}


@pytest.mark.parametrize("path", ["retry_batch", "retry_all", "retry_in_batches", "cli"])
def test_every_retry_path_leaves_a_colliding_message_where_it_is_and_says_so(qs: Db, path: str) -> None:
    native_id, orders, error = collide(qs)
    errors = qs.transport.errors(qs.q("error"), allowed=[qs.q("orders")])
    if path == "retry_batch":
        returned, left = errors.retry_batch([position(qs, native_id)])
    elif path == "retry_all":
        summary = errors.retry_all()
        returned, left = summary.returned, summary.left
    elif path == "retry_in_batches":
        summary = errors.retry_in_batches(BatchPlan(batch_size=10)).as_dict()
        returned, left = summary["returned"], summary["left"]
    else:
        code, out, err = run_cli(qs, "--json", "retry-errors", "--allow", qs.q("orders"))
        assert code == 0, err
        import json

        result = json.loads(out)
        returned, left = result["returned"], result["left"]
        assert f"already in {qs.transport.name(qs.q('orders'))}" in left[0]["reason"]
    assert returned == {} and [x["id"] for x in left] == [native_id]
    assert "already in" in left[0]["reason"] and "stays in" in left[0]["reason"]
    assert rows(qs, "orders") == orders and rows(qs, "error") == error  # the failed body is still there


def test_a_collision_is_retried_once_the_waiting_message_was_received(qs: Db) -> None:
    native_id, _, _ = collide(qs)
    errors = qs.transport.errors(qs.q("error"), allowed=[qs.q("orders")])
    assert errors.retry_all().total_returned == 0
    assert [m.body for m in qs.transport.receive(qs.q("orders"))] == [b"the one waiting"]
    assert errors.retry_all().returned == {qs.transport.name(qs.q("orders")): 1}
    assert rows(qs, "orders") == [(native_id, b"the failed one")] and rows(qs, "error") == []


def test_edit_and_retry_sends_a_copy_under_a_new_id_even_over_a_collision(qs: Db) -> None:
    native_id, _, _ = collide(qs)
    errors = qs.transport.errors(qs.q("error"), allowed=[qs.q("orders")])
    result = errors.edit_and_retry(position(qs, native_id), body=b"edited")
    assert sorted(b for _, b in rows(qs, "orders")) == [b"edited", b"the one waiting"]
    assert rows(qs, "error") == [] and result["id"] != native_id


def test_the_receive_path_dead_letters_a_row_whose_id_the_error_queue_holds_under_a_new_id(qs: Db) -> None:
    """A row must leave a queue it cannot be processed from (nothing may stop a queue): when the error queue already
    holds its Id, it goes in under a new one, the old one recorded."""
    t = qs.transport
    native_id = str(t.send(qs.q("orders"), OutgoingMessage(b"poison-ish", {})))
    insert(qs, "error", native_id, b"an older failure with the same Id")
    assert t.process(qs.q("orders"), lambda m, c: 1 / 0, immediate_retries=0).failed == 1
    error = qs.transport.browse(qs.q("error"))
    assert len(error) == 2 and rows(qs, "orders") == []
    moved = next(r for r in error if r.body == b"poison-ish")
    assert str(moved.id) != native_id and h.parse_headers(moved.headers)[h.ORIGINAL_ID] == native_id


# -- one return policy -------------------------------------------------------------------------------------------
def hostile_targets(qs: Db) -> dict[str, str]:
    """FailedQ values a retry must refuse while only orders is allowed: each a row in the error queue."""
    t = qs.transport
    wanted = {
        "the error queue itself": t.wire_address(qs.q("error")),
        "an unlisted queue": t.wire_address(qs.q("payroll")),
        "a system table": "sqlite_master" if qs.kind == "sqlite" else '"pg_catalog"."pg_class"',
        "not an address": "a\x00b",
    }
    if qs.kind == "postgres":
        wanted["another schema"] = '"public"."orders"'
    return {reason: failed_with(qs, target, reason.encode()) for reason, target in wanted.items()}


@pytest.mark.parametrize("path", ["retry_all", "retry_batch", "retry_in_batches", "cli"])
def test_a_failedq_outside_the_allowed_queues_is_refused_on_every_path(qs: Db, path: str) -> None:
    good = failed(qs, "orders", b"goes back")
    refused = hostile_targets(qs)
    before = {n: rows(qs, n) for n in ("orders", "billing", "payroll")}
    errors = qs.transport.errors(qs.q("error"), allowed=[qs.q("orders")])
    if path == "retry_all":
        summary = errors.retry_all()
        returned, left = summary.returned, summary.left
    elif path == "retry_batch":
        returned, left = errors.retry_batch([position(qs, i) for i in [*refused.values(), good]])
    elif path == "retry_in_batches":
        summary = errors.retry_in_batches(BatchPlan(batch_size=3)).as_dict()
        returned, left = summary["returned"], summary["left"]
    else:
        import json

        code, out, err = run_cli(qs, "--json", "retry-errors", "--allow", qs.q("orders"))
        assert code == 0, err
        result = json.loads(out)
        returned, left = result["returned"], result["left"]
    assert returned == {qs.transport.name(qs.q("orders")): 1}
    assert sorted(x["id"] for x in left) == sorted(refused.values())
    reasons = {x["id"]: x["reason"] for x in left}
    assert "the error queue itself" in reasons[refused["the error queue itself"]]
    for case in ("an unlisted queue", "another schema"):
        if case in refused:
            assert "not one of the queues a retry may write to" in reasons[refused[case]], (case, reasons)
    assert ("not one of the queues" in reasons[refused["a system table"]]
            or "not a queue address" in reasons[refused["a system table"]])
    assert "not a queue address" in reasons[refused["not an address"]]
    assert {n: rows(qs, n) for n in ("billing", "payroll")} == {n: before[n] for n in ("billing", "payroll")}
    assert sorted(i for i, _ in rows(qs, "error")) == sorted(refused.values())  # each refused one stays


def test_an_allowed_queue_whose_table_is_missing_is_refused_with_the_reason(qs: Db) -> None:
    native_id = failed_with(qs, qs.transport.wire_address(qs.q("gone")), b"x")
    summary = qs.transport.errors(qs.q("error"), allowed=[qs.q("gone")]).retry_all()
    assert summary.returned == {} and "does not exist" in summary.left[0]["reason"]
    assert rows(qs, "error") == [(native_id, b"x")]


def test_a_retry_with_no_allowed_queue_changes_nothing_and_says_how_to_fix_it(qs: Db) -> None:
    failed(qs, "orders", b"x")
    before = rows(qs, "error")
    for retry in (lambda: qs.transport.retry_errors(), lambda: qs.transport.errors().retry_all(),
                  lambda: qs.transport.errors().retry_in_batches(BatchPlan())):
        with pytest.raises(ValueError, match="name the queues a retry may write to"):
            retry()
    code, _, err = run_cli(qs, "retry-errors")
    assert code == 2 and "--allow" in err
    assert rows(qs, "error") == before and rows(qs, "orders") == []


@pytest.mark.parametrize("allowed, redirects, match", [
    (["error"], None, "the error queue itself"),
    (["orders"], {"orders": "payroll"}, "not one of the queues a retry may write to"),
    (["orders"], {"orders": "error"}, "not one of the queues"),
])
def test_a_policy_that_breaks_the_rule_is_refused_before_anything_moves(qs: Db, allowed: list[str],
                                                                       redirects: dict[str, str] | None,
                                                                       match: str) -> None:
    with pytest.raises(ValueError, match=match):
        qs.transport.errors(qs.q("error"), allowed=[qs.q(a) for a in allowed],
                            redirects={qs.q(a): qs.q(b) for a, b in (redirects or {}).items()})


def test_redirects_obey_the_policy_and_name_the_queue_each_message_went_to(qs: Db) -> None:
    failed(qs, "orders", b"to billing")
    errors = qs.transport.errors(qs.q("error"), allowed=[qs.q("billing")], redirects={qs.q("orders"): qs.q("billing")})
    assert errors.retry_all().returned == {qs.transport.name(qs.q("billing")): 1}
    assert [b for _, b in rows(qs, "billing")] == [b"to billing"] and rows(qs, "orders") == []


def test_delete_and_a_stale_position_change_nothing_when_one_is_missing(qs: Db) -> None:
    one, two = failed(qs, "orders", b"1"), failed(qs, "orders", b"2")
    errors = qs.transport.errors(qs.q("error"))
    stale = Position(position(qs, one).seq, str(uuid.uuid4()))
    with pytest.raises(PositionsNotFoundError):
        errors.delete([position(qs, two), stale])
    assert len(rows(qs, "error")) == 2
    assert errors.delete([position(qs, one), position(qs, two)]) == 2 and errors.count() == 0


# -- a crash between the copy and the delete ---------------------------------------------------------------------
CHILD = textwrap.dedent("""
    import os, signal, sys
    from airflow_sqlqueue.transport import SqlQueueTransport
    from airflow_sqlqueue.transport.tables import queue

    put = queue.TableQueue.put

    def put_then_die(self, *args, **kwargs):
        done = put(self, *args, **kwargs)
        if done and self.address.table == "orders":
            os.kill(os.getpid(), signal.SIGKILL)  # copied, not deleted, not committed
        return done

    queue.TableQueue.put = put_then_die
    url, error, orders = sys.argv[1:4]
    with SqlQueueTransport.from_url(url, error_queue=error) as t:
        t.errors(allowed=[orders]).retry_all()
""")


def test_a_crash_between_copy_and_delete_loses_nothing_and_doubles_nothing(qs: Db) -> None:
    ids = [failed(qs, "orders", f"m{i}".encode()) for i in range(3)]
    before = rows(qs, "error")
    child = subprocess.run([sys.executable, "-c", CHILD, qs.url, qs.q("error"), qs.q("orders")],
                           capture_output=True, text=True, timeout=120, env=os.environ)
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert rows(qs, "error") == before and rows(qs, "orders") == []  # the copy died with its transaction
    summary = qs.transport.errors(qs.q("error"), allowed=[qs.q("orders")]).retry_all()
    assert summary.total_returned == 3 and rows(qs, "error") == []
    assert sorted(i for i, _ in rows(qs, "orders")) == sorted(ids)  # each once


# -- the SQL Server dialect at the DB-API level (a stand-in cursor: no SQL Server runs here) ----------------------
class MockMssqlCursor:
    """Records statements; answers an INSERT with ``insert_rowcount``, a DELETE with 1, a catalog read with a row."""

    def __init__(self, insert_rowcount: int) -> None:
        self.insert_rowcount = insert_rowcount
        self.statements: list[str] = []
        self.rowcount = -1

    def execute(self, sql: str, params: Any = None) -> MockMssqlCursor:
        self.statements.append(sql.split()[0].upper())
        self.rowcount = self.insert_rowcount if self.statements[-1] == "INSERT" else 1
        return self

    def fetchone(self) -> tuple[int, int]:
        return (1, 1)  # the Recoverable column and the table exist


@pytest.mark.parametrize("insert_rowcount, moved, statements", [
    (1, True, ["INSERT", "DELETE"]), (-1, True, ["INSERT", "DELETE"]), (0, False, ["INSERT"])])
def test_mssql_move_deletes_only_a_row_it_copied(insert_rowcount: int, moved: bool, statements: list[str]) -> None:
    from airflow_sqlqueue.transport.dialects import get_dialect
    from airflow_sqlqueue.transport.tables.queue import QueueBook

    dialect = get_dialect("mssql")
    book = QueueBook(dialect, "error")
    cursor = MockMssqlCursor(insert_rowcount)
    assert book.error.move(cursor, 7, uuid.uuid4(), book.queue("orders"), "{}", b"x") is moved
    assert [s for s in cursor.statements if s != "SELECT"] == statements
