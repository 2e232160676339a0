"""Test DAG: a partitioned drain (run by tests/test_partition_drain.py with ``dag.test()``).

``plan`` splits the queue's backlog into ``partitions`` ranges; ``drain`` is mapped over them, each task draining
its range into Parquet files under ``output`` (retried once at once: the crash test fails one try on purpose).
Queue, connection and folders come from the run's conf.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Param

from airflow_sqlqueue.operators import SqlQueuePartitionDrainOperator, SqlQueuePlanPartitionsOperator

with DAG("sqlqueue_partition_drain", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         params={"conn_id": Param("sqlqueue_default", type="string"), "queue": Param("audit", type="string"),
                 "error_queue": Param("error", type="string"), "output": Param("/tmp/out", type="string"),
                 "partitions": Param(3, type="integer")},
         tags=["sqlqueue", "test"]) as dag:
    plan = SqlQueuePlanPartitionsOperator(
        task_id="plan", sqlqueue_conn_id="{{ params.conn_id }}", queue_name="{{ params.queue }}",
        error_queue="{{ params.error_queue }}", partitions="{{ params.partitions }}")
    SqlQueuePartitionDrainOperator.partial(
        task_id="drain", sqlqueue_conn_id="{{ params.conn_id }}", queue_name="{{ params.queue }}",
        error_queue="{{ params.error_queue }}", output_path="{{ params.output }}", batch_size=25,
        max_concurrency=2, retries=1, retry_delay=timedelta(0),
    ).expand(partition=plan.output)
