"""PySpark processing of drained messages: Parquet batches from ``SqlQueueDrainOperator`` to typed, deduplicated,
partitioned messages and a summary.

* ``columns``: the input schema and the column expressions (headers, times, bodies), Spark built-ins only.
* ``job``: ``run(spark, inputs, output)`` in process, and ``main(argv)`` for ``spark-submit``.
* ``summary``: counts per message type and end-to-end latency.
* ``session``: a local session for in-process use; ``submit``: ``SparkSubmitOperator`` arguments.

Nothing here imports Airflow except ``example_dag`` (the example DAGs, see ``example_dags/example_drain_to_spark.py``).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Any

from airflow_sqlqueue.extras import message


class _PySparkMissing(importlib.abc.MetaPathFinder):
    """Last on ``sys.meta_path`` while PySpark is not installed: an import of it (the job's modules import it at
    their top) then fails with the extra to install, not a bare ``No module named 'pyspark'``. Being last, it is
    asked only when no other finder found PySpark, so a PySpark installed later is still imported."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname == "pyspark" or fullname.startswith("pyspark."):
            raise ModuleNotFoundError(message("pyspark", "the Spark job (airflow_sqlqueue.spark)"), name="pyspark")
        return None


_registered = any(type(f).__name__ == "_PySparkMissing" for f in sys.meta_path)  # once per process (reloads)
if importlib.util.find_spec("pyspark") is None and not _registered:
    sys.meta_path.append(_PySparkMissing())
