"""Operators: real ``dag.test()`` runs on a SQLite metadata database, plus direct tests of the drain's durability.

The DAGs are in ``tests/dags/sqlqueue_operator_dags.py``; one run covers every operator on SQLite, one the drain
on PostgreSQL. The crash tests kill a draining process with SIGKILL between writing a Parquet file and the
commit, and right after a commit, and count messages.
"""

from __future__ import annotations  # noqa: I001  (tests.airflow_env must be imported before airflow)

import tests.airflow_env as airflow_env
from tests.airflow_env import airflow_db  # noqa: F401  (fixture)

import json
import os
import signal
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from airflow_sqlqueue.operators.sqlqueue import (
    SPOOL_KEY,
    SqlQueueCheckFailedError,
    SqlQueueCheckSchemaOperator,
    SqlQueueDrainOperator,
    SqlQueueSendOperator,
    message_from_dict,
)
from airflow_sqlqueue.operators import SqlQueuePublishOperator
from airflow_sqlqueue.transport import InvalidMessageError, SqlQueueTransport
from airflow_sqlqueue.transport.wire import headers as h
from tests.conftest import _PG_SKIP, PG_URL

DAG_FILE = "sqlqueue_operator_dags.py"


def _parquet_rows(directory: Path) -> list[dict]:
    rows: list[dict] = []
    for path in sorted(directory.glob("*.parquet")):
        rows.extend(pq.read_table(path).to_pylist())
    return rows


def _queue_ids(transport: SqlQueueTransport, queue: str) -> list[str]:
    return [str(r.id) for r in transport.browse(queue, limit=10_000)]


def _no_spool_left(dag_run) -> bool:
    from airflow.models.task_state_store import TaskStateStoreModel
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    with create_session() as session:
        return not session.scalar(select(func.count()).select_from(TaskStateStoreModel).where(
            TaskStateStoreModel.run_id == dag_run.run_id, TaskStateStoreModel.key == SPOOL_KEY))


def _check_drain_outputs(dr, transport: SqlQueueTransport, q, out: Path) -> None:
    """The drain-to-list and drain-to-Parquet halves of a run (shared by the SQLite and PostgreSQL runs)."""
    # list for .expand(): every message seen by exactly one mapped task instance
    sent = airflow_env.xcom_value(dr, "send_orders")
    drained = airflow_env.xcom_value(dr, "drain_orders")
    assert len(sent) == 40 and sorted(m["id"] for m in drained) == sorted(sent)
    assert set(drained[0]) == {"id", "headers", "body", "seq", "queue"}
    assert json.loads(message_from_dict(drained[0]).body)["order"] >= 0
    seen = [p.name.split(".")[0] for p in (out / "seen").iterdir()]
    assert sorted(seen) == sorted(sent)  # exactly once each
    assert transport.peek(q("orders")) == 0 and _queue_ids(transport, q("orders")) == []
    counts = airflow_env.xcom_value(dr, "drain_orders", key="drain_summary")  # templated sizes took effect
    assert counts["delivered"] == 40 and counts["batches"] >= 40 // 7
    # Parquet: every message, read back with pyarrow, nothing left in the queue, no temp files
    audit_ids = airflow_env.xcom_value(dr, "send_audit")
    files = airflow_env.xcom_value(dr, "drain_audit")
    assert sorted(files) == sorted(str(p) for p in (out / "parquet").glob("*.parquet"))
    assert not list((out / "parquet").glob(".*"))
    rows = _parquet_rows(out / "parquet")
    assert sorted(r["id"] for r in rows) == sorted(audit_ids) and len(rows) == 120
    counts = airflow_env.xcom_value(dr, "drain_audit", key="drain_summary")
    assert (counts["delivered"], counts["taken"], counts["expired"], counts["poison"]) == (120, 120, 0, 0)
    binary = [r for r in rows if json.loads(r["headers"])["n"].startswith("b")]
    assert len(binary) == 10 and all(r["body"][:2] == bytes([255, 0]) for r in binary)
    assert all(r["received_at"] is not None and r["queue"] for r in rows)
    assert _queue_ids(transport, q("audit")) == []
    assert _no_spool_left(dr)


