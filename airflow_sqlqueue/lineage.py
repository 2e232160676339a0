"""OpenLineage datasets of the operators: the queue table as a drain's input or a send's output, the Parquet
location as a drain's output, so the lineage view shows queue -> drain -> Spark.

Used by ``get_openlineage_facets_on_complete`` of the operators that move messages (send, publish, drain,
partitioned drain, batch retry, retry errors) when the OpenLineage provider (``apache-airflow-providers-openlineage``)
is installed; without it they return None. A downstream task that reads the Parquet files (a Spark step) declares
``inlets=[parquet_asset(path)]``: the provider translates that Asset to the very dataset the drain wrote.
Names follow OpenLineage's dataset naming: ``postgres://host:port`` with ``database.schema.table``,
``mssql://host:port`` with ``database.schema.table``, ``sqlite://<file>`` with the table; ``file`` or
``<scheme>://<bucket>`` with the path for Parquet. Only host, port, database and table names are used: never a
login, a password or an extra.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

from airflow.sdk import Asset

from airflow_sqlqueue.hooks.sqlqueue import SqlQueueHook
from airflow_sqlqueue.transport.dialects import get_dialect

DEFAULT_PORTS = {"postgres": 5432, "mssql": 1433}


def queue_dataset(hook: SqlQueueHook, queue: str) -> tuple[str, str]:
    """(namespace, name) of a queue table on the hook's connection."""
    connection = hook.connection
    dialect = hook.dialect_name
    address = get_dialect(dialect).parse_address(queue)
    if dialect == "sqlite":
        return f"sqlite://{os.path.abspath(connection.host or '')}", address.table
    host = f"{connection.host or 'localhost'}:{connection.port or DEFAULT_PORTS[dialect]}"
    if dialect == "postgres":
        return f"postgres://{host}", f"{connection.schema or 'postgres'}.{address.schema or 'public'}.{address.table}"
    database = address.catalog or connection.schema or "master"
    return f"mssql://{host}", f"{database}.{address.schema or 'dbo'}.{address.table}"


def path_dataset(path: str) -> tuple[str, str]:
    """(namespace, name) of a Parquet location: ``file`` for a local path, ``<scheme>://<bucket>`` for a URL."""
    parts = urlsplit(str(path))
    if parts.scheme and parts.scheme != "file" and len(parts.scheme) > 1:
        return f"{parts.scheme}://{parts.netloc}", parts.path.lstrip("/")
    return "file", os.path.abspath(parts.path if parts.scheme == "file" else str(path))


def parquet_asset(path: str) -> Asset:
    """An Asset for a Parquet location that OpenLineage names as :func:`path_dataset` does (the drain's output):
    declare it as ``inlets`` of the task that reads the files, e.g. a ``SparkSubmitOperator``."""
    namespace, name = path_dataset(path)
    return Asset(uri=f"file://{name}" if namespace == "file" else f"{namespace}/{name}")


def operator_lineage(inputs: list[tuple[str, str]], outputs: list[tuple[str, str]]) -> Any:
    """An ``OperatorLineage`` of these datasets, or None when the OpenLineage provider is not installed."""
    try:
        from airflow.providers.openlineage.extractors import OperatorLineage
        from openlineage.client.event_v2 import Dataset
    except ImportError:
        return None
    return OperatorLineage(inputs=[Dataset(namespace=n, name=d) for n, d in inputs],
                           outputs=[Dataset(namespace=n, name=d) for n, d in outputs])


def retry_lineage(hook: SqlQueueHook, error_queue: str, returned_to: list[str]) -> Any:
    """The lineage of a retry: the error queue in, the queues messages were returned to out."""
    return operator_lineage([queue_dataset(hook, error_queue)], [queue_dataset(hook, q) for q in returned_to])
