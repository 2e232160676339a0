"""Test DAGs for tests/test_spark_cluster.py: the job on a Spark standalone cluster, two ways.

* ``sqlqueue_spark_cluster``: the example drain-to-Spark DAG in its ``SparkSubmitOperator`` form (client deploy
  mode), on the Spark connection ``sqlqueue_spark_cluster`` (``spark://127.0.0.1:<port>``, set by the test).
* ``sqlqueue_spark_connect``: the same job on the batches the first one drained, through ``PySparkOperator`` and
  the ``spark_connect`` connection ``sqlqueue_spark_connect`` (a Spark Connect server whose executors run on the
  cluster).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.providers.apache.spark.operators.spark_pyspark import PySparkOperator
from airflow.sdk import DAG, Param

from airflow_sqlqueue.spark.example_dag import drain_to_spark_submit_dag

#: Two executors of one core each: the master spreads them over both workers. Few shuffle partitions: the
#: input is small, and 200 tasks per shuffle on 2 shared cores cost minutes.
CLUSTER_CONF = {"spark.executor.memory": "512m", "spark.executor.cores": "1", "spark.cores.max": "2",
                "spark.sql.shuffle.partitions": "4"}

dag = drain_to_spark_submit_dag("sqlqueue_spark_cluster", spark_conn_id="sqlqueue_spark_cluster",
                                spark_conf=CLUSTER_CONF)


def process(inputs: str, output: str, spark: Any = None) -> dict[str, Any]:
    """The job on a Spark Connect session (``spark`` is given by ``PySparkOperator``)."""
    from airflow_sqlqueue.spark.job import run

    return run(spark, inputs, output, dataset=True)


with DAG("sqlqueue_spark_connect", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         params={"batches": Param("/tmp/batches", type="string"), "output": Param("/tmp/out", type="string")},
         tags=["sqlqueue", "test", "spark"]) as connect_dag:
    PySparkOperator(task_id="spark", conn_id="sqlqueue_spark_connect", python_callable=process,
                    op_kwargs={"inputs": "{{ params.batches }}", "output": "{{ params.output }}"})
