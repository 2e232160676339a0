"""Example: drain a queue with a handler run per message inside the receive transaction."""

from __future__ import annotations

import json
import os
from datetime import datetime

from airflow.sdk import DAG, Param, get_current_context

from airflow_sqlqueue.operators.sqlqueue import SqlQueueDrainOperator
from airflow_sqlqueue.transport import OutgoingMessage

CONN_ID = os.environ.get("SQLQUEUE_EXAMPLE_CONN_ID", "sqlqueue_default")

DOC = """
### Drain with a handler

`SqlQueueDrainOperator(handler=...)` calls `handle_order(message, context)` for each message inside its
receive transaction (`sends-atomic-with-receive`): messages the handler sends with `context.send(...)` are
written only if it succeeds. A handler that raises is retried `immediate_retries` times, then the message goes
to the error queue with the standard NServiceBus failure headers (inspect and return it with the DAG
`sqlqueue_error_queue`). The XCom is the summary: received (messages), deliveries (counting retries),
succeeded, failed, retries, expired, poison.

**Configure**: the connection id from the environment variable `SQLQUEUE_EXAMPLE_CONN_ID` (default
`sqlqueue_default`); the params `queue` (default `orders`, or `$SQLQUEUE_EXAMPLE_QUEUE`) and `replies_queue`
(default `replies`) per run ("Trigger DAG" with params; unpausing starts nothing). Copy this file and put your
work in `handle_order`.
"""


def handle_order(message, context) -> None:
    """Parse the order, and confirm it on the replies queue (sent only if this handler succeeds)."""
    order = json.loads(message.body or b"{}")
    if "order_id" not in order:
        raise ValueError(f"message {message.id} has no order_id")  # -> retries, then the error queue
    replies = get_current_context()["params"]["replies_queue"]
    reply = OutgoingMessage(json.dumps({"order_id": order["order_id"], "status": "accepted"}),
                            headers={"NServiceBus.EnclosedMessageTypes": "OrderAccepted",
                                     "NServiceBus.CorrelationId": message.message_id})
    context.send(replies, reply)


with DAG(
    "example_sqlqueue_drain_with_handler",
    schedule=None,  # runs when you trigger it: unpausing does not drain the queue behind your back
    start_date=datetime(2024, 1, 1),
    catchup=False,
    tags=["sqlqueue", "example"],
    doc_md=DOC,
    params={"queue": Param(os.environ.get("SQLQUEUE_EXAMPLE_QUEUE", "orders"), type="string", minLength=1),
            "replies_queue": Param("replies", type="string", minLength=1)},
) as dag:
    SqlQueueDrainOperator(task_id="drain", sqlqueue_conn_id=CONN_ID, queue_name="{{ params.queue }}",
                          handler=handle_order, max_messages=10_000, max_duration=240, batch_size=50,
                          max_concurrency=2, immediate_retries=3)
