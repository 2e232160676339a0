"""Test DAG: the Spark job through ``SparkSubmitOperator`` (run by tests/test_spark.py with ``dag.test()``).

The Spark connection ``sqlqueue_spark_test`` is set by the test (``{"conn_type": "spark", "host": "local[2]"}``);
the input and output folders come from the run's conf.
"""

from __future__ import annotations

from datetime import datetime

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG

from airflow_sqlqueue.spark.submit import spark_submit_arguments

with DAG("sqlqueue_spark_submit", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         doc_md="Submit the drained-messages Spark job with spark-submit.") as dag:
    SparkSubmitOperator(task_id="spark", **spark_submit_arguments(
        "{{ dag_run.conf['input'] }}", "{{ dag_run.conf['output'] }}", conn_id="sqlqueue_spark_test",
        conf={"spark.sql.shuffle.partitions": "2"}))
