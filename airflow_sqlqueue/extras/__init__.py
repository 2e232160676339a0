"""Optional parts: which extra of ``airflow-provider-sqlqueue`` brings which dependency, and the error saying so.

A part that needs an optional dependency checks for it where it is used (``require``), or its package imports
``airflow_sqlqueue.extras.needs_airflow`` first; either way the error names the extra to install.
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
