"""A local Spark session for in-process runs (the demo, tests, the example DAG's default)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pyspark.sql import SparkSession

#: Settings of every session made here: no UI, no console progress bars, UTC, few shuffle partitions.
DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "4",
}


def local_session(master: str = "local[*]", app_name: str = "sqlqueue-spark", *,
                  conf: dict[str, Any] | None = None) -> SparkSession:
    """``SparkSession.builder.getOrCreate()`` with ``DEFAULT_CONF`` and a warehouse folder outside the CWD.

    Nothing is written to the current directory: the SQL warehouse points into the temp directory (and is only
    created if a table is saved).
    """
    settings = {**DEFAULT_CONF,
                "spark.sql.warehouse.dir": os.path.join(tempfile.gettempdir(), "sqlqueue-spark-warehouse"),
                **(conf or {})}
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, str(value))
    return builder.getOrCreate()


@contextmanager
def spark_session(master: str = "local[*]", app_name: str = "sqlqueue-spark", *,
                  conf: dict[str, Any] | None = None) -> Iterator[SparkSession]:
    """The active session if there is one (left running), else a new local one stopped afterwards."""
    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    spark = local_session(master, app_name, conf=conf)
    try:
        yield spark
    finally:
        spark.stop()
