"""Optional parts: which extra of ``airflow-provider-sqlqueue`` brings which dependency, and the error saying so.

A part that needs an optional dependency checks for it where it is used (``require``: the drain to Parquet, the
error archive, the demo), or its package imports ``airflow_sqlqueue.extras.needs_airflow`` first (operators,
sensors, triggers, queues), or, for PySpark, ``airflow_sqlqueue.spark`` makes a missing PySpark's import error
name the extra; either way the error names the extra to install. Nothing imports pyarrow, PySpark or OpenLineage
at start-up: the command line, the core, the operators, the page and the DAG files load without them.
"""

from __future__ import annotations

import importlib.util

DISTRIBUTION = "airflow-provider-sqlqueue"

#: module -> (extra, what it is)
EXTRAS = {
    "airflow": ("airflow", "Apache Airflow 3.3+"),
    "pyarrow": ("parquet", "pyarrow"),
    "pyspark": ("spark", "PySpark (3.5 or 4.x: the release of your Spark cluster)"),
}


def message(module: str, what: str) -> str:
    """The error text for ``what`` needing ``module``."""
    extra, name = EXTRAS[module]
    return (f"{what} needs {name}, which is not installed (no module named {module!r}): "
            f"pip install '{DISTRIBUTION}[{extra}]'")


def require(module: str, what: str) -> None:
    """Raise ``ModuleNotFoundError`` naming the extra when ``module`` (a key of ``EXTRAS``) is not installed."""
    if importlib.util.find_spec(module) is None:
        raise ModuleNotFoundError(message(module, what), name=module)
