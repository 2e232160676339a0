"""Example: send a message to an NServiceBus endpoint when a pipeline finishes."""

from __future__ import annotations

import json
import os
from datetime import datetime

from airflow.sdk import DAG, Param, task

from airflow_sqlqueue.operators.sqlqueue import SqlQueueSendOperator

CONN_ID = os.environ.get("SQLQUEUE_EXAMPLE_CONN_ID", "sqlqueue_default")

DOC = """
### Send a message when the pipeline finishes

`extract` and `transform` stand for your pipeline. `notify` (`SqlQueueSendOperator`) sends one message to the
endpoint's queue when they succeeded: the body is the pipeline's summary as JSON, the headers name the message
type so that an NServiceBus endpoint dispatches it to its handler (`NServiceBus.EnclosedMessageTypes`). The
message expires after a day if nobody receives it. The XCom is the native Id of the message sent.

**Configure**: `SQLQUEUE_EXAMPLE_CONN_ID` (default `sqlqueue_default`); params `endpoint_queue` and
`message_type`.
"""

with DAG(
    "example_sqlqueue_send_on_finish",
    schedule="@daily",
    start_date=datetime(2024, 1, 1),
    catchup=False,
    tags=["sqlqueue", "example"],
    doc_md=DOC,
    params={"endpoint_queue": Param(os.environ.get("SQLQUEUE_EXAMPLE_ENDPOINT", "Sales"), type="string",
                                    minLength=1),
            "message_type": Param("Reports.DailySalesReady, Reports.Messages", type="string")},
) as dag:

    @task
    def extract() -> list[int]:
        return [3, 5, 8]

    @task
    def transform(rows: list[int], **context) -> str:
        return json.dumps({"date": context["ds"], "rows": len(rows), "total": sum(rows)})

    summary = transform(extract())
    SqlQueueSendOperator(
        task_id="notify",
        sqlqueue_conn_id=CONN_ID,
        queue_name="{{ params.endpoint_queue }}",
        body=summary,
        headers={"NServiceBus.EnclosedMessageTypes": "{{ params.message_type }}",
                 "NServiceBus.ContentType": "application/json",
                 "NServiceBus.MessageIntent": "Send",
                 "NServiceBus.OriginatingEndpoint": "airflow.{{ dag.dag_id }}"},
        time_to_be_received=86_400,
    )