def test_operators_in_a_dag_run_on_sqlite(airflow_db, tmp_path: Path) -> None:  # noqa: F811
    db_path = tmp_path / "queues.db"
    conn_id = airflow_env.sqlite_connection("sqlqueue_test", db_path)
    out = tmp_path / "out"
    os.environ["SQLQUEUE_TEST_OUT"] = str(out)
    transport = SqlQueueTransport.from_url(f"sqlite:///{db_path}")
    transport.create_queue("legacy")  # a queue that lost its index: found by the check, then repaired
    with sqlite3.connect(db_path) as conn:
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'legacy' "
                                    "AND sql IS NOT NULL").fetchall():
            conn.execute(f'DROP INDEX "{name}"')
    assert conn_id == "sqlqueue_test"

    dag = airflow_env.load_dag("sqlqueue_ops", DAG_FILE)
    dr = dag.test()
    assert str(dr.state) == "success", airflow_env.task_states(dr)

    _check_drain_outputs(dr, transport, lambda name: name, out / "sqlqueue_ops")

    # handler drain: ok-* handled, value-*/key-* retried once then moved to the error queue
    summary = airflow_env.xcom_value(dr, "drain_flaky")
    assert (summary["succeeded"], summary["failed"], summary["retries"]) == (10, 5, 5), summary
    errors = transport.browse("error")
    headers = [json.loads(r.headers) for r in errors]
    assert len(errors) == 3  # the ValueError ones; the KeyError ones went back to flaky
    assert all(x[h.FAILED_Q] == "flaky" and x[h.EXCEPTION_TYPE] == "ValueError" for x in headers)
    assert all(x[h.EXCEPTION_MESSAGE].startswith("cannot handle value-") for x in headers)
    # retry errors: only KeyError ones returned, without failure headers
    retried = airflow_env.xcom_value(dr, "retry_key_errors")
    assert retried["returned"] == {"flaky": 2} and retried["total_returned"] == 2, retried
    back = transport.browse("flaky")
    assert sorted(r.body for r in back) == [b"key-0", b"key-1"]
    assert all(h.FAILED_Q not in json.loads(r.headers) and json.loads(r.headers)["k"] == "v" for r in back)
    # purge: discovered every queue, deleted the expired message only
    purged = airflow_env.xcom_value(dr, "purge")
    assert purged["expiring"] == 1 and sum(purged.values()) == 1 and "orders" in purged, purged
    assert [r.body for r in transport.browse("expiring")] == [b"stays"]
    # check: the dropped index is found (warning), then repaired
    found = airflow_env.xcom_value(dr, "check_warn")
    assert [f["code"] for f in found] == ["missing_expires_index"] and found[0]["repairable"]
    assert airflow_env.xcom_value(dr, "check_repair") == []
    assert transport.check("legacy") == []
    transport.close()


@pytest.mark.skipif(_PG_SKIP is not None, reason=str(_PG_SKIP))
def test_drain_in_a_dag_run_on_postgres(airflow_db, tmp_path: Path) -> None:  # noqa: F811
    import psycopg

    schema = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    airflow_env.postgres_connection("sqlqueue_pg")
    os.environ["SQLQUEUE_TEST_PG_SCHEMA"] = schema
    out = tmp_path / "out"
    os.environ["SQLQUEUE_TEST_OUT"] = str(out)
    transport = SqlQueueTransport.from_url(PG_URL, error_queue=f'"{schema}"."error"')
    try:
        dag = airflow_env.load_dag("sqlqueue_drain_pg", DAG_FILE)
        dr = dag.test()
        assert str(dr.state) == "success", airflow_env.task_states(dr)
        _check_drain_outputs(dr, transport, lambda name: f'"{schema}"."{name}"', out / "sqlqueue_drain_pg")
    finally:
        transport.close()
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


# -- without a DAG run -------------------------------------------------------------------------------------
@pytest.fixture
def sqlite_queues(tmp_path: Path):
    db_path = tmp_path / "direct.db"
    conn_id = airflow_env.sqlite_connection("sqlqueue_direct", db_path)
    transport = SqlQueueTransport.from_url(f"sqlite:///{db_path}")
    transport.create_queues(["orders"], delayed=True)
    transport.create_queue("error")
    yield conn_id, transport, db_path
    transport.close()


