"""No row stops a queue, through every receive path, on SQLite and PostgreSQL, counting every row by position.

The rows of ``hostile.py`` (deep JSON, lone surrogates, forwards to missing or foreign queues, terminal escapes,
loose SQLite types, other Expires formats, odd ids and positions) sit between good messages. Every path must
hand over each deliverable row exactly once, move each unreadable or refused row to the error queue intact with
failure headers, drop only what is really expired, and empty the queue.
"""

from __future__ import annotations

import tests.airflow_env  # noqa: F401  (sets AIRFLOW_HOME before any airflow import)

# isort: split

import asyncio
import io
import json
import threading
from collections import Counter
from contextlib import redirect_stderr
from pathlib import Path

import pytest

from airflow_sqlqueue.transport import SqlQueueTransport
from airflow_sqlqueue.transport.wire import headers as h

from . import hostile
from .helpers import count, run_cli, summary

MODES = ["none", "receive-only", "sends-atomic-with-receive", "transaction-scope"]
HELD = MODES[1:]


@pytest.fixture
def hq(queues):
    """``queues`` whose transport may forward to a queue that does not exist (``missing``)."""
    queues.transport.close()
    queues.transport = queues.new_transport(forward_to=[queues.q("missing")])
    return queues


def _record(seen: list[int], lock: threading.Lock):
    def add(messages) -> None:
        with lock:
            seen.extend(m.seq for m in messages)
    return add


def _settled(db, filled: hostile.Filled, seen: list[int], path: str, moved: set[int] | None = None) -> None:
    """Each deliverable row handed over once, the others in the error queue (or dropped), the queue empty."""
    assert not {s: n for s, n in Counter(seen).items() if n > 1}, f"{path}: handed over twice"
    missing = filled.delivered - set(seen)
    assert not missing, [filled.hostile[s].name if s in filled.hostile else "good" for s in missing]
    assert set(seen) <= filled.delivered, [filled.hostile[s].name for s in set(seen) - filled.delivered]
    moved = filled.expected("error") if moved is None else moved
    hostile.check_error_queue(db, filled, moved, db.transport.wire_address(db.q("orders")))
    assert count(db, "orders") == 0
    summary(f"hostile[{path}]", db.kind, messages=len(filled.good) + len(filled.hostile),
            faults=len(filled.hostile), lost=len(missing), delivered=len(seen), error_queue=len(moved))


def test_receive(hq):
    filled = hostile.fill(hq, "orders", hq.q("missing"))
    seen: list[int] = []
    while hq.transport.peek(hq.q("orders")):
        seen += [m.seq for m in hq.transport.receive(hq.q("orders"), 7)]
    _settled(hq, filled, seen, "receive")


@pytest.mark.parametrize("mode", MODES)
def test_process_every_mode(hq, mode):
    filled = hostile.fill(hq, "orders", hq.q("missing"))
    seen: list[int] = []
    lock = threading.Lock()
    add = _record(seen, lock)
    result = hq.transport.process(hq.q("orders"), lambda m, c: add([m]), mode=mode, batch_size=7, concurrency=2)
    assert result.succeeded == len(filled.delivered)
    _settled(hq, filled, seen, f"process-{mode}")


@pytest.mark.parametrize("mode", HELD)
def test_failing_handler_moves_hostile_messages_intact_and_hands_nothing_twice(hq, mode):
    """The handler refuses every hostile message: each goes to the error queue intact (lone surrogates, odd ids
    and bodies included); the good messages of the same batches are handled once, never again."""
    filled = hostile.fill(hq, "orders", hq.q("missing"))
    seen: list[int] = []

    def handler(message, context) -> None:
        if message.seq in filled.hostile:
            raise RuntimeError(f"refused {message.headers!r}")
        seen.append(message.seq)

    hq.transport.process(hq.q("orders"), handler, mode=mode, batch_size=7, immediate_retries=0)
    assert sorted(seen) == sorted(filled.good)
    _settled(hq, filled, seen + sorted(filled.expected("deliver")), f"process-fail-{mode}",
             moved=filled.expected("error") | filled.expected("deliver"))


