"""PySpark processing of drained messages: Parquet batches from ``SqlQueueDrainOperator`` to typed, deduplicated,
partitioned messages and a summary.

* ``columns``: the input schema and the column expressions (headers, times, bodies), Spark built-ins only.
* ``job``: ``run(spark, inputs, output)`` in process, and ``main(argv)`` for ``spark-submit``.
* ``summary``: counts per message type and end-to-end latency.
* ``session``: a local session for in-process use; ``submit``: ``SparkSubmitOperator`` arguments.

Nothing here imports Airflow except ``example_dag`` (the example DAGs, see ``example_dags/example_drain_to_spark.py``).
"""
