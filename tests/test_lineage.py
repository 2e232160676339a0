"""OpenLineage datasets of the drain and send operators, built with the OpenLineage provider's own classes."""

from __future__ import annotations  # noqa: I001  (tests.airflow_env must be imported before airflow)

import tests.airflow_env as airflow_env
from tests.airflow_env import airflow_db  # noqa: F401  (fixture)

from pathlib import Path

import pytest

from airflow_sqlqueue.lineage import path_dataset
from airflow_sqlqueue.operators import SqlQueueDrainOperator, SqlQueueSendOperator
from airflow_sqlqueue.transport import SqlQueueTransport

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
    assert [(d.namespace, d.name) for d in found.outputs] == [("postgres://127.0.0.1:5432", "test.sales.orders")]
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