def test_drain(hq):
    filled = hostile.fill(hq, "orders", hq.q("missing"))
    seen: list[int] = []
    add = _record(seen, threading.Lock())
    hq.transport.drain(hq.q("orders"), lambda ms: add(ms) or len(ms), batch_size=7, concurrency=2)
    _settled(hq, filled, seen, "drain")


def test_retry_errors_returns_every_hostile_row_or_says_why(hq):
    """Rows moved to the error queue (and rows other programs wrote there) go back to their queue by retry;
    none stops the retry run, nothing is lost on the way."""
    filled = hostile.fill(hq, "orders", hq.q("missing"))
    t = hq.transport
    t.process(hq.q("orders"), lambda m, c: (_ for _ in ()).throw(RuntimeError("no")), batch_size=7,
              immediate_retries=0)
    moved = filled.expected("error") | filled.expected("deliver") | set(filled.good)
    assert count(hq, "error") == len(moved)
    for row in hostile.rows(hq, hq.q("missing")):  # the error queue itself holds rows of other programs
        if row.seq is None and row.id is None:  # ids are unique: the loose ids are in the error queue already
            hostile.insert(hq, "error", row)
    result = t.retry_errors(allowed=[hq.q("orders")])
    assert result.total_returned == len(moved)
    assert len(result.left) == count(hq, "error")  # each row left is listed with a reason
    assert all(item["reason"] for item in result.left)
    assert count(hq, "orders") == len(moved)


# -- the command line -------------------------------------------------------------------------------------------


UNSAFE = ["\x1b", "\x07", "\x9b", "\u202e", "\u2066", "\x00"]


@pytest.mark.parametrize("mode", ["none", "receive-only", "sends-atomic-with-receive"])
@pytest.mark.parametrize("as_json", [False, True])
def test_cli_receive(hq, mode, as_json):
    filled = hostile.fill(hq, "orders", hq.q("missing"))
    code, out, err = run_cli(hq, "receive", hq.q("orders"), "--max", "1000", "--mode", mode,
                          *(["--json"] if as_json else []))
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == len(filled.delivered)
    for char in UNSAFE:
        assert char not in out + err, f"{char!r} reached the terminal"
    if as_json:
        items = [json.loads(line) for line in lines]
        by_type = {i["headers"].get("x") for i in items}
        assert "\ud800" in by_type  # the lone surrogate came through exactly, as its JSON escape
        assert any(i["headers"].get(h.ENCLOSED_MESSAGE_TYPES) == hostile.TERMINAL_ATTACK for i in items)
    else:
        assert sum("\\x1b]0;owned\\x07" in line for line in lines) == 1
    moved = {s for s in filled.expected("error")}
    hostile.check_error_queue(hq, filled, moved, hq.transport.wire_address(hq.q("orders")))
    assert count(hq, "orders") == 0


def test_cli_mode_none_keeps_what_it_cannot_print(hq, monkeypatch):
    """A render failure in mode none (whatever its cause) deletes nothing: the take is rolled back."""
    from airflow_sqlqueue.cli import output

    hostile.fill(hq, "orders", hq.q("missing"), good_around=1)
    before = count(hq, "orders")

    def broken(message):
        raise RuntimeError("cannot render")

    monkeypatch.setattr("airflow_sqlqueue.cli.commands.message_line", broken)
    code, out, _ = run_cli(hq, "receive", hq.q("orders"), "--max", "1000", "--mode", "none")
    assert code != 0 and out == ""
    assert count(hq, "orders") == before
    assert output.message_line is not broken


def test_usage_errors_never_show_the_password(hq):
    pg = tests.airflow_env.PG_CONNECTION
    for password in ["p%40ss%3Aw%2Fd", "p@ss:w/rd", "pässwörd", "pa%0A%1B%5B31mss", "x%zz", "p#ss", "a b"]:
        from airflow_sqlqueue.cli.main import main

        err = io.StringIO()
        with redirect_stderr(err):
            main(["--url", f"postgresql://postgres:{password}@127.0.0.1:1/test", "peek", "q"])
            main(["--url", f"nosuch://postgres:{password}@h/test", "peek", "q"])
            main(["--url", f"postgresql://{pg['login']}:{password}@{pg['host']}:{pg['port']}/{pg['schema']}", "peek",
                  'bad"name'])
        text = err.getvalue()
        from urllib.parse import unquote

        for secret in {password, unquote(password)} | set(password.replace("%", " ").split()):
            if len(secret) > 2:
                assert secret not in text, (password, text)
        assert "\x1b" not in text


