"""OpenLineage datasets of the drain and send operators, built with the OpenLineage provider's own classes."""

from __future__ import annotations  # noqa: I001  (tests.airflow_env must be imported before airflow)

import tests.airflow_env as airflow_env
from tests.airflow_env import airflow_db  # noqa: F401  (fixture)

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_sqlqueue.lineage import path_dataset
from airflow_sqlqueue.operators import SqlQueueDrainOperator, SqlQueueSendOperator
from airflow_sqlqueue.transport import SqlQueueTransport
from tests.conftest import make_db

pytest.importorskip("airflow.providers.openlineage", reason="apache-airflow-providers-openlineage is not installed")


def test_drain_to_parquet_reads_the_queue_table_and_writes_the_parquet_location(
        airflow_db: None, tmp_path: Path) -> None:  # noqa: F811
    from airflow.providers.openlineage.extractors import OperatorLineage

    path = tmp_path / "queues.db"
    conn = airflow_env.sqlite_connection("sqlqueue_lineage", path)
    with SqlQueueTransport.from_url(f"sqlite:///{path}") as transport:
        transport.create_queues(["orders"])
        transport.send_many("orders", [b"a", b"b"])
    drain = SqlQueueDrainOperator(task_id="drain", sqlqueue_conn_id=conn, queue_name="orders",
                                  output_path=str(tmp_path / "out"), max_messages=10)
    assert len(drain.execute({})) == 1
    found = drain.get_openlineage_facets_on_complete(None)
    assert isinstance(found, OperatorLineage)
    assert [(d.namespace, d.name) for d in found.inputs] == [(f"sqlite://{path.resolve()}", "orders")]
    assert [(d.namespace, d.name) for d in found.outputs] == [("file", str(tmp_path / "out"))]
    to_list = SqlQueueDrainOperator(task_id="list", sqlqueue_conn_id=conn, queue_name="orders", max_messages=10)
    assert to_list.get_openlineage_facets_on_complete(None).outputs == []


def test_send_writes_the_queue_table_named_as_openlineage_names_it(airflow_db: None) -> None:  # noqa: F811
    conn = airflow_env.postgres_connection("sqlqueue_lineage_pg")
    send = SqlQueueSendOperator(task_id="send", sqlqueue_conn_id=conn, queue_name='"sales"."orders"', body="x")
    found = send.get_openlineage_facets_on_complete(None)
    assert found.inputs == []
    database = airflow_env.PG_CONNECTION["schema"]
    assert [(d.namespace, d.name) for d in found.outputs] == [(airflow_env.PG_NAMESPACE, f"{database}.sales.orders")]
    secrets = airflow_env.set_connection("sqlqueue_lineage_secret", {
        "conn_type": "postgres", "host": "db.internal", "login": "me", "password": "S3cret", "schema": "shop"})
    other = SqlQueueSendOperator(task_id="s2", sqlqueue_conn_id=secrets, queue_name="orders", body="x")
    (dataset,) = other.get_openlineage_facets_on_complete(None).outputs
    assert (dataset.namespace, dataset.name) == ("postgres://db.internal:5432", "shop.public.orders")
    assert "S3cret" not in repr(dataset) and "me@" not in dataset.namespace


@pytest.mark.parametrize("given, expected", [
    ("s3://bucket/drains/orders", ("s3://bucket", "drains/orders")),
    ("gs://b/x/", ("gs://b", "x/")), ("/data/out", ("file", "/data/out")), ("file:///data/out", ("file", "/data/out"))])
def test_parquet_locations(given: str, expected: tuple[str, str]) -> None:
    assert path_dataset(given) == expected


# -- a whole DAG run through the OpenLineage provider ------------------------------------------------------
RUN_DAG = """
import tests.airflow_env as airflow_env
dag = airflow_env.load_dag("sqlqueue_lineage", "sqlqueue_lineage.py")
print("STATE", dag.test().state)
"""
SECRET = "S3cret-lineage-pw"


