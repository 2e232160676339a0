"""Example: sensor -> drain to Parquet (bounded concurrency) -> Spark job -> summary.

Two DAGs, configured by their params (connection id, queue, output folder, max messages, concurrency, ...):

* ``example_sqlqueue_drain_to_spark`` runs the Spark job inside the worker (``local[*]`` by default; the worker
  needs ``pip install 'airflow-provider-sqlqueue[spark,parquet]'``);
* ``example_sqlqueue_drain_to_spark_submit`` sends the same job to a cluster with ``SparkSubmitOperator``
  (Spark connection ``$SQLQUEUE_SPARK_CONN_ID``, default ``spark_default``). It is defined only where the Spark
  provider (``apache-airflow-providers-apache-spark``) is installed: without it this file defines the first DAG
  alone.

The tasks and wiring live in ``airflow_sqlqueue/spark/example_dag.py`` (read it: it is short), so that
``sqlqueue demo`` runs the very same DAG from an installed package. See docs/spark.md.
"""

from __future__ import annotations

from airflow_sqlqueue.spark.example_dag import drain_to_spark_dag, drain_to_spark_submit_dag

dag = drain_to_spark_dag()

try:
    import airflow.providers.apache.spark.operators.spark_submit  # noqa: F401
except ImportError:
    pass  # no Spark provider: no submit DAG (see the docstring)
else:
    submit_dag = drain_to_spark_submit_dag()
