"""Example: wait for messages, drain them to a list, process each in a mapped task."""

from __future__ import annotations

import json
import logging
import os
from datetime import datetime

from airflow.sdk import DAG, Param, task

from airflow_sqlqueue.operators.sqlqueue import SqlQueueDrainOperator, message_from_dict
from airflow_sqlqueue.sensors.sqlqueue import SqlQueueSensor

log = logging.getLogger(__name__)
CONN_ID = os.environ.get("SQLQUEUE_EXAMPLE_CONN_ID", "sqlqueue_default")

DOC = """
### Sensor -> drain -> one mapped task per message

1. `wait` (`SqlQueueSensor`, deferrable: no worker slot while waiting) succeeds once the queue holds
   `min_messages` messages. It peeks every 5 s, backing off to every 20 s while the queue stays empty: a message
   on an idle queue can wait up to 20 s, unless the queue wakes it (PostgreSQL with `sqlqueue create QUEUE
   --notify`; SQLite: at once). See docs/sensor.md.
2. `drain` (`SqlQueueDrainOperator`) receives up to `max_messages` with two receivers at once. Each batch is
   stored in the task state store *before* its receive transaction commits, so a crash loses nothing.
3. `process` runs once per message (`.expand()`); it must be idempotent (a message can come twice after a
   crash, always with the same `id`).

**Configure**: the connection id from the environment variable `SQLQUEUE_EXAMPLE_CONN_ID` (default
`sqlqueue_default`, any `mssql`, `odbc`, `postgres` or `sqlite` connection); the params `queue` and
`min_messages` per run ("Trigger DAG" with params). Unpausing starts nothing: trigger a run. To run it on a
schedule, give it one and keep the sensor's `timeout` shorter than the interval (a run waiting on an empty queue
then ends instead of holding the next runs back). Copy this file and replace `process` with your work.
"""

with DAG(
    "example_sqlqueue_sensor_drain_mapped",
    schedule=None,  # runs when you trigger it: unpausing does not drain the queue behind your back
    start_date=datetime(2024, 1, 1),
    catchup=False,
    tags=["sqlqueue", "example"],
    doc_md=DOC,
    params={"queue": Param(os.environ.get("SQLQUEUE_EXAMPLE_QUEUE", "orders"), type="string", minLength=1),
            "min_messages": Param(1, type="integer", minimum=1)},
) as dag:
    wait = SqlQueueSensor(task_id="wait", sqlqueue_conn_id=CONN_ID, queue_name="{{ params.queue }}",
                          min_messages="{{ params.min_messages }}", deferrable=True, poll_interval=5,
                          timeout=3600)
    drain = SqlQueueDrainOperator(task_id="drain", sqlqueue_conn_id=CONN_ID, queue_name="{{ params.queue }}",
                                  max_messages=500, batch_size=50, max_concurrency=2)

    @task(multiple_outputs=False, map_index_template="{{ message_id }}")
    def process(item: dict) -> dict:
        from airflow.sdk import get_current_context

        message = message_from_dict(item)
        get_current_context()["message_id"] = str(message.id)  # type: ignore[typeddict-unknown-key]
        kind = message.headers.get("NServiceBus.EnclosedMessageTypes", "unknown")
        try:
            payload = json.loads(message.body or b"null")
        except ValueError:
            payload = None
        # ids, types and sizes at INFO; a body may hold personal data: only at DEBUG
        log.info("message %s of type %s (%d bytes)", message.id, kind, len(message.body or b""))
        log.debug("message %s body: %r", message.id, payload)
        return {"id": str(message.id), "type": kind}

    wait >> drain
    process.expand(item=drain.output)