def test_a_dag_run_reports_queue_to_drain_to_spark(airflow_db: None, tmp_path: Path) -> None:  # noqa: F811
    """send -> drain to Parquet -> Spark step, run by ``dag.test()`` in a process whose OpenLineage provider writes
    its events to a file (its ``[openlineage] transport``); the COMPLETE events carry the datasets, named as
    OpenLineage names them, and no credential of the connection (its password is set, and ignored by the
    server's trust authentication)."""
    for db in make_db("postgres", tmp_path):
        db.transport.create_queues([db.q("orders")])
        events_file, output = tmp_path / "events.jsonl", tmp_path / "parquet"
        env = {**os.environ,
               "AIRFLOW_CONN_SQLQUEUE_LINEAGE_DAG": json.dumps({**airflow_env.PG_CONNECTION, "password": SECRET}),
               "SQLQUEUE_LINEAGE_CONN_ID": "sqlqueue_lineage_dag", "SQLQUEUE_LINEAGE_QUEUE": db.q("orders"),
               "SQLQUEUE_LINEAGE_OUTPUT": str(output), "AIRFLOW__OPENLINEAGE__NAMESPACE": "sqlqueue-test",
               "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
                   {"type": "file", "log_file_path": str(events_file), "append": True})}
        done = subprocess.run([sys.executable, "-c", RUN_DAG], cwd=Path(__file__).parent.parent, env=env,
                              capture_output=True, text=True, timeout=600)
        assert "STATE success" in done.stdout, done.stdout[-3000:] + done.stderr[-5000:]
        text = events_file.read_text(encoding="utf-8")
        events = [json.loads(line) for line in text.splitlines() if line.strip()]
        complete = {e["job"]["name"]: e for e in events if e.get("eventType") == "COMPLETE" and "job" in e}
        assert {"sqlqueue_lineage.send", "sqlqueue_lineage.drain", "sqlqueue_lineage.spark"} <= set(complete), \
            sorted(complete)

        def datasets(task: str, side: str, found: dict = complete) -> list[tuple[str, str]]:
            return [(d["namespace"], d["name"]) for d in found[f"sqlqueue_lineage.{task}"][side]]

        queue = (airflow_env.PG_NAMESPACE, f"{airflow_env.PG_CONNECTION['schema']}.{db.schema}.orders")
        parquet = ("file", str(output))
        assert datasets("send", "inputs") == [] and datasets("send", "outputs") == [queue]
        assert datasets("drain", "inputs") == [queue] and datasets("drain", "outputs") == [parquet]
        assert parquet in datasets("spark", "inputs")
        assert SECRET not in text and "postgres@" not in text


def test_operators_that_move_messages_between_tables_report_both_tables(
        airflow_db: None, tmp_path: Path) -> None:  # noqa: F811
    from airflow_sqlqueue.operators import (
        SqlQueueBatchRetryOperator,
        SqlQueuePartitionDrainOperator,
        SqlQueuePublishOperator,
        SqlQueueRetryErrorsOperator,
    )
    from airflow_sqlqueue.transport import OutgoingMessage
    from airflow_sqlqueue.transport.wire import headers as h

    path = tmp_path / "queues.db"
    conn = airflow_env.sqlite_connection("sqlqueue_lineage_moves", path)
    namespace = f"sqlite://{path.resolve()}"
    with SqlQueueTransport.from_url(f"sqlite:///{path}") as transport:
        transport.create_queues(["orders", "billing", "error"])
        transport.create_subscription_table()
        transport.subscribe("orders", ["Sales.OrderPlaced"])
        transport.subscribe("billing", ["Sales.OrderPlaced"])
        transport.send_many("error", [OutgoingMessage(b"x", {h.FAILED_Q: "billing"})] * 2
                            + [OutgoingMessage(b"y", {h.FAILED_Q: "orders"})])
        transport.send("orders", b"z")
        [partition] = transport.plan_partitions("orders", partitions=1, open_end=True)

    def found(op: object) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        lineage = op.get_openlineage_facets_on_complete(None)
        return [(d.namespace, d.name) for d in lineage.inputs], [(d.namespace, d.name) for d in lineage.outputs]

    publish = SqlQueuePublishOperator(task_id="publish", sqlqueue_conn_id=conn, event_type="Sales.OrderPlaced")
    publish.execute({})
    assert found(publish) == ([], [(namespace, "billing"), (namespace, "orders")])
    drain = SqlQueuePartitionDrainOperator(task_id="part", sqlqueue_conn_id=conn, queue_name="orders",
                                           partition=partition.as_dict(), output_path=str(tmp_path / "p"))
    assert len(drain.execute({})) == 1
    assert found(drain) == ([(namespace, "orders")], [("file", str(tmp_path / "p"))])
    batch = SqlQueueBatchRetryOperator(task_id="batch", sqlqueue_conn_id=conn, failed_q="billing",
                                       allowed_queues=["billing"])
    assert found(batch) == ([(namespace, "error")], [])  # before it ran: nothing returned yet
    batch.execute({})
    assert found(batch) == ([(namespace, "error")], [(namespace, "billing")])
    retry = SqlQueueRetryErrorsOperator(task_id="retry", sqlqueue_conn_id=conn, allowed_queues=["orders"])
    retry.execute({})
    assert found(retry) == ([(namespace, "error")], [(namespace, "orders")])
