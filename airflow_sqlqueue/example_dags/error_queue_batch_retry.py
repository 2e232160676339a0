"""Error queue: retry failed messages in controlled batches, as the SQL Queues page asks (docs/operators.md)."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Param, get_current_context, task

DOC = """
### Error queue: retry in controlled batches

Started from the **SQL Queues** page (Retry in batches) or by hand. Returns failed messages of the error queue of
`conn_id` to the queue they failed in, one transaction per batch, at most `rate_per_second` messages per second,
starting with batches of `ramp_start` doubled up to `batch_size`. `redirects` sends retries for queue A to queue B.

* **Selection**: `positions` (`[{"seq": n, "id": "..."}]`, as the page lists them), or the group filters
  `failed_q`, `exception_type`, `message_type`, and `missing` (fields a message must not have: the page's
  "(none)" group; no filter at all: every message), at most `max_messages`.
* **Where**: `conn_id` must be a connection of the maintenance configuration; messages go only to its configured
  queues (redirect targets too). A run's conf never chooses code or connections.
* **Progress and audit**: one row per batch in `sqlqueue_retry_progress` beside the health samples (who started
  the run, when, batch, returned per queue, left with reasons); the page shows it. **Cancel** on the page stops
  the run before its next batch and fails the task with "cancelled".
"""

with DAG(
    "sqlqueue_error_queue_batch_retry",
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    tags=["sqlqueue", "maintenance"],
    doc_md=DOC,
    max_active_runs=4,
    params={
        "conn_id": Param("sqlqueue_default", type="string", minLength=1, title="Connection id"),
        "failed_q": Param(None, type=["null", "string"], title="Only messages that failed in this queue"),
        "exception_type": Param(None, type=["null", "string"], title="Only this exception type"),
        "message_type": Param(None, type=["null", "string"], title="Only this message type"),
        "missing": Param([], type="array", items={"type": "string", "enum": ["failed_q", "exception_type",
                                                                              "message_type"]},
                         title="Only messages without these fields",
                         description='e.g. ["exception_type"]: the "(none)" group of the SQL Queues page'),
        "positions": Param([], type="array", items={"type": "object"}, title="Only these positions",
                           description='[{"seq": n, "id": "..."}] as the SQL Queues page lists them'),
        "batch_size": Param(500, type="integer", minimum=1, maximum=10_000, title="Batch size"),
        "ramp_start": Param(None, type=["null", "integer"], minimum=1, maximum=10_000, title="First batch size"),
        "rate_per_second": Param(None, type=["null", "number"], exclusiveMinimum=0, title="Messages per second"),
        "max_messages": Param(None, type=["null", "integer"], minimum=1, title="At most this many"),
        "redirects": Param({}, type="object", additionalProperties={"type": "string"},
                           title="Redirects", description='{"queue A": "queue B"}: retries for A go to B'),
    },
) as dag:

    @task(retries=2, multiple_outputs=False)
    def retry(params: dict | None = None) -> dict:
        from airflow_sqlqueue.maintenance import retry_batches

        run = get_current_context()["dag_run"]
        return retry_batches.run(params, run.run_id, getattr(run, "triggering_user_name", None))

    retry()