def test_drain_list_refuses_more_than_max_map_length() -> None:
    with pytest.raises(ValueError, match="max_map_length=1024"):
        SqlQueueDrainOperator(task_id="d", queue_name="orders", max_messages=5000)
    with pytest.raises(ValueError, match="max_map_length"):
        SqlQueueDrainOperator(task_id="d", queue_name="orders", max_messages=None)
    SqlQueueDrainOperator(task_id="d", queue_name="orders", max_messages=None, output_path="/tmp/x")  # fine
    with pytest.raises(ValueError, match="not both"):
        SqlQueueDrainOperator(task_id="d", queue_name="orders", output_path="/tmp/x", handler=print)
    with pytest.raises(ValueError, match="max_concurrency"):
        SqlQueueDrainOperator(task_id="d", queue_name="orders", max_concurrency=0)


def test_drain_sizes_from_templates_are_checked_once_rendered() -> None:
    op = SqlQueueDrainOperator(task_id="d", queue_name="orders", max_messages="{{ params.n }}",
                               max_concurrency="{{ params.c }}", max_duration="{{ params.s }}")  # not checked yet
    op.max_messages, op.max_concurrency, op.max_duration = " 50 ", "2", "1.5"  # what a template renders to
    op._check_sizes(rendered=True)
    assert (op.max_messages, op.max_concurrency, op.max_duration) == (50, 2, 1.5)
    for field, text, match in (("max_messages", "ten", "max_messages rendered to 'ten'"),
                               ("max_messages", "5000", "max_map_length"), ("max_concurrency", "0", "max_concurrency"),
                               ("max_duration", "-1", "max_duration")):
        op = SqlQueueDrainOperator(task_id="d", queue_name="orders", **{field: "{{ params.x }}"})
        setattr(op, field, text)
        with pytest.raises(ValueError, match=match):
            op._check_sizes(rendered=True)


