"""Error queue: list failed messages by source queue and exception, return the selected ones (docs/maintenance.md)."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Param, task

from airflow_sqlqueue.maintenance import tasks
from airflow_sqlqueue.maintenance.params import label

DOC = """
### Error queue: inspect and retry

`list_failed` groups the messages of the error queue by `NServiceBus.FailedQ` (the queue they failed in) and
`NServiceBus.ExceptionInfo.ExceptionType`, and logs a table with counts, first and last failure time and an
example exception message. Trigger with `retry=true` to return the selected messages to their source queue
(same native Id and body, failure headers removed), each batch in one transaction; otherwise
`return_selected` is skipped.

* **Selection params**: `failed_q` (one source queue), `exception_type` (full name or class name),
  `message_ids` (native Ids or `NServiceBus.MessageId`s), `max_messages`. None given: every message.
* **Where**: `conn_id` and `error_queue`; empty: every connection of the maintenance configuration (Variable
  `sqlqueue_maintenance` or `$SQLQUEUE_MAINTENANCE_CONFIG`) with its `error_queue` (default `error`). `conn_id`
  must be one of those connections: a run's conf cannot point the DAG at another one.
* Messages whose source queue does not exist, or that have no `FailedQ`, stay and are listed with the reason.
"""

with DAG(
    "sqlqueue_error_queue",
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    tags=["sqlqueue", "maintenance"],
    doc_md=DOC,
    params={
        "config": Param(None, type=["null", "object"], title="Configuration override"),
        "conn_id": Param(None, type=["null", "string"], title="Connection id"),
        "error_queue": Param(None, type=["null", "string"], title="Error queue"),
        "retry": Param(False, type="boolean", title="Return the selected messages",
                       description="false: list only."),
        "failed_q": Param(None, type=["null", "string"], title="Only messages that failed in this queue"),
        "exception_type": Param(None, type=["null", "string"], title="Only this exception type"),
        "message_ids": Param([], type="array", items={"type": "string"}, title="Only these message ids"),
        "max_messages": Param(None, type=["null", "integer"], minimum=1, title="At most this many"),
    },
) as dag:

    @task
    def find_error_queues(params: dict | None = None) -> list[dict]:
        return tasks.error_queues(params)

    @task(multiple_outputs=False, map_index_template="{{ sqlqueue_target }}")
    def list_failed(target: dict) -> dict:
        label(target)
        return tasks.list_failed(target)

    @task(multiple_outputs=False, map_index_template="{{ sqlqueue_target }}")
    def return_selected(target: dict, params: dict | None = None) -> dict:
        label(target)
        return tasks.return_failed(target, params)

    targets = find_error_queues()
    list_failed.expand(target=targets) >> return_selected.expand(target=targets)
