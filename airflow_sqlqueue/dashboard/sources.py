"""Which connections and queues the dashboard shows: the maintenance configuration, read server-side."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

from airflow_sqlqueue.hooks.sqlqueue import SqlQueueHook
from airflow_sqlqueue.maintenance.config import (
    VARIABLE,
    VARIABLE_SOURCE,
    ConnectionConfig,
    MaintenanceConfig,
    MaintenanceConfigError,
    load_config,
    parse_config,
)
from airflow_sqlqueue.transport import SqlQueueTransport


class UnknownConnectionError(LookupError):
    """A connection id the maintenance configuration does not name."""


def dashboard_config() -> MaintenanceConfig:
    """The maintenance configuration: the Variable (read from the metadata database), else the file or default.

    The API server is not a task: the Task SDK's ``Variable.get`` may not reach the metadata database there,
    so the Variable is read with the server-side model and the rest is :func:`load_config`'s usual order.
    """
    from airflow.models import Variable

    text = Variable.get(VARIABLE, default_var=None)
    if text:
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise MaintenanceConfigError(f"{VARIABLE_SOURCE} is not valid JSON: {exc}") from None
        if not isinstance(raw, dict):
            raise MaintenanceConfigError(f"{VARIABLE_SOURCE} must be a JSON object")
        return parse_config(raw, VARIABLE_SOURCE)
    return load_config()


def configured_connection(config: MaintenanceConfig, conn_id: str) -> ConnectionConfig:
    """The settings of a configured connection; UnknownConnectionError for any other id."""
    for conn in config.connections:
        if conn.conn_id == conn_id:
            return conn
    where = "the configuration file" if config.source.startswith("file ") else config.source
    raise UnknownConnectionError(f"connection {conn_id!r} is not in the SQL queue configuration "
                                 f"({where}); known: {[c.conn_id for c in config.connections]}")


@contextmanager
def open_transport(conn_id: str, error_queue: str = "error") -> Iterator[SqlQueueTransport]:
    """A transport on an Airflow connection (looked up server-side), closed afterwards."""
    from airflow.models import Connection

    connection = Connection.get_connection_from_secrets(conn_id)
    transport = SqlQueueHook.for_connection(connection, error_queue=error_queue).transport
    try:
        yield transport
    finally:
        transport.close()
