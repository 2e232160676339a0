"""``sqlqueue``: argument parsing, the connection, and exit codes.

Exit codes: 0 success; 1 findings (``check`` found problems, ``receive --require`` found nothing);
2 usage or input errors; 3 connection or database errors.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from collections.abc import Sequence

from airflow_sqlqueue.transport import (
    InvalidAddressError,
    InvalidMessageError,
    SqlQueueError,
    SqlQueueTransport,
    UnsupportedConnectionError,
)
from airflow_sqlqueue.transport.dialects import DIALECT_NAMES

from . import commands

OK, FINDINGS, USAGE, DATABASE = 0, 1, 2, 3
MODES = ("none", "receive-only", "sends-atomic-with-receive")


class UsageError(SqlQueueError):
    """Wrong or missing arguments (exit 2)."""


def _sub(subparsers: argparse._SubParsersAction, name: str, help_text: str, examples: str) -> argparse.ArgumentParser:
    return subparsers.add_parser(name, help=help_text, description=help_text,
                                 epilog="examples:\n" + examples, formatter_class=argparse.RawDescriptionHelpFormatter)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line."""
    parser = argparse.ArgumentParser(
        prog="sqlqueue", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Operate SQL queue tables (NServiceBus SQL transport design) on SQL Server, PostgreSQL, SQLite.",
        epilog="connection: --url URL, or the SQLQUEUE_URL environment variable, or --conn-id AIRFLOW_CONN_ID\n"
               "  sqlite:///queues.db   postgresql://user:pass@host:5432/db\n"
               "  mssql+pymssql://user:pass@host:1433/db   mssql+pyodbc://user:pass@host:1433/db?driver=FreeTDS\n"
               "exit codes: 0 success, 1 findings, 2 usage or input error, 3 connection or database error")
    parser.add_argument("--url", default=os.environ.get("SQLQUEUE_URL"), help="database URL (default: $SQLQUEUE_URL)")
    parser.add_argument("--conn-id", help="an Airflow connection id (mssql, odbc, postgres or sqlite)")
    parser.add_argument("--error-queue", default="error", help="the error queue (default: error)")
    parser.add_argument("--json", action="store_true", help="one JSON object per line, for scripts")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = _sub(sub, "create", "create queue tables (idempotent; never creates schemas)",
             "  sqlqueue --url sqlite:///q.db create orders billing error\n"
             "  sqlqueue --url postgresql://app@db/sales create sales.orders --delayed")
    p.add_argument("queues", nargs="+", metavar="QUEUE")
    p.add_argument("--delayed", action="store_true", help="also create each queue's .Delayed table")

    p = _sub(sub, "ddl", "print the DDL script for a DBA to review (no connection needed)",
             "  sqlqueue ddl orders error --dialect mssql\n  sqlqueue ddl 'sales.orders' --dialect postgres --delayed")
    p.add_argument("queues", nargs="+", metavar="QUEUE")
    p.add_argument("--dialect", required=True, choices=DIALECT_NAMES)
    p.add_argument("--delayed", action="store_true", help="include the .Delayed tables")

    p = _sub(sub, "send", "send messages: --body, --body-file, or one message per line on stdin",
             "  sqlqueue send orders --body '{\"id\": 1}' --header NServiceBus.EnclosedMessageTypes=Sales.OrderPlaced\n"
             "  seq 1000 | sqlqueue send orders\n  sqlqueue send orders --body-file order.json --ttbr 3600 --count 10")
    p.add_argument("queue", metavar="QUEUE")
    body = p.add_mutually_exclusive_group()
    body.add_argument("--body", help="the body text (UTF-8)")
    body.add_argument("--body-file", help="a file whose bytes are the body")
    p.add_argument("--header", action="append", default=[], metavar="K=V", help="a header (repeatable)")
    p.add_argument("--ttbr", type=float, help="time to be received, seconds (sets Expires)")
    p.add_argument("--delay", type=float, help="deliver after this many seconds (via the .Delayed table)")
    p.add_argument("--count", type=int, default=1, help="send the message N times")

    p = _sub(sub, "receive", "take messages from a queue and print them",
             "  sqlqueue receive orders --max 10\n  sqlqueue --json receive orders --max 1000 --mode receive-only\n"
             "  sqlqueue receive orders --require || echo empty")
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("--max", type=int, default=1, help="at most this many messages (default 1)")
    p.add_argument("--mode", choices=MODES, default="none",
                   help="none: delete then print; receive-only / sends-atomic-with-receive: commit after printing")
    p.add_argument("--require", action="store_true", help="exit 1 when no message was received")

    p = _sub(sub, "peek", "print the depth estimate of a queue", "  sqlqueue peek orders")
    p.add_argument("queue", metavar="QUEUE")

    _sub(sub, "list", "every queue table in the database, with depth and age of the oldest message",
         "  sqlqueue --url postgresql://app@db/sales list\n  sqlqueue --json list")

    p = _sub(sub, "purge-expired", "delete expired messages in batches",
             "  sqlqueue purge-expired orders --batch-size 5000\n  sqlqueue purge-expired --all")
    p.add_argument("queues", nargs="*", metavar="QUEUE")
    p.add_argument("--all", action="store_true", help="every discovered queue")
    p.add_argument("--batch-size", type=int, default=10_000)

    p = _sub(sub, "check", "schema and index check (exit 1 on findings)",
             "  sqlqueue check orders\n  sqlqueue check --all --repair")
    p.add_argument("queues", nargs="*", metavar="QUEUE")
    p.add_argument("--all", action="store_true", help="every discovered queue")
    p.add_argument("--repair", action="store_true", help="fix what can be fixed (needs DDL rights)")

    p = _sub(sub, "retry-errors", "return failed messages to the queue in their NServiceBus.FailedQ header",
             "  sqlqueue retry-errors\n  sqlqueue retry-errors --filter failedq=orders --filter exception=Timeout\n"
             "  sqlqueue retry-errors --list")
    p.add_argument("--filter", action="append", default=[], metavar="K=V",
                   help="failedq=, exception= or type= (substring of FailedQ, exception type, message type)")
    p.add_argument("--list", action="store_true", help="only list the failed messages")
    p.add_argument("--max", type=int, help="return at most this many")

    p = _sub(sub, "demo", "run the end-to-end demo on a SQLite file",
             "  sqlqueue demo\n  sqlqueue demo --messages 2000")
    p.add_argument("--output", default="demo-output", help="output folder (default ./demo-output)")
    p.add_argument("--messages", type=int, default=10_000)
    return parser


