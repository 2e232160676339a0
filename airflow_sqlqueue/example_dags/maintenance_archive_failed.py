"""Maintenance: archive failed messages older than a cut-off to Parquet, then delete them (see docs/maintenance.md)."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Param, task

from airflow_sqlqueue.maintenance import archive_tasks
from airflow_sqlqueue.maintenance.params import label, target_params

DOC = """
### Archive failed SQL queue messages

Moves the failed messages of each configured connection's error queue that failed longer ago than
`archive.older_than_days` to Parquet files with a JSON manifest at `archive.location`, then deletes exactly those
rows: one mapped task per connection. Files are written, fsync'ed and read back before any row is deleted; a run
interrupted between writing and deleting is finished by the next run. Archives are browsed and restored on the SQL
Queues page or with `sqlqueue archives`.

* **Configuration**: the `archive` key of the Variable `sqlqueue_maintenance` (or the file named by
  `SQLQUEUE_MAINTENANCE_CONFIG`): `location`, `older_than_days`, `batch_size`, `max_messages`. A run's conf cannot
  set it (it chooses where data goes).
* **Params** may only narrow: `connections`, a larger `older_than_days`, a smaller `max_messages`, one group
  (`failed_q`, `exception_type`, `message_type`).
* A message whose `NServiceBus.TimeOfFailure` cannot be read is never older than the cut-off: it stays.
"""

with DAG(
    "sqlqueue_archive_failed",
    schedule="@daily",
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["sqlqueue", "maintenance"],
    doc_md=DOC,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=5)},
    params={**{k: v for k, v in target_params().items() if k != "queues"},
            "older_than_days": Param(None, type=["null", "number"], minimum=0, title="Older than (days)",
                                     description="Empty: archive.older_than_days of the configuration; a run may "
                                                 "only ask for older messages."),
            "max_messages": Param(None, type=["null", "integer"], minimum=1, title="At most this many messages"),
            "failed_q": Param(None, type=["null", "string"], title="Only messages that failed in this queue"),
            "exception_type": Param(None, type=["null", "string"], title="Only this exception type"),
            "message_type": Param(None, type=["null", "string"], title="Only this message type")},
) as dag:

    @task
    def find_error_queues(params: dict | None = None) -> list[dict]:
        return archive_tasks.archive_targets(params)

    @task(multiple_outputs=False, map_index_template="{{ sqlqueue_target }}", max_active_tis_per_dagrun=2)
    def archive(target: dict, params: dict | None = None) -> dict:
        label(target)
        return archive_tasks.archive_error_queue(target, params)

    @task(multiple_outputs=False)
    def report(results: list[dict]) -> list[dict]:
        return archive_tasks.archive_report(results)

    report(archive.expand(target=find_error_queues()))
