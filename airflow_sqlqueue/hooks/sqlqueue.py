"""``SqlQueueHook``: an existing Airflow database connection turned into a queue transport."""

from __future__ import annotations

import sqlite3
from functools import cached_property
from typing import Any

from airflow.sdk import BaseHook

from airflow_sqlqueue.transport import SqlQueueTransport, UnsupportedConnectionError, get_dialect
from airflow_sqlqueue.transport.connect import guard_connect

#: Airflow connection types the transport runs on, and the dialect of each.
SUPPORTED_CONN_TYPES = {"mssql": "mssql", "odbc": "mssql", "postgres": "postgres", "sqlite": "sqlite"}


class SqlQueueHook(BaseHook):
    """Queue operations on an existing ``mssql``, ``odbc``, ``postgres`` or ``sqlite`` connection.

    No new secrets: the connection is the one your SQL tasks already use.

    :param sqlqueue_conn_id: the Airflow connection id.
    :param error_queue: the error queue of this database (default ``error``).
    """

    conn_name_attr = "sqlqueue_conn_id"
    default_conn_name = "sqlqueue_default"
    conn_type = "sqlqueue"
    hook_name = "SQL Queue"

    def __init__(self, sqlqueue_conn_id: str = default_conn_name, error_queue: str = "error",
                 odbc_driver: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sqlqueue_conn_id = sqlqueue_conn_id
        self.error_queue = error_queue
        self.odbc_driver = odbc_driver

    @cached_property
    def connection(self) -> Any:
        """The Airflow connection."""
        return self.get_connection(self.sqlqueue_conn_id)

    @property
    def dialect_name(self) -> str:
        """``mssql``, ``postgres`` or ``sqlite``, from the connection type."""
        return dialect_name_for(self.connection.conn_type, self.sqlqueue_conn_id)

    def get_conn(self) -> Any:
        """A new DB-API connection (made by the database's own Airflow hook)."""
        return connect_for(self.connection, odbc_driver=self.odbc_driver)

    @cached_property
    def transport(self) -> SqlQueueTransport:
        """The transport on this connection (connections are pooled and reconnected by it)."""
        return transport_for(self.connection, odbc_driver=self.odbc_driver, error_queue=self.error_queue)

    def get_transport(self) -> SqlQueueTransport:
        """The transport on this connection."""
        return self.transport

    def close(self) -> None:
        """Close pooled connections."""
        if "transport" in self.__dict__:
            self.transport.close()


def dialect_name_for(conn_type: str | None, conn_id: str = "") -> str:
    """The dialect of an Airflow connection type; a clear error for unsupported ones."""
    try:
        return SUPPORTED_CONN_TYPES[(conn_type or "").lower()]
    except KeyError:
        raise UnsupportedConnectionError(
            f"connection {conn_id!r} has type {conn_type!r}; SQL queues run on connections of type "
            f"{', '.join(sorted(SUPPORTED_CONN_TYPES))}. Point the task at one of those") from None


def connect_for(connection: Any, odbc_driver: str | None = None) -> Any:
    """Open a DB-API connection for an Airflow connection (SQLite is opened for multi-threaded use).

    :param odbc_driver: the ODBC driver name for ``odbc`` connections (Airflow's OdbcHook ignores a driver in
        the connection extra unless ``[providers.odbc] allow_driver_in_extra`` is set).
    """
    conn_type = (connection.conn_type or "").lower()
    dialect_name_for(conn_type, connection.conn_id)
    if conn_type == "sqlite":
        path = connection.host or connection.schema
        if not path:
            raise UnsupportedConnectionError(
                f"sqlite connection {connection.conn_id!r} has no file path in its host field")
        return sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
    hook_params = {"driver": odbc_driver} if conn_type == "odbc" and odbc_driver else None
    try:
        hook = connection.get_hook(hook_params=hook_params) if hook_params else connection.get_hook()
    except Exception as exc:
        if conn_type == "odbc":
            raise UnsupportedConnectionError(
                f"odbc connection {connection.conn_id!r} cannot be used: {exc}. It needs pyodbc and unixODBC: "
                "apt-get install unixodbc tdsodbc; pip install 'airflow-provider-sqlqueue[odbc]'") from None
        raise
    return hook.get_conn()


def transport_for(connection: Any, odbc_driver: str | None = None, **kwargs: Any) -> SqlQueueTransport:
    """A transport over an Airflow connection; connection failures never show the password."""
    conn_type = (connection.conn_type or "").lower()
    name = dialect_name_for(conn_type, connection.conn_id)
    dialect = get_dialect(name, "qmark" if conn_type == "odbc" else None,
                          default_catalog=(connection.schema or None) if name == "mssql" else None)
    connect = guard_connect(lambda: connect_for(connection, odbc_driver), f"connection {connection.conn_id!r}",
                            connection.password)
    return SqlQueueTransport(connect, dialect, **kwargs)
