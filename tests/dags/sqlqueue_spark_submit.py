"""Test DAG: the example drain-to-Spark DAG in its ``SparkSubmitOperator`` form (run by tests/test_spark.py).

Built by the same factory as ``example_dags/example_drain_to_spark.py``; the Spark connection ``sqlqueue_spark_test`` is
set by the test (``{"conn_type": "spark", "host": "local[2]"}``), the queue connection and folders come from the
run's conf.
"""

from __future__ import annotations

from airflow_sqlqueue.spark.example_dag import drain_to_spark_submit_dag

dag = drain_to_spark_submit_dag("sqlqueue_spark_submit", spark_conn_id="sqlqueue_spark_test")