class FakeStore:
    """The task state store of one task instance (it survives retries); can fail on the n-th write."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}
        self.fail_on: int | None = None
        self.writes = 0

    def get(self, key: str, default=None):
        return json.loads(self.data[key]) if key in self.data else default

    def set(self, key: str, value, **kwargs) -> None:
        self.data[key] = json.dumps(value)
        self.writes += 1
        if self.writes == self.fail_on:
            raise RuntimeError("worker died after storing the batch, before the commit")

    def delete(self, key: str) -> None:
        self.data.pop(key, None)


def test_drain_list_recovers_a_failed_try_from_the_task_state_store(sqlite_queues) -> None:
    conn_id, transport, _ = sqlite_queues
    sent = {str(i) for i in transport.send_many("orders", [f"m{i}" for i in range(30)])}
    store = FakeStore()
    store.fail_on = 3  # batches 1-2 committed; batch 3 stored, then the try dies before its commit
    op = SqlQueueDrainOperator(task_id="d", queue_name="orders", sqlqueue_conn_id=conn_id, batch_size=5)
    with pytest.raises(RuntimeError, match="worker died"):
        op.execute({"task_state_store": store, "run_id": "r"})
    assert len(_queue_ids(transport, "orders")) == 20  # batch 3 rolled back: 30 - 10
    result = op.execute({"task_state_store": store, "run_id": "r"})  # the retry
    assert sorted(m["id"] for m in result) == sorted(sent)  # all, each once (batch 3 de-duplicated)
    assert _queue_ids(transport, "orders") == []
    op.on_success_callback[-1]({"task_state_store": store})
    assert store.data == {}


def test_check_fails_on_findings_with_a_clear_error(sqlite_queues) -> None:
    conn_id, transport, db_path = sqlite_queues
    with sqlite3.connect(db_path) as conn:
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'orders' "
                                    "AND sql IS NOT NULL").fetchall():
            conn.execute(f'DROP INDEX "{name}"')
    op = SqlQueueCheckSchemaOperator(task_id="c", sqlqueue_conn_id=conn_id, queues=["orders"])
    with pytest.raises(SqlQueueCheckFailedError, match="orders: missing_expires_index.*repair=True"):
        op.execute({})
    missing = SqlQueueCheckSchemaOperator(task_id="c", sqlqueue_conn_id=conn_id, queues="nope")
    with pytest.raises(SqlQueueCheckFailedError, match="missing_queue"):
        missing.execute({})


def test_check_reports_what_the_engine_did_not_let_it_check_without_failing(sqlite_queues, monkeypatch) -> None:
    """As on an engine without sys.allocation_units: a ``not_checked`` finding is returned and logged, never
    failed on; a problem beside it still fails the task (the stand-in wraps the real check of the SQLite queue)."""
    from airflow_sqlqueue.transport import Finding

    conn_id, _, db_path = sqlite_queues
    real_check = SqlQueueTransport.check

    def check_on_an_engine_without_the_view(self, queue, *, repair=False):  # a stand-in, see the docstring
        return [*real_check(self, queue, repair=repair),
                Finding(self.name(queue), "heap_bloat_not_checked", "heap bloat not checked: no view",
                        not_checked=True)]

    monkeypatch.setattr(SqlQueueTransport, "check", check_on_an_engine_without_the_view)
    rows = SqlQueueCheckSchemaOperator(task_id="c", sqlqueue_conn_id=conn_id, queues=["orders"]).execute({})
    assert [(r["code"], r["not_checked"]) for r in rows] == [("heap_bloat_not_checked", True)]
    with sqlite3.connect(db_path) as conn:
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'orders' "
                                    "AND sql IS NOT NULL").fetchall():
            conn.execute(f'DROP INDEX "{name}"')
    with pytest.raises(SqlQueueCheckFailedError, match=r"1 schema/index findings: orders: missing_expires_index;"):
        SqlQueueCheckSchemaOperator(task_id="c", sqlqueue_conn_id=conn_id, queues=["orders"]).execute({})


def test_send_operator_validates_before_sending(sqlite_queues) -> None:
    conn_id, transport, _ = sqlite_queues
    with pytest.raises(ValueError, match="either"):
        SqlQueueSendOperator(task_id="s", queue_name="orders", messages=["a"], body="b")
    with pytest.raises(ValueError, match="messages= .* or body="):
        SqlQueueSendOperator(task_id="s", queue_name="orders")
    bad = SqlQueueSendOperator(task_id="s", queue_name="orders", sqlqueue_conn_id=conn_id,
                               messages=[{"body": "ok"}, {"body": "x", "colour": "red"}])
    with pytest.raises(InvalidMessageError, match="unknown keys"):
        bad.execute({})
    assert transport.peek("orders") == 0  # nothing sent
    # a list rendered as text (no native rendering) is still understood
    text = SqlQueueSendOperator(task_id="s", queue_name="orders", sqlqueue_conn_id=conn_id,
                                messages=str([{"body": "a", "headers": {"x": "1"}}, "b"]))
    ids = text.execute({})
    assert len(ids) == 2 and [r.body for r in transport.browse("orders")] == [b"a", b"b"]
    one = SqlQueueSendOperator(task_id="s", queue_name="orders", sqlqueue_conn_id=conn_id, body="c", delay=60)
    assert one.execute({}) == []  # delayed: the Id is given when it is due
    with pytest.raises(InvalidMessageError, match="rendered to a string"):
        SqlQueueSendOperator(task_id="s", queue_name="orders", sqlqueue_conn_id=conn_id, messages="hello").execute({})


def test_send_operator_fills_in_the_standard_headers(sqlite_queues) -> None:
    conn_id, transport, _ = sqlite_queues
    SqlQueueSendOperator(task_id="s", queue_name="orders", sqlqueue_conn_id=conn_id, body="x",
                         headers={h.CONVERSATION_ID: "mine"}).execute({})
    [message] = transport.receive("orders")
    assert message.headers[h.CONVERSATION_ID] == "mine"  # the caller's headers win
    assert message.headers[h.MESSAGE_INTENT] == "Send" and h.parse_wire_time(message.headers[h.TIME_SENT])
    assert transport.oldest_age("orders") is None  # received; a task's sends have an age on the dashboard


def test_publish_operator_sends_one_copy_per_subscribed_queue(sqlite_queues) -> None:
    conn_id, transport, _ = sqlite_queues
    transport.create_queue("billing")
    transport.create_subscription_table()
    transport.subscribe("orders", ["Sales.Events.OrdersExported"])
    transport.subscribe("billing", ["Sales.Events.IExportEvent"])
    op = SqlQueuePublishOperator(task_id="announce", sqlqueue_conn_id=conn_id, endpoint="Sales.Airflow",
                                 event_type="Sales.Events.OrdersExported", base_types=["Sales.Events.IExportEvent"],
                                 body={"Day": "2026-01-02"})
    result = op.execute({})
    assert sorted(result["sent"]) == ["billing", "orders"] and result["topics"][0] == "Sales.Events.OrdersExported"
    for queue in ("orders", "billing"):
        [message] = transport.receive(queue)
        assert json.loads(message.body) == {"Day": "2026-01-02"}
        assert message.headers[h.CONTENT_TYPE] == "application/json"
        assert message.headers[h.MESSAGE_INTENT] == "Publish"
        assert message.headers[h.ORIGINATING_ENDPOINT] == "Sales.Airflow"


# -- crash tests -------------------------------------------------------------------------------------------
CRASH_SCRIPT = r"""
import os, signal, sys
sys.path.insert(0, {root!r})
import tests.airflow_env  # noqa
from airflow_sqlqueue.operators import sqlqueue as ops
from airflow_sqlqueue.operators.parquet import ParquetBatchWriter

