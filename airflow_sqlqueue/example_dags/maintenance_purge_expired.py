"""Maintenance: purge expired messages from SQL queue tables on a schedule (see docs/maintenance.md)."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Param, task

from airflow_sqlqueue.maintenance import tasks
from airflow_sqlqueue.maintenance.params import label, target_params

DOC = """
### Purge expired SQL queue messages

Deletes messages whose time-to-be-received has passed, in batches (one short transaction each, by `seq`, so
receivers are never blocked for long), from every configured queue: one mapped task per `(connection, queue)`.

* **Configuration**: the Airflow Variable `sqlqueue_maintenance` (JSON), or the file named by the environment
  variable `SQLQUEUE_MAINTENANCE_CONFIG`. Without either, every queue discovered on the connection
  `sqlqueue_default` is purged. See `docs/maintenance.md` for the format.
* **Params**: `connections` and `queues` narrow the run down; `batch_size` overrides `purge_batch_size`;
  `config` replaces the configuration for one run, within the connections the deployment configures (a run's
  conf never adds a connection nor sets `alert_callback`).
* **Result**: each mapped task logs and returns its queue's count; `report` logs a table and returns
  `{conn_id: {queue: purged}}`.
* **Inbox**: `purge_inbox` deletes the rows of the inbox table (`handle_once`) older than
  `inbox_retention_days` (default 7; `null` keeps them) on every configured connection that has one.
* Deadlocks with receivers are logged as warnings and retried; the tasks retry twice more on other errors.
"""

with DAG(
    "sqlqueue_purge_expired",
    schedule="@hourly",
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["sqlqueue", "maintenance"],
    doc_md=DOC,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=1)},
    params={**target_params(),
            "batch_size": Param(None, type=["null", "integer"], minimum=1, title="Rows per DELETE",
                                description="Empty: purge_batch_size of the configuration (10000).")},
) as dag:

    @task
    def find_queues(params: dict | None = None) -> list[dict]:
        return tasks.find_targets(params)

    @task(multiple_outputs=False, map_index_template="{{ sqlqueue_target }}", max_active_tis_per_dagrun=4)
    def purge(target: dict, params: dict | None = None) -> dict:
        label(target)
        return tasks.purge_queue(target, params)

    @task(multiple_outputs=False)
    def report(results: list[dict]) -> dict:
        return tasks.purge_report(results)

    @task(multiple_outputs=False, trigger_rule="all_done")  # after the queues, whatever their purge did
    def purge_inbox(params: dict | None = None) -> dict:
        return tasks.purge_inboxes(params)

    report(purge.expand(target=find_queues())) >> purge_inbox()
