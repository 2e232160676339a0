"""Deployment test DAG: mapped drain tasks compete on one queue, each writing Parquet batches."""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_sqlqueue.operators.sqlqueue import SqlQueueDrainOperator

QUEUE = os.environ["SQLQUEUE_DEPLOY_DRAIN_QUEUE"]
OUT = os.environ["SQLQUEUE_DEPLOY_DRAIN_OUT"]
PARTS = int(os.environ.get("SQLQUEUE_DEPLOY_DRAIN_TASKS", "4"))

with DAG("deploy_drain", schedule=None, start_date=datetime(2024, 1, 1), catchup=False, max_active_tasks=8):
    SqlQueueDrainOperator.partial(
        task_id="drain", sqlqueue_conn_id="sqlqueue_default", queue_name=QUEUE, max_messages=None,
        output_path=OUT + "/{{ run_id }}", batch_size=250, retries=3, retry_delay=timedelta(seconds=1),
    ).expand(max_concurrency=[2] * PARTS)  # PARTS tasks compete on the queue, two receivers each
