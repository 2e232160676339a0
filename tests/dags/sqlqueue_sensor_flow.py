"""Test DAGs: sensor -> drain to a list -> one mapped task per message (run by tests/test_dag_flow.py).

``sqlqueue_sensor_flow_poke`` waits in poke mode (in the worker), ``sqlqueue_sensor_flow_deferrable`` hands the
wait to ``SqlQueueTrigger`` (``dag.test()`` runs the trigger in process). The connection id is fixed; the test
points ``AIRFLOW_CONN_SQLQUEUE_FLOW`` at its own SQLite file. The mapped task records each message it saw as a
file under ``$SQLQUEUE_FLOW_OUT/<dag_id>/seen`` (read when the task runs, not when the file is parsed).
"""

from __future__ import annotations

import os
import uuid
from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG, task

from airflow_sqlqueue.operators.sqlqueue import SqlQueueDrainOperator, message_from_dict
from airflow_sqlqueue.sensors.sqlqueue import SqlQueueSensor

CONN_ID = "sqlqueue_flow"
QUEUE = "flow_orders"
MIN_MESSAGES = 12


def flow(dag_id: str, *, deferrable: bool) -> DAG:
    with DAG(dag_id, schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
             doc_md="Wait for a queue to fill, drain it to a list, handle each message in a mapped task.") as dag:
        wait = SqlQueueSensor(task_id="wait", sqlqueue_conn_id=CONN_ID, queue_name=QUEUE,
                              min_messages=MIN_MESSAGES, deferrable=deferrable, poll_interval=0.2, timeout=120)
        drain = SqlQueueDrainOperator(task_id="drain", sqlqueue_conn_id=CONN_ID, queue_name=QUEUE,
                                      max_messages=100, batch_size=5, max_concurrency=2)

        @task
        def handle(item: dict) -> str:
            message = message_from_dict(item)
            seen = Path(os.environ["SQLQUEUE_FLOW_OUT"]) / dag_id / "seen"
            seen.mkdir(parents=True, exist_ok=True)
            (seen / f"{message.id}.{uuid.uuid4().hex}").write_bytes(message.body or b"")
            return str(message.id)

        wait >> drain
        handle.expand(item=drain.output)
    return dag


poke_dag = flow("sqlqueue_sensor_flow_poke", deferrable=False)
deferrable_dag = flow("sqlqueue_sensor_flow_deferrable", deferrable=True)
