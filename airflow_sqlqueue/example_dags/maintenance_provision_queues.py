"""Maintenance: create SQL queue tables named by the params of a manual run (see docs/maintenance.md)."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Param, task

from airflow_sqlqueue.maintenance import tasks

DOC = """
### Provision SQL queues

Trigger this DAG by hand ("Trigger DAG" with params) to create queue tables:

* `conn_id`: the Airflow connection (`mssql`, `odbc`, `postgres` or `sqlite`) of the database; one of the
  connections of the maintenance configuration (Variable `sqlqueue_maintenance` or `$SQLQUEUE_MAINTENANCE_CONFIG`;
  without either, `sqlqueue_default`): a run's conf cannot point the DAG at another connection.
* `queues`: queue addresses to create (`orders`, `orders@sales`, `"sales"."orders"`, per dialect).
* `delayed_queues`: endpoints that also get their `<queue>.Delayed` table (delayed delivery).
* `dry_run`: only log the DDL script for review.

Creation is idempotent and safe while other creators run. The task log shows the DDL (the named statements of
the dialect's SQL file), which tables it created and which existed already, and any finding on them; the XCom
has `ready` (every queue now usable), `created` (new tables), `existed` (there before) and `findings`.
"""

with DAG(
    "sqlqueue_provision_queues",
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    tags=["sqlqueue", "maintenance"],
    doc_md=DOC,
    params={
        "conn_id": Param("sqlqueue_default", type="string", minLength=1, title="Connection id"),
        "queues": Param([], type="array", items={"type": "string"}, title="Queues",
                        description="Queue tables to create."),
        "delayed_queues": Param([], type="array", items={"type": "string"}, title="Queues with a delayed table",
                                description="Queues to create with their .Delayed table."),
        "dry_run": Param(False, type="boolean", title="Dry run", description="Only log the DDL."),
    },
) as dag:

    @task(multiple_outputs=False)
    def provision(params: dict | None = None) -> dict:
        return tasks.provision(params or {})

    provision()