# -- the Airflow layer --------------------------------------------------------------------------------------------
def _airflow_conn(db, monkeypatch) -> str:
    import uuid

    conn_id = "hostile_" + uuid.uuid4().hex[:8]
    fields = ({"conn_type": "sqlite", "host": db.url[len("sqlite:///"):]} if db.kind == "sqlite" else
              tests.airflow_env.pg_connection_fields())
    monkeypatch.setenv("AIRFLOW_CONN_" + conn_id.upper(), json.dumps(fields))
    return conn_id


class _Store:
    def __init__(self) -> None:
        self.data: dict = {}

    def get(self, key, default=None):
        return json.loads(self.data[key]) if key in self.data else default

    def set(self, key, value, **kwargs) -> None:
        self.data[key] = json.dumps(value)

    def delete(self, key) -> None:
        self.data.pop(key, None)


@pytest.mark.parametrize("to", ["list", "parquet"])
def test_drain_operator(hq, monkeypatch, tmp_path: Path, to):
    import pyarrow.parquet as pq

    from airflow_sqlqueue.operators.drain import SqlQueueDrainOperator

    filled = hostile.fill(hq, "orders", hq.q("missing"))
    conn_id = _airflow_conn(hq, monkeypatch)
    op = SqlQueueDrainOperator(task_id="d", queue_name=hq.q("orders"), sqlqueue_conn_id=conn_id, batch_size=7,
                               max_concurrency=2, error_queue=hq.q("error"), max_messages=1000,
                               output_path=str(tmp_path / "out") if to == "parquet" else None)
    result = op.execute({"task_state_store": _Store(), "run_id": "r"})
    if to == "list":
        json.dumps(result)  # storable as XCom
        seen = [item["seq"] for item in result]
        surrogate = next(i for i in result if "y" in i["headers"])
        assert surrogate["headers"]["x"] == "\ufffd"  # a JSON store cannot hold a lone surrogate
    else:
        table = pq.read_table(str(tmp_path / "out"))
        seen = table.column("seq").to_pylist()
        headers = [json.loads(text) for text in table.column("headers").to_pylist()]
        assert any(x.get("x") == "\ud800" for x in headers)  # the Parquet files keep the exact headers
    _settled(hq, filled, seen, f"drain-operator-{to}")


def test_event_trigger_claim(hq, monkeypatch):
    from airflow.triggers.shared_stream import AdvanceItem, AdvanceOutcome

    from airflow_sqlqueue.triggers.sqlqueue import SqlQueueMessageTrigger

    filled = hostile.fill(hq, "orders", hq.q("missing"))
    conn_id = _airflow_conn(hq, monkeypatch)
    trigger = SqlQueueMessageTrigger(conn_id=conn_id, queue_name=hq.q("orders"), error_queue=hq.q("error"),
                                     poll_interval=0.1, batch_size=7, event_interval=0)
    producer = SqlQueueMessageTrigger.create_shared_stream_producer(trigger.serialize()[1])
    seen: list[int] = []

    async def scenario() -> None:
        stream = producer.open_stream()
        while len(seen) < len(filled.delivered):
            raw, payload = await anext(stream)
            json.dumps(raw)  # an event payload: JSON-serialisable whatever the row held
            seen.extend(m["seq"] for m in raw["messages"])  # one event per claimed batch
            await producer.advance([AdvanceItem(payload, AdvanceOutcome(acked=1, failed=0))])
        await stream.aclose()
        await producer.aclose()

    asyncio.run(asyncio.wait_for(scenario(), 60))
    _settled(hq, filled, seen, "event-trigger")


