"""The batched retry the SQL Queues page starts: the ``sqlqueue_error_queue_batch_retry`` DAG (example_dags/) in real
``dag.test()`` runs. 10,000 failed messages come back exactly once (counted) within the rate limit (measured from
the batches' own timestamps, as recorded in the progress rows); the progress and audit rows are what the page's
API reads back; a run's conf cannot choose a connection or a queue outside the configuration; a cancel request
stops the run between two batches."""

from __future__ import annotations  # noqa: I001  (tests.airflow_env must be imported before airflow)

import tests.airflow_env as airflow_env
from tests.airflow_env import airflow_db  # noqa: F401  (fixture)

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_sqlqueue.dashboard import batch_retries
from airflow_sqlqueue.maintenance import retry_progress
from airflow_sqlqueue.maintenance.config import load_config
from airflow_sqlqueue.transport import OutgoingMessage, SqlQueueTransport
from airflow_sqlqueue.transport.wire import headers as h

airflow_env.use_project_dags()
DAG_ID = "sqlqueue_error_queue_batch_retry"
CONN_ID = "sqlqueue_batches"


@pytest.fixture
def queues(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SqlQueueTransport]:
    """A SQLite queue database behind ``sqlqueue_batches``, configured with orders, orders_v2, billing, error."""
    path = tmp_path / "queues.db"
    airflow_env.sqlite_connection(CONN_ID, path)
    monkeypatch.setenv("AIRFLOW_VAR_SQLQUEUE_MAINTENANCE", json.dumps({"connections": {CONN_ID: {
        "queues": ["orders", "orders_v2", "billing", "error"]}}}))
    with SqlQueueTransport.from_url(f"sqlite:///{path}") as transport:
        transport.create_queues(["orders", "orders_v2", "billing", "secret", "error"])
        yield transport


def fail(transport: SqlQueueTransport, queue: str, n: int, exception: str = "Boom") -> list[str]:
    ids = transport.send_many("error", [OutgoingMessage(body=f"{queue}-{i}".encode(), headers={
        h.FAILED_Q: queue, h.EXCEPTION_TYPE: exception}) for i in range(n)])
    return [str(i) for i in ids]


def run(**conf: Any) -> Any:
    dag = airflow_env.load_project_dag(DAG_ID, "error_queue_batch_retry.py")
    return dag.test(run_conf={"conn_id": CONN_ID, **conf})


def test_ten_thousand_come_back_once_within_the_rate_with_progress_rows_the_page_reads(
        airflow_db: None, queues: SqlQueueTransport) -> None:  # noqa: F811
    made = fail(queues, "orders", 10_000)
    rate = 2_500.0
    dag_run = run(batch_size=1_000, ramp_start=125, rate_per_second=rate)
    assert str(dag_run.state) == "success", airflow_env.task_states(dag_run)

    back = Counter(str(r.id) for r in queues.browse("orders", limit=20_000))
    assert set(back) == set(made) and set(back.values()) == {1} and queues.count("error") == 0  # each once

    rows = retry_progress.run_rows(queues, dag_run.run_id)
    assert [r["kind"] for r in rows] == ["start"] + ["batch"] * 13 + ["end"]
    assert [r["looked_at"] for r in rows if r["kind"] == "batch"][:4] == [125, 250, 500, 1_000]  # the ramp
    start = rows[0]["detail"]
    assert start["to_do"] == 10_000 and start["plan"]["rate_per_second"] == rate
    assert start["allowed"] == ["orders", "orders_v2", "billing"]  # the configured queues but the error queue
    first, done, observed = rows[1]["detail"]["run_started_at"], 0, []
    for row in rows[1:-1]:  # the rate at every batch end, from the batches' own timestamps
        done += row["returned_total"]
        observed.append(done / (row["detail"]["finished_at"] - first))
    assert done == 10_000 and max(observed) <= rate * 1.0001, observed

    config = load_config()  # what the page's API reads: the same rows, summed, with the DAG run's state
    shown = {r["run_id"]: r for r in batch_retries.runs(config, CONN_ID, queues)}[dag_run.run_id]
    assert shown["state"] == "done" and shown["dag_run_state"] == "success"
    assert shown["returned"] == {"orders": 10_000} and shown["remaining"] == 0 and shown["batches_done"] == 13
    assert shown["left_count"] == 0 and shown["started_at"] and shown["ended_at"]