when, kill_at = sys.argv[1], int(sys.argv[2])
count = {{"n": 0}}
if when == "before_commit":
    original = ParquetBatchWriter.write
    def write(self, messages, name):
        path = original(self, messages, name)
        count["n"] += 1
        if count["n"] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)  # the file is in place, the receive not committed
        return path
    ParquetBatchWriter.write = write
elif when == "after_commit":
    from airflow_sqlqueue.transport.processing.claim import Claim
    original = Claim.commit
    def commit(self):
        original(self)
        count["n"] += 1
        if count["n"] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)  # committed, nothing returned yet
    Claim.commit = commit
op = ops.SqlQueueDrainOperator(task_id="crash", queue_name="audit", sqlqueue_conn_id="sqlqueue_crash",
                               output_path=sys.argv[3], max_messages=None, batch_size=10)
print(len(op.execute({{"run_id": "crash"}})))
"""


@pytest.mark.parametrize("when", ["before_commit", "after_commit"])
def test_drain_to_parquet_killed_mid_batch_loses_nothing(tmp_path: Path, when: str) -> None:
    db_path = tmp_path / "crash.db"
    transport = SqlQueueTransport.from_url(f"sqlite:///{db_path}")
    transport.create_queues(["audit", "error"])
    sent = {str(i) for i in transport.send_many("audit", [f"a{i}".encode() for i in range(55)])}
    out = tmp_path / "parquet"
    env = {**os.environ, "AIRFLOW_CONN_SQLQUEUE_CRASH": json.dumps({"conn_type": "sqlite", "host": str(db_path)})}
    script = CRASH_SCRIPT.format(root=str(Path(__file__).parent.parent))

    killed = subprocess.run([sys.executable, "-c", script, when, "3", str(out)], env=env, capture_output=True,
                            text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    in_files = [r["id"] for r in _parquet_rows(out)]
    in_queue = _queue_ids(transport, "audit")
    assert set(in_files) | set(in_queue) == sent  # nothing lost
    assert len(in_files) == 30 and len(set(in_files)) == 30
    duplicates = set(in_files) & set(in_queue)
    assert len(duplicates) == (10 if when == "before_commit" else 0)  # only the uncommitted batch, same Ids
    assert len(in_queue) == 55 - (20 if when == "before_commit" else 30)

    finished = subprocess.run([sys.executable, "-c", script, "none", "0", str(out)], env=env, capture_output=True,
                              text=True, timeout=120)
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert set(r["id"] for r in _parquet_rows(out)) == sent and _queue_ids(transport, "audit") == []
    assert not list(out.glob(".*"))
    transport.close()