def test_error_queue_dag_tasks(hq, monkeypatch):
    """The error-queue DAG's list and return tasks over an error queue full of hostile rows."""
    from airflow_sqlqueue.maintenance import tasks

    filled = hostile.fill(hq, "orders", hq.q("missing"))
    hq.transport.process(hq.q("orders"), lambda m, c: (_ for _ in ()).throw(RuntimeError("no")), batch_size=7,
                         immediate_retries=0)
    moved = count(hq, "error")
    assert moved == len(filled.delivered) + len(filled.expected("error"))
    conn_id = _airflow_conn(hq, monkeypatch)
    spec = {"schemas": [hq.schema], "error_queue": hq.q("error")} if hq.schema else {}
    monkeypatch.setenv("AIRFLOW_VAR_SQLQUEUE_MAINTENANCE", json.dumps({"connections": {conn_id: spec}}))
    target = {"conn_id": conn_id, "error_queue": hq.q("error")}
    listing = tasks.list_failed(target)
    json.dumps(listing)
    assert listing["total"] == moved
    returned = tasks.return_failed(target, {"retry": True})
    assert returned["total_returned"] == moved and count(hq, "orders") == moved


def test_sqlite_expires_other_formats_are_purged_only_when_past(queues):
    if queues.kind != "sqlite":
        pytest.skip("loose Expires text is a SQLite matter (PostgreSQL types the column)")
    filled = hostile.fill(queues, "orders", queues.q("missing"), good_around=0)
    assert queues.transport.purge_expired(queues.q("orders")) == len(filled.expected("drop"))
    assert count(queues, "orders") == len(filled.hostile) - len(filled.expected("drop"))


def test_browse_reads_every_row(hq):
    filled = hostile.fill(hq, "orders", hq.q("missing"), good_around=0)
    rows = hq.transport.browse(hq.q("orders"), limit=1000)
    assert {r.seq for r in rows} == set(filled.hostile)  # the negative seq too
    assert all(isinstance(r.body, bytes | None) for r in rows)
    assert max(len(r.body or b"") for r in rows) < 100  # an INTEGER body is its text, never that many zeros


def test_a_transport_with_default_forwarding_refuses_foreign_forwards(queues):
    t = queues.transport
    assert isinstance(t, SqlQueueTransport)
    hostile.insert(queues, "orders", hostile.Hostile("f", json.dumps({hostile.FORWARD: queues.q("replies")}),
                                                     b"f", "error"))
    assert t.receive(queues.q("orders")) == [] and count(queues, "replies") == 0
    [(_, text, _)] = hostile.error_rows(queues)
    assert "does not forward to" in h.parse_headers(text)[h.EXCEPTION_MESSAGE]


def test_sqlite_delayed_rows_with_other_due_formats_are_moved_not_held_forever(queues):
    if queues.kind != "sqlite":
        pytest.skip("loose Due text is a SQLite matter (PostgreSQL types the column)")
    t = queues.transport
    delayed = t.dialect.qualified(t.dialect.delayed_address(t.address("orders")))
    dues = {"2001-01-01T00:00:00Z": True, "not a date": True, "2999-01-01T00:00:00Z": False, "01/01/2999": True}
    for due in dues:
        queues.sql(f"INSERT INTO {delayed} (headers, body, due) VALUES (?, ?, ?)",  # noqa: S608
                   ("{}", due.encode(), due))
    assert t.move_due_delayed("orders") == sum(dues.values())
    assert sorted(m.body for m in t.receive("orders", 10)) == sorted(d.encode() for d, due in dues.items() if due)


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str() refused")


@pytest.mark.parametrize("mode", HELD)
def test_an_exception_that_cannot_be_printed_still_moves_its_message(queues, mode):
    t, q = queues.transport, queues.q("orders")
    t.send_many(q, [b"bad", b"good"])
    handled = []

    def handler(message, context) -> None:
        if message.body == b"bad":
            raise _Unprintable()
        handled.append(message.body)

    result = t.process(q, handler, mode=mode, immediate_retries=0)
    assert handled == [b"good"] and result.failed == 1 and count(queues, "orders") == 0
    [(_, text, body)] = hostile.error_rows(queues)
    assert body == b"bad" and "str() of the exception failed" in h.parse_headers(text)[h.EXCEPTION_MESSAGE]
