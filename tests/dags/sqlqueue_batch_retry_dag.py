"""A batched retry as a task (tests/test_batch_retry.py): orders' failures go to orders_v2, 1,000 a second."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_sqlqueue.operators import SqlQueueBatchRetryOperator

with DAG("sqlqueue_batch_retry", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):
    SqlQueueBatchRetryOperator(task_id="retry", sqlqueue_conn_id="sqlqueue_batch", batch_size=400, ramp_start=50,
                               rate_per_second=1000, redirects={"orders": "orders_v2"},
                               allowed_queues=["orders_v2", "billing"])
