"""Lineage test DAG: send to a queue -> drain it to Parquet -> a Spark step reading the Parquet files.

Run by tests/test_lineage.py with the OpenLineage provider writing its events to a file. The connection, the
queue and the output folder come from the environment the test sets (defaults keep the file importable). The
Spark step stands in for the project's Spark job (it reads the same Parquet files with pyarrow, which is much
lighter than starting Spark) and declares the same input a Spark task would: ``inlets=[parquet_asset(...)]``.
"""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG, task

from airflow_sqlqueue.lineage import parquet_asset
from airflow_sqlqueue.operators import SqlQueueDrainOperator, SqlQueueSendOperator

CONN_ID = os.environ.get("SQLQUEUE_LINEAGE_CONN_ID", "sqlqueue_lineage_dag")
QUEUE = os.environ.get("SQLQUEUE_LINEAGE_QUEUE", "orders")
OUTPUT = os.environ.get("SQLQUEUE_LINEAGE_OUTPUT", "/tmp/sqlqueue-lineage")  # noqa: S108 - a default only

with DAG("sqlqueue_lineage", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         tags=["sqlqueue", "test"]) as dag:
    send = SqlQueueSendOperator(task_id="send", sqlqueue_conn_id=CONN_ID, queue_name=QUEUE,
                                messages=[{"body": f'{{"n": {i}}}'} for i in range(5)])
    drain = SqlQueueDrainOperator(task_id="drain", sqlqueue_conn_id=CONN_ID, queue_name=QUEUE, output_path=OUTPUT,
                                  max_messages=100)

    @task(inlets=[parquet_asset(OUTPUT)])
    def spark(files: list[str]) -> int:
        import pyarrow.parquet as pq

        return sum(pq.read_metadata(f).num_rows for f in files)

    send >> drain
    spark(drain.output)
