"""Test DAGs for the operators (run by tests/test_operators.py with ``dag.test()``).

Connection ids, the PostgreSQL schema and the output directory come from environment variables set by the
test before it parses this file.
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG, task

from airflow_sqlqueue.operators.sqlqueue import (
    SqlQueueCheckSchemaOperator,
    SqlQueueCreateQueuesOperator,
    SqlQueueDrainOperator,
    SqlQueuePurgeExpiredOperator,
    SqlQueueRetryErrorsOperator,
    SqlQueueSendOperator,
)

OUT = Path(os.environ.get("SQLQUEUE_TEST_OUT", "/tmp/sqlqueue-test-out"))
N_ORDERS = 40
N_AUDIT = 120


def flaky_handler(message, context) -> None:
    """Succeeds for ``ok-*`` bodies; ``value-*`` raise ValueError, ``key-*`` raise KeyError."""
    body = message.body_text()
    if body.startswith("value"):
        raise ValueError(f"cannot handle {body}")
    if body.startswith("key"):
        raise KeyError(body)


def drain_pipeline(conn: str, q, out: Path) -> None:
    """create -> send orders (from a task's output) -> drain to a list -> mapped task per message;
    send audit -> drain to Parquet."""

    @task
    def make_orders() -> list[dict]:
        return [{"body": json.dumps({"order": i}), "headers": {"NServiceBus.EnclosedMessageTypes": "Order"}}
                for i in range(N_ORDERS)]

    @task
    def make_audit() -> list[dict]:
        items: list[dict] = [{"body": f"audit-{i}", "headers": {"n": str(i)}} for i in range(N_AUDIT - 10)]
        items += [{"body_base64": base64.b64encode(bytes([255, 0, i])).decode(), "headers": {"n": f"b{i}"}}
                  for i in range(10)]
        return items

    @task
    def handle(message: dict) -> str:
        seen = out / "seen"
        seen.mkdir(parents=True, exist_ok=True)
        (seen / f"{message['id']}.{uuid.uuid4().hex}").write_text(message["body"])
        return message["id"]

    create = SqlQueueCreateQueuesOperator(task_id="create", sqlqueue_conn_id=conn,
                                          queues=[q("orders"), q("audit"), q("error")])
    send_orders = SqlQueueSendOperator(task_id="send_orders", sqlqueue_conn_id=conn, queue_name=q("orders"),
                                       messages=make_orders())
    # sizes from params through templates: numbers in a native-rendering DAG, text in the other (both work)
    drain_orders = SqlQueueDrainOperator(task_id="drain_orders", sqlqueue_conn_id="{{ params.conn }}",
                                         queue_name=q("orders"), max_messages="{{ params.drain_max }}",
                                         batch_size="{{ params.drain_batch }}",
                                         max_concurrency="{{ params.drain_concurrency }}", error_queue=q("error"))
    send_audit = SqlQueueSendOperator(task_id="send_audit", sqlqueue_conn_id=conn, queue_name=q("audit"),
                                      messages=make_audit())
    drain_audit = SqlQueueDrainOperator(task_id="drain_audit", sqlqueue_conn_id=conn, queue_name=q("audit"),
                                        output_path=str(out / "parquet"), max_messages=None, batch_size=25,
                                        max_concurrency=2, error_queue=q("error"))
    create >> send_orders >> drain_orders
    handle.expand(message=drain_orders.output)
    create >> send_audit >> drain_audit


DRAIN_PARAMS = {"drain_max": 1000, "drain_batch": 7, "drain_concurrency": 2}
CONN = os.environ.get("SQLQUEUE_TEST_CONN", "sqlqueue_test")
PG_CONN = os.environ.get("SQLQUEUE_TEST_PG_CONN", "sqlqueue_pg")

with DAG("sqlqueue_ops", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         render_template_as_native_obj=True, params={**DRAIN_PARAMS, "conn": CONN},
         doc_md="Every operator on a SQLite queue database.") as ops_dag:

    def plain(name: str) -> str:
        return name

    drain_pipeline(CONN, plain, OUT / "sqlqueue_ops")

    @task
    def make_flaky() -> list:
        return ([f"ok-{i}" for i in range(10)] + [{"body": f"value-{i}"} for i in range(3)]
                + [{"body": f"key-{i}", "headers": {"k": "v"}} for i in range(2)])

    create_more = SqlQueueCreateQueuesOperator(task_id="create_more", sqlqueue_conn_id=CONN,
                                               queues=["flaky", "expiring"], delayed=True)
    flaky_items = make_flaky()
    send_flaky = SqlQueueSendOperator(task_id="send_flaky", sqlqueue_conn_id=CONN, queue_name="flaky",
                                      messages="{{ ti.xcom_pull(task_ids='make_flaky') }}")
    drain_flaky = SqlQueueDrainOperator(task_id="drain_flaky", sqlqueue_conn_id=CONN, queue_name="flaky",
                                        handler=flaky_handler, immediate_retries=1, batch_size=4)
    retry = SqlQueueRetryErrorsOperator(task_id="retry_key_errors", sqlqueue_conn_id=CONN, failed_q="flaky",
                                        exception_type="KeyError", allowed_queues=["flaky"])
    send_expiring = SqlQueueSendOperator(task_id="send_expiring", sqlqueue_conn_id=CONN, queue_name="expiring",
                                         body="{{ run_id }}", headers={"h": "1"}, time_to_be_received=0.001)
    send_one = SqlQueueSendOperator(task_id="send_one", sqlqueue_conn_id=CONN, queue_name="expiring", body="stays")
    purge = SqlQueuePurgeExpiredOperator(task_id="purge", sqlqueue_conn_id=CONN, batch_size=2)
    check_warn = SqlQueueCheckSchemaOperator(task_id="check_warn", sqlqueue_conn_id=CONN, queues=["legacy"],
                                             fail_on_findings=False)
    check_repair = SqlQueueCheckSchemaOperator(task_id="check_repair", sqlqueue_conn_id=CONN, queues="legacy",
                                               repair=True)
    create_more >> flaky_items >> send_flaky >> drain_flaky >> retry
    create_more >> send_expiring >> send_one >> purge
    check_warn >> check_repair


with DAG("sqlqueue_drain_pg", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         params={**DRAIN_PARAMS, "conn": PG_CONN}, doc_md="The drain on PostgreSQL.") as pg_dag:
    PG_SCHEMA = os.environ.get("SQLQUEUE_TEST_PG_SCHEMA", "public")

    def in_schema(name: str) -> str:
        return f'"{PG_SCHEMA}"."{name}"'

    drain_pipeline(PG_CONN, in_schema, OUT / "sqlqueue_drain_pg")
