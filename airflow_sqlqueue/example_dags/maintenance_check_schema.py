"""Maintenance: schema and index check of SQL queue tables, with optional repair (see docs/maintenance.md)."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Param, task

from airflow_sqlqueue.maintenance import tasks
from airflow_sqlqueue.maintenance.params import label, target_params

DOC = """
### Check (and repair) SQL queue tables

One mapped task per `(connection, queue)` inspects the table and reports findings:

| code | meaning | repair |
|---|---|---|
| `missing_seq_index` | no `Index_RowVersion` / seq index: every receive scans the table | creates it |
| `clustered_seq_index` | SQL Server: `Index_RowVersion` is clustered (older tables) | makes it nonclustered |
| `missing_expires_index` | no `Index_Expires`: purging expired messages scans the table | creates it |
| `varchar_headers` | headers are `varchar`, not `nvarchar` / `text` | needs a person |
| `wrong_column_type`, `missing_column` | not the NServiceBus table shape | needs a person |
| `heap_bloat` | SQL Server: heap pages far above the rows it holds | `ALTER TABLE ... REBUILD` |
| `dead_tuples` | PostgreSQL: dead tuples outnumber live ones | `VACUUM` |
| `missing_queue` | a configured queue has no table | create it with `sqlqueue_provision_queues` |

* **Params**: `repair` (default off) runs the repairs (needs DDL rights) and checks again; `fail_on_findings`
  (default on) fails the `report` task while findings remain; `connections`, `queues`, `config` choose the queues.
* **Configuration**: the Variable `sqlqueue_maintenance` or `$SQLQUEUE_MAINTENANCE_CONFIG` (docs/maintenance.md).
* **Result**: findings as a plain-text table in the task logs; `report` returns them with a `status`
  (`repaired` or `open`).
"""

with DAG(
    "sqlqueue_check_schema",
    schedule="@daily",
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["sqlqueue", "maintenance"],
    doc_md=DOC,
    default_args={"retries": 1, "retry_delay": timedelta(minutes=5)},
    params={**target_params(),
            "repair": Param(False, type="boolean", title="Repair",
                            description="Create missing indexes, make a clustered RowVersion index nonclustered, "
                                        "rebuild a bloated heap (SQL Server) or VACUUM (PostgreSQL)."),
            "fail_on_findings": Param(True, type="boolean", title="Fail on findings",
                                      description="Fail the report task while findings remain.")},
) as dag:

    @task
    def find_queues(params: dict | None = None) -> list[dict]:
        return tasks.find_targets(params)

    @task(multiple_outputs=False, map_index_template="{{ sqlqueue_target }}", max_active_tis_per_dagrun=4)
    def check(target: dict, params: dict | None = None) -> dict:
        label(target)
        return tasks.check_queue(target, params)

    @task(retries=0)
    def report(results: list[dict], params: dict | None = None) -> list[dict]:
        return tasks.check_report(results, params)

    report(check.expand(target=find_queues()))