def test_selection_redirect_and_refusals(airflow_db: None, queues: SqlQueueTransport) -> None:  # noqa: F811
    orders = fail(queues, "orders", 30)
    fail(queues, "billing", 5, "TimeoutError")
    secret = fail(queues, "secret", 2)
    page = queues.failed_page("error", limit=50)
    chosen = [{"seq": p.seq, "id": str(p.id)} for p in page if str(p.id) in set(orders[:10]) | set(secret)]
    dag_run = run(positions=chosen, batch_size=4, redirects={"orders": "orders_v2"})
    assert str(dag_run.state) == "success", airflow_env.task_states(dag_run)
    assert sorted(str(r.id) for r in queues.browse("orders_v2")) == sorted(orders[:10])
    shown = retry_progress.summarize(retry_progress.run_rows(queues, dag_run.run_id))
    assert shown["returned"] == {"orders_v2": 10} and shown["left_count"] == 2 and shown["to_do"] == 12
    assert all("not one of the queues" in x["reason"] for x in shown["left"])  # secret is not configured

    dag_run = run(exception_type="TimeoutError")  # a group
    assert str(dag_run.state) == "success" and queues.count("billing") == 5 and queues.count("error") == 22

    for conf, reason in (({"redirects": {"orders": "secret"}}, "not a queue a retry may write to"),
                         ({"redirects": {"orders": "error"}}, "not a queue a retry may write to"),
                         ({"conn_id": "sqlqueue_default"}, "not configured")):
        dag_run = run(**conf)
        assert str(dag_run.state) == "failed", (conf, reason)
    with pytest.raises(Exception, match="batch_size: 0 is less than the minimum of 1"):  # the DAG's params
        run(batch_size=0)
    assert queues.count("error") == 22 and queues.count("orders") == 0  # nothing changed
    with pytest.raises(ValueError, match="not a queue a retry may write to"):
        batch_retries.checked_conf(load_config().connection(CONN_ID), queues, {"redirects": {"orders": "secret"}})


def test_a_cancel_request_stops_the_run_between_batches(airflow_db: None, queues: SqlQueueTransport,  # noqa: F811
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    fail(queues, "orders", 50)
    asked = []

    def cancel_after_two(transport: Any, run_id: str, table: str = retry_progress.PROGRESS_TABLE) -> bool:
        asked.append(run_id)
        if len(asked) == 3:  # before the third batch, as the page would: a cancel row by a user
            retry_progress.record(transport, run_id, CONN_ID, "error", "cancel", user_name="op")
        return real(transport, run_id, table)

    real = retry_progress.cancel_requested
    monkeypatch.setattr(retry_progress, "cancel_requested", cancel_after_two)
    dag_run = run(batch_size=10)
    assert str(dag_run.state) == "failed"  # the task fails with "cancelled", so the run shows it
    assert queues.count("orders") == 20 and queues.count("error") == 30  # two whole batches, nothing half done
    shown = retry_progress.summarize(retry_progress.run_rows(queues, dag_run.run_id))
    assert shown["state"] == "cancelled" and shown["cancel_requested_by"] == "op" and shown["batches_done"] == 2
    assert shown["remaining"] == 30


def test_progress_statements_parse_as_tsql_and_every_dialect_has_them() -> None:
    sqlglot = pytest.importorskip("sqlglot")
    from airflow_sqlqueue.maintenance.tables import statements
    from airflow_sqlqueue.transport.dialects import get_dialect

    names = {d: set(statements(f"retry_progress_{d}")) for d in ("sqlite", "postgres", "mssql")}
    assert names["sqlite"] == names["postgres"] == names["mssql"], names
    table = retry_progress.ProgressTable(get_dialect("mssql"), "sqlqueue_retry_progress@[ops]")
    assert table.identifiers["progress"].endswith("[ops].[sqlqueue_retry_progress]")
    for name, statement in statements("retry_progress_mssql").items():
        assert sqlglot.parse(statement.compile("qmark").fill(table.identifiers), read="tsql"), name


def test_the_none_group_retries_only_messages_without_an_exception_type(
        airflow_db: None, queues: SqlQueueTransport) -> None:  # noqa: F811
    """Issue 31: the page's "(none)" group as a run's conf (``missing``) retries that group, never every message."""
    typed = fail(queues, "orders", 5, exception="Boom")
    untyped = [str(i) for i in queues.send_many("error", [OutgoingMessage(body=f"n-{i}".encode(), headers={
        h.FAILED_Q: "billing"}) for i in range(3)])]
    empty = [str(i) for i in queues.send_many("error", [OutgoingMessage(body=b"e", headers={
        h.FAILED_Q: "billing", h.EXCEPTION_TYPE: ""})])]
    dag_run = run(missing=["exception_type"], batch_size=2)
    assert str(dag_run.state) == "success", airflow_env.task_states(dag_run)
    assert sorted(str(r.id) for r in queues.browse("billing")) == sorted(untyped + empty)
    assert sorted(str(r.id) for r in queues.browse("error")) == sorted(typed)
    (start,) = [r for r in retry_progress.run_rows(queues, dag_run.run_id) if r["kind"] == "start"]
    assert start["detail"]["to_do"] == 4 and start["detail"]["selection"] == {"missing": ["exception_type"]}
    refused = run(missing=["exception_type"], exception_type="Boom")
    assert str(refused.state) == "failed" and queues.count("error") == 5  # a value and missing: nothing matches