def open_transport(args: argparse.Namespace) -> SqlQueueTransport:
    """The transport named by --url / SQLQUEUE_URL or --conn-id."""
    if args.conn_id:
        return transport_from_conn_id(args.conn_id, error_queue=args.error_queue)
    if not args.url:
        raise UsageError("no database given: pass --url URL, set SQLQUEUE_URL, or pass --conn-id")
    return SqlQueueTransport.from_url(args.url, error_queue=args.error_queue)


def transport_from_conn_id(conn_id: str, **kwargs: object) -> SqlQueueTransport:
    """A transport on an Airflow connection (needs Airflow installed)."""
    try:
        from airflow.sdk import BaseHook

        from airflow_sqlqueue.hooks.sqlqueue import transport_for
    except ImportError:
        raise UsageError("--conn-id needs Apache Airflow: pip install 'airflow-provider-sqlqueue[airflow]', "
                         "or pass --url") from None
    try:
        connection = BaseHook.get_connection(conn_id)
    except Exception as exc:  # noqa: BLE001 - Airflow raises its own not-found type
        raise UsageError(f"Airflow connection {conn_id!r} not found: {str(exc).splitlines()[0]}") from None
    return transport_for(connection, **kwargs)


def exit_code(exc: BaseException) -> int:
    """2 for input errors, 3 for connection and database errors."""
    if isinstance(exc, UsageError | InvalidAddressError | InvalidMessageError | UnsupportedConnectionError
                  | ValueError | OSError):
        return USAGE
    return DATABASE


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``sqlqueue``; return the exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.ERROR, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return commands.run(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return OK
    except Exception as exc:  # one clear line, never a traceback unless --debug
        if args.debug:
            traceback.print_exc()
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        sys.stderr.write(f"sqlqueue: error: {text}\n")
        return exit_code(exc)
