"""The database ``sqlqueue`` works on: ``--url``, ``$SQLQUEUE_URL`` or ``--conn-id``, checked before connecting."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

from airflow_sqlqueue.hooks.metadata import queue_url
from airflow_sqlqueue.transport import SqlQueueTransport, get_dialect
from airflow_sqlqueue.transport.common.redaction import password_span
from airflow_sqlqueue.transport.dialects.connect import (
    connection_factory,
    default_catalog_of,
    guard_connect,
    paramstyle_of,
)

from .errors import UsageError, one_line

URL_VARIABLE = "SQLQUEUE_URL"


def open_transport(args: argparse.Namespace) -> SqlQueueTransport:
    """The transport named by ``--conn-id``, ``--url`` or ``$SQLQUEUE_URL`` (in that order)."""
    if args.conn_id and args.url:
        raise UsageError("give --url or --conn-id, not both")
    if args.conn_id:
        return transport_from_conn_id(args.conn_id, error_queue=args.error_queue, endpoint=args.endpoint,
                                      subscription_table=args.subscription_table)
    url = args.url or os.environ.get(URL_VARIABLE)
    if not url:
        raise UsageError(f"no database given: pass --url URL, set {URL_VARIABLE}, or pass --conn-id ID")
    check_url(url, creating=args.command == "create")
    return SqlQueueTransport.from_url(url, error_queue=args.error_queue, endpoint=args.endpoint,
                                      subscription_table=args.subscription_table)


def check_url(url: str, *, creating: bool) -> None:
    """Refuse a malformed URL, and a SQLite file that does not exist (only ``create`` makes one)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError as exc:
        # urllib quotes the part it read as the port: with a '/', '?' or '#' left unencoded in the password,
        # that is a piece of the password, so it is not shown then
        reason = ("its port is not a number, or its password holds an unencoded '/', '?' or '#' (write them "
                  "%2F, %3F, %23)") if password_span(url) else one_line(exc)
        raise UsageError(f"bad database URL: {reason}; e.g. postgresql://user:pass@host:5432/db") from None
    if not url.lower().startswith("sqlite:///"):
        return
    path = Path(unquote(url[len("sqlite:///"):].split("?", 1)[0]))  # as transport.connect reads it
    if str(path) in ("", ":memory:"):
        return  # refused by the transport with its own message
    if creating and not path.parent.is_dir():
        raise UsageError(f"the folder of SQLite file {str(path)!r} does not exist; create it first")
    if not creating and not path.is_file():
        raise UsageError(f"SQLite file {str(path)!r} does not exist; check the path in the URL "
                         "(`sqlqueue create QUEUE` makes a new database file)")


def quick_url(conn_id: str) -> str | None:
    """The queue URL of ``conn_id`` read without Airflow, or None (then Airflow looks it up)."""
    try:
        return queue_url(conn_id)
    except Exception:  # noqa: BLE001 - anything unexpected: Airflow's own lookup decides
        return None


def transport_from_conn_id(conn_id: str, **kwargs: object) -> SqlQueueTransport:
    """A transport on an Airflow connection (needs Airflow installed).

    The connection is looked up where Airflow's own ``airflow connections get`` looks: ``AIRFLOW_CONN_<ID>``
    variables, the configured secrets backends, then the metadata database (connections made with
    ``airflow connections add`` or in the UI). A variable or a row of the metadata database is read without
    importing Airflow (``hooks.metadata``): the command starts in well under a second.
    """
    url = quick_url(conn_id)
    if url is not None:
        connect, dialect = connection_factory(url)
        password = urlsplit(url).password
        return SqlQueueTransport(guard_connect(connect, f"connection {conn_id!r}", unquote(password or "") or None),
                                 get_dialect(dialect, paramstyle_of(url), default_catalog_of(url)), **kwargs)
    try:
        from airflow_sqlqueue.hooks.sqlqueue import SqlQueueHook
    except ImportError:
        raise UsageError("--conn-id needs Apache Airflow: pip install 'airflow-provider-sqlqueue[airflow]', "
                         "or pass --url") from None
    try:
        connection = lookup_connection(conn_id)
    except Exception as exc:  # noqa: BLE001 - Airflow raises its own not-found type
        raise UsageError(f"Airflow connection {conn_id!r} not found: {one_line(exc)}. List them with "
                         "`airflow connections list`") from None
    return SqlQueueHook.for_connection(connection, **kwargs).transport


def lookup_connection(conn_id: str) -> object:
    """The Airflow connection ``conn_id``: an ``AIRFLOW_CONN_<ID>`` variable is read without loading Airflow's
    database layer; anything else goes through every secrets backend, the metadata database last."""
    if os.environ.get("AIRFLOW_CONN_" + conn_id.upper()):
        from airflow.sdk import BaseHook

        return BaseHook.get_connection(conn_id)
    from airflow.models.connection import Connection

    connection = Connection.get_connection_from_secrets(conn_id)
    # The database's own Airflow hook (PostgresHook, MsSqlHook, ...) looks the id up again through the task SDK,
    # which reads variables and secrets backends but not the metadata database: hand it the connection found,
    # in this process's environment only.
    os.environ["AIRFLOW_CONN_" + conn_id.upper()] = connection.as_json()
    return connection
