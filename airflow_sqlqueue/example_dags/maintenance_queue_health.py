"""Maintenance: depth and age of the oldest message per SQL queue, with thresholds (see docs/maintenance.md)."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Param, task

from airflow_sqlqueue.maintenance import tasks
from airflow_sqlqueue.maintenance.params import label, target_params

DOC = """
### SQL queue health

Every 10 minutes, one mapped task per `(connection, queue)` measures the **depth** (the cheap `peek`
estimate) and the **age of the oldest message** (from its `NServiceBus.TimeSent` header). `report` logs all
of them as a table and, when a queue crosses a threshold, calls the configured `alert_callback` and fails
(so any failure notification of your deployment fires too). With `on_breach=warn` it only logs a warning.

* **Thresholds**: `thresholds` at the top of the configuration, per connection, or per queue (`"queues":
  {"orders": {"max_depth": 100}}`); the params `max_depth` and `max_age_seconds` override them for one run.
* **Alerting**: `"alert_callback": "package.module.attribute"` in the deployment's configuration (the Variable or
  the file; a run's `config` param cannot set it: a run's conf never chooses code): a function or an Airflow
  notifier instance called with the task context plus `sqlqueue_breaches` (the samples that crossed).
* **History** (optional): `"record_health_samples": true` appends one row per queue and run,
  `(conn_id, queue_name, sampled_at, depth, oldest_age_seconds)`, to the table `sqlqueue_health_samples`
  (`health_samples_table`) in the queue's database, or in the one of `health_samples_conn_id`; rows older
  than `health_samples_retention_days` (default 30) are deleted on each run.
* **Metrics** (StatsD or OpenTelemetry, as `[metrics]` says): depth, oldest age, error-queue size, and the
  throughput (messages sent per minute since the previous run; positions kept in the Variable
  `sqlqueue_health_positions`). See docs/metrics.md.
* **Configuration**: the Variable `sqlqueue_maintenance` or `$SQLQUEUE_MAINTENANCE_CONFIG` (docs/maintenance.md).
"""

with DAG(
    "sqlqueue_queue_health",
    schedule=timedelta(minutes=10),
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["sqlqueue", "maintenance"],
    doc_md=DOC,
    default_args={"retries": 1, "retry_delay": timedelta(minutes=1), "execution_timeout": timedelta(minutes=5)},
    params={**target_params(),
            "max_depth": Param(None, type=["null", "integer"], minimum=0, title="Max depth",
                               description="Override every queue's depth threshold for this run."),
            "max_age_seconds": Param(None, type=["null", "number"], minimum=0, title="Max age (s)",
                                     description="Override every queue's oldest-message age threshold."),
            "on_breach": Param("fail", enum=["fail", "warn"], title="On breach",
                               description="fail: the report task fails (after the alert); warn: log only.")},
) as dag:

    @task
    def find_queues(params: dict | None = None) -> list[dict]:
        return tasks.find_targets(params)

    @task(multiple_outputs=False, map_index_template="{{ sqlqueue_target }}", max_active_tis_per_dagrun=8)
    def sample(target: dict) -> dict:
        label(target)
        return tasks.sample_queue(target)

    @task(retries=0)
    def report(samples: list[dict], params: dict | None = None, **context) -> list[dict]:
        return tasks.health_report(samples, params, context)

    report(sample.expand(target=find_queues()))
