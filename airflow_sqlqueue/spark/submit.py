"""Arguments for ``SparkSubmitOperator`` running the job file of the installed package (any master)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .settings import SESSION_CONF


def job_file() -> str:
    """Absolute path of ``job.py`` in the installed package (the ``application`` of spark-submit)."""
    return str(Path(__file__).resolve().with_name("job.py"))


def spark_submit_arguments(inputs: str | Sequence[str], output: str, *, conn_id: str = "spark_default",
                           mode: str = "overwrite", dataset: bool | str = False,
                           name: str = "sqlqueue-drained-messages",
                           conf: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """Keyword arguments of ``SparkSubmitOperator`` for the job (add ``task_id``; ``extra`` is passed on).

    The driver imports ``airflow_sqlqueue`` (client deploy mode: where Airflow runs); the executors run no
    Python (built-in functions only), so nothing needs installing on the cluster. In cluster deploy mode,
    ship the package with ``py_files=``.

    :param inputs: Parquet files or folders of drained batches (templated strings are fine).
    :param output: output folder (templated strings are fine).
    :param dataset: also write the typed messages (``--dataset true``); else the summary only (a template
        such as ``"{{ params.dataset }}"`` is fine).
    :param conn_id: a ``spark`` connection; its host is the master (``local[*]``, ``spark://...``, ``yarn``...).
    """
    paths = [inputs] if isinstance(inputs, str) else list(inputs)
    return {
        "application": job_file(),
        "application_args": ["--input", *paths, "--output", output, "--mode", mode,
                             "--dataset", str(dataset).lower()],
        "conn_id": conn_id,
        "name": name,
        "conf": {**SESSION_CONF, **(conf or {})},
        **extra,
    }
