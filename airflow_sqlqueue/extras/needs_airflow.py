"""Imported first by the packages that run inside Airflow (operators, sensors, triggers, queues): without
Apache Airflow, or with one older than the floor, they fail here with the fix instead of deep inside an import."""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version

from airflow_sqlqueue.extras import DISTRIBUTION, require

#: the lowest Airflow the provider supports (airflow.triggers.shared_stream, the task state store: 3.3+)
AIRFLOW_FLOOR = (3, 3)

require("airflow", "the provider's Airflow parts (operators, sensor, triggers, message queue)")


def _release(text: str) -> tuple[int, int]:
    """(major, minor) of a version string such as ``3.3.2`` or ``3.4.0rc1``."""
    found = re.match(r"(\d+)\.(\d+)", text)
    return (int(found[1]), int(found[2])) if found else (0, 0)


try:
    _installed = version("apache-airflow-core")
except PackageNotFoundError:  # an Airflow installed without its core distribution (a source checkout)
    _installed = None
if _installed is not None and _release(_installed) < AIRFLOW_FLOOR:
    raise ImportError(f"{DISTRIBUTION} needs Apache Airflow {'.'.join(map(str, AIRFLOW_FLOOR))} or later; this "
                      f"environment has {_installed}: pip install '{DISTRIBUTION}[airflow]' (or 'apache-airflow>=3.3')")
