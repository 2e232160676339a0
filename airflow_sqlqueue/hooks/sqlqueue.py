"""``SqlQueueHook``: an existing Airflow database connection turned into a queue transport.

The one way from Airflow to a transport: operators, sensors, triggers, the maintenance DAGs, the dashboard and
the command line's ``--conn-id`` all go through this hook (by connection id, by an Airflow ``Connection``
object already in hand, or asynchronously in the triggerer).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable, Iterable
from functools import cached_property
from typing import Any

from airflow.sdk import BaseHook

from airflow_sqlqueue.hooks.metadata import connection_fields
from airflow_sqlqueue.transport import SqlQueueTransport, UnsupportedConnectionError, get_dialect
from airflow_sqlqueue.transport.dialects.connect import guard_connect, url_from_fields
from airflow_sqlqueue.transport.operations.inbox import DEFAULT_INBOX_TABLE
from airflow_sqlqueue.transport.operations.pubsub import DEFAULT_SUBSCRIPTION_TABLE

#: Airflow connection types the transport runs on, and the dialect of each.
SUPPORTED_CONN_TYPES = {"mssql": "mssql", "odbc": "mssql", "postgres": "postgres", "sqlite": "sqlite"}


class SqlQueueHook(BaseHook):
    """Queue operations on an existing ``mssql``, ``odbc``, ``postgres`` or ``sqlite`` connection.

    No new secrets: the connection is the one your SQL tasks already use. Use it as a context manager (the
    transport's pooled connections close at the end), or call ``close()``.

    :param sqlqueue_conn_id: the Airflow connection id.
    :param error_queue: the error queue of this database (default ``error``).
    :param odbc_driver: the ODBC driver name for ``odbc`` connections (Airflow's OdbcHook ignores a driver in the
        connection extra unless ``[providers.odbc] allow_driver_in_extra`` is set).
    :param forward_to: queues a receiver may forward messages to besides its own and the error queue.
    :param endpoint: the NServiceBus endpoint name sends are made as (``NServiceBus.OriginatingEndpoint``;
        default ``$SQLQUEUE_ENDPOINT`` or ``airflow``).
    :param subscription_table: the subscription table shared with .NET endpoints (``SubscriptionRouting``).
    :param inbox_table: the inbox (deduplication) table of ``handle_once`` (``SqlQueueInbox``).
    """

    conn_name_attr = "sqlqueue_conn_id"
    default_conn_name = "sqlqueue_default"
    conn_type = "sqlqueue"
    hook_name = "SQL Queue"

    def __init__(self, sqlqueue_conn_id: str = default_conn_name, error_queue: str = "error",
                 odbc_driver: str | None = None, forward_to: Iterable[str] = (), endpoint: str | None = None,
                 subscription_table: str = DEFAULT_SUBSCRIPTION_TABLE, inbox_table: str = DEFAULT_INBOX_TABLE,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sqlqueue_conn_id = sqlqueue_conn_id
        self.error_queue = error_queue
        self.odbc_driver = odbc_driver
        self.forward_to = tuple(forward_to)
        self.endpoint = endpoint
        self.subscription_table = subscription_table
        self.inbox_table = inbox_table

    # -- other ways to make one ------------------------------------------------------------------
    @classmethod
    def for_connection(cls, connection: Any, **kwargs: Any) -> SqlQueueHook:
        """A hook on an Airflow ``Connection`` object already in hand (no lookup)."""
        hook = cls(connection.conn_id or "", **kwargs)
        hook.__dict__["connection"] = connection
        return hook

    @classmethod
    async def afor_conn_id(cls, conn_id: str, **kwargs: Any) -> SqlQueueHook:
        """A hook whose connection is looked up without blocking the event loop (for the triggerer).

        An ``AIRFLOW_CONN_<ID>`` variable (or, outside the triggerer, a row of the metadata database) is read in a
        thread (``hooks.metadata``); anything else through Airflow's asynchronous lookup, which in the triggerer
        asks the triggerer's supervisor (the runner may not read the metadata database).
        """
        try:
            fields = await asyncio.to_thread(connection_fields, conn_id)
        except Exception:  # noqa: BLE001 - anything unexpected: Airflow's own lookup decides
            fields = None
        if fields is not None:
            return cls.for_connection(_sdk_connection(conn_id, fields), **kwargs)
        try:
            connection = await BaseHook.aget_connection(conn_id)
        except NotImplementedError:  # pragma: no cover - a secrets setup without async lookup
            connection = await asyncio.to_thread(BaseHook.get_connection, conn_id)
        return cls.for_connection(connection, **kwargs)

    # -- the connection and the transport ---------------------------------------------------------
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
        return _connect(self.connection, self.odbc_driver)

    @cached_property
    def transport(self) -> SqlQueueTransport:
        """The transport on this connection (connections are pooled and reconnected by it)."""
        connection = self.connection
        conn_type = (connection.conn_type or "").lower()
        name = dialect_name_for(conn_type, connection.conn_id)
        dialect = get_dialect(name, "qmark" if conn_type == "odbc" else None,
                              default_catalog=(connection.schema or None) if name == "mssql" else None)
        direct = _direct_postgres(connection)
        connect = guard_connect(direct or (lambda: _connect(connection, self.odbc_driver)),
                                f"connection {connection.conn_id!r}", connection.password)
        return SqlQueueTransport(connect, dialect, error_queue=self.error_queue, forward_to=self.forward_to,
                                 endpoint=self.endpoint, subscription_table=self.subscription_table,
                                 inbox_table=self.inbox_table)

    def get_transport(self) -> SqlQueueTransport:
        """The transport on this connection."""
        return self.transport

    def close(self) -> None:
        """Close pooled connections."""
        if "transport" in self.__dict__:
            self.transport.close()

    def __enter__(self) -> SqlQueueHook:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def dialect_name_for(conn_type: str | None, conn_id: str = "") -> str:
    """The dialect of an Airflow connection type; a clear error for unsupported ones."""
    try:
        return SUPPORTED_CONN_TYPES[(conn_type or "").lower()]
    except KeyError:
        raise UnsupportedConnectionError(
            f"connection {conn_id!r} has type {conn_type!r}; SQL queues run on connections of type "
            f"{', '.join(sorted(SUPPORTED_CONN_TYPES))}. Point the task at one of those") from None


def _sdk_connection(conn_id: str, fields: dict[str, Any]) -> Any:
    from airflow.sdk import Connection

    extra = fields.get("extra") or {}
    return Connection(conn_id=conn_id, conn_type=fields.get("conn_type") or "", host=fields.get("host"),
                      schema=fields.get("schema"), login=fields.get("login"), password=fields.get("password"),
                      port=int(fields["port"]) if fields.get("port") else None,
                      extra=json.dumps(extra) if extra else None)


def _direct_postgres(connection: Any) -> Callable[[], Any] | None:
    """For a ``postgres`` connection whose options are libpq keywords: open it with psycopg from its fields.

    PostgresHook would look the connection up a second time, synchronously, and load every provider's hooks on
    first use: in the triggerer that stalls the event loop for tens of seconds on a busy machine ("event loop
    appears deadlocked"). Other connections (or other options, such as IAM) go through the database's hook.
    """
    if (connection.conn_type or "").lower() != "postgres":
        return None
    try:
        options = connection.extra_dejson
    except Exception:  # noqa: BLE001 - an unreadable extra: let the hook report it
        return None
    url = url_from_fields("postgres", connection.host, connection.port, connection.login, connection.password,
                          connection.schema, options)
    if url is None:
        return None
    try:
        import psycopg
    except ImportError:
        return None
    return lambda: psycopg.connect(url, autocommit=False)


def _connect(connection: Any, odbc_driver: str | None = None) -> Any:
    """Open a DB-API connection for an Airflow connection (SQLite is opened for multi-threaded use)."""
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
