"""A local Spark session for in-process runs (the demo, tests, the example DAG's default)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pyspark.sql import SparkSession

from .settings import SESSION_CONF

#: Settings of every session made here (``settings.SESSION_CONF``): no UI, UTC, adaptive query execution.
DEFAULT_CONF = SESSION_CONF


def local_session(master: str = "local[*]", app_name: str = "sqlqueue-spark", *,
                  conf: dict[str, Any] | None = None, driver_memory: str | None = None) -> SparkSession:
    """``SparkSession.builder.getOrCreate()`` with ``SESSION_CONF`` and a warehouse folder outside the CWD.

    Nothing is written to the current directory: the SQL warehouse points into the temp directory (and is only
    created if a table is saved). ``driver_memory`` (``"2g"``; see ``settings.driver_memory``) is the heap of a
    local session; it only applies when this call starts the JVM.
    """
    settings = {**DEFAULT_CONF,
                "spark.sql.warehouse.dir": os.path.join(tempfile.gettempdir(), "sqlqueue-spark-warehouse"),
                **({"spark.driver.memory": driver_memory} if driver_memory else {}),
                **(conf or {})}
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, str(value))
    return builder.getOrCreate()


@contextmanager
def spark_session(master: str = "local[*]", app_name: str = "sqlqueue-spark", *,
                  conf: dict[str, Any] | None = None, driver_memory: str | None = None) -> Iterator[SparkSession]:
    """The active session if there is one (left running), else a new local one stopped afterwards."""
    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    spark = local_session(master, app_name, conf=conf, driver_memory=driver_memory)
    try:
        yield spark
    finally:
        spark.stop()
