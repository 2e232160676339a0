"""The ``sqlqueue`` arguments: every subcommand with its options, help text and examples."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from airflow_sqlqueue.transport.common.redaction import redact_arguments
from airflow_sqlqueue.transport.dialects import DIALECT_NAMES

from . import archive, redirects

MODES = ("receive-only", "sends-atomic-with-receive", "none")

CONNECTION_HELP = """\
connection (give it before or after the subcommand):
  --url URL, or the SQLQUEUE_URL environment variable, or --conn-id ID (an Airflow connection)
    sqlite:///queues.db   sqlite:////abs/path/queues.db   postgresql://user:pass@host:5432/db
    mssql+pymssql://user:pass@host:1433/db   mssql+pyodbc://user:pass@host:1433/db?driver=FreeTDS

exit codes: 0 success; 1 findings (check, demo) or nothing received (receive --require);
            2 usage or input error (bad argument, URL or queue name, missing queue); 3 connection or database error
"""


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors never repeat a password (e.g. a URL given without --url).

    It keeps the arguments it parses: the password of any URL among them is blanked from an error whole, even
    one holding a quote or a space (which free-text scrubbing cannot tell from the end of the password).
    """

    arguments: Sequence[str] = ()

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        self.arguments = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(self.arguments, namespace)

    def error(self, message: str) -> NoReturn:
        super().error(redact_arguments(message, self.arguments))


def _connection_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """Where the queues are; given after the subcommand, an option overrides the same one given before it."""
    parser.add_argument("--url", default=None if top else argparse.SUPPRESS,
                        help="database URL (default: $SQLQUEUE_URL)")
    parser.add_argument("--conn-id", default=None if top else argparse.SUPPRESS, metavar="ID",
                        help="an Airflow connection (mssql, odbc, postgres or sqlite) instead of --url")
    parser.add_argument("--error-queue", default="error" if top else argparse.SUPPRESS, metavar="QUEUE",
                        help="the error queue (default: error)")
    parser.add_argument("--endpoint", default=None if top else argparse.SUPPRESS, metavar="NAME",
                        help="the endpoint name sends are made as (default: $SQLQUEUE_ENDPOINT or airflow)")
    parser.add_argument("--subscription-table", default="SubscriptionRouting" if top else argparse.SUPPRESS,
                        metavar="TABLE", help="the subscription table shared with .NET endpoints "
                                              "(default: SubscriptionRouting)")


def _output_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """How results are shown (before or after the subcommand)."""
    parser.add_argument("--json", action="store_true", default=False if top else argparse.SUPPRESS,
                        help="one JSON object per line, for scripts")
    parser.add_argument("--debug", action="store_true", default=False if top else argparse.SUPPRESS,
                        help="show tracebacks and debug logs")


def build_parser() -> argparse.ArgumentParser:
    """The whole command line."""
    parser = Parser(
        prog="sqlqueue", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=CONNECTION_HELP,
        description="Operate SQL queue tables (the NServiceBus SQL transport design) on SQL Server, PostgreSQL "
                    "and SQLite.")
    _connection_options(parser, top=True)
    _output_options(parser, top=True)
    connection, output = Parser(add_help=False), Parser(add_help=False)
    _connection_options(connection, top=False)
    _output_options(output, top=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_text: str, examples: str, *, connects: bool = True) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help_text, description=help_text,
                              parents=[connection, output] if connects else [output],
                              epilog="examples:\n" + examples + ("\n\n" + CONNECTION_HELP if connects else ""),
                              formatter_class=argparse.RawDescriptionHelpFormatter)

    p = command("create", "create queue tables (idempotent; never creates schemas)",
                "  sqlqueue --url sqlite:///q.db create orders billing error\n"
                "  sqlqueue --url postgresql://app@db/sales create sales.orders --delayed")
    p.add_argument("queues", nargs="+", metavar="QUEUE")
    p.add_argument("--delayed", action="store_true", help="also create each queue's .Delayed table")
    p.add_argument("--notify", action="store_true",
                   help="PostgreSQL: install the wake-up trigger (watchers wake at once instead of polling)")

    p = command("ddl", "print the DDL script for a DBA to review (no connection needed)",
                "  sqlqueue ddl orders error --dialect mssql\n"
                "  sqlqueue ddl '\"sales\".\"orders\"' --dialect postgres --delayed > create-queues.sql\n"
                "  sqlqueue ddl orders --dialect postgres --delayed --migrate > migrate-queues.sql",
                connects=False)
    p.add_argument("queues", nargs="+", metavar="QUEUE")
    p.add_argument("--dialect", required=True, choices=DIALECT_NAMES)
    p.add_argument("--delayed", action="store_true", help="include the .Delayed tables")
    p.add_argument("--notify", action="store_true", help="include the PostgreSQL wake-up trigger")
    p.add_argument("--migrate", action="store_true",
                   help="print the migration of tables made by airflow-sqlqueue 0.1 instead (what check --repair does)")

    p = command("send", "send messages: --body, --body-file, or one message per line on stdin",
                "  sqlqueue send orders --body '{\"id\": 1}' --header NServiceBus.EnclosedMessageTypes=Sales.Order\n"
                "  seq 1000 | sqlqueue send orders --header source=seq\n"
                "  sqlqueue send orders --body-file order.json --ttbr 3600 --count 10\n"
                "  sqlqueue send orders --body 'later' --delay 60        # needs: create orders --delayed")
    p.add_argument("queue", metavar="QUEUE")
    body = p.add_mutually_exclusive_group()
    body.add_argument("--body", help="the body text (its bytes as given)")
    body.add_argument("--body-file", metavar="PATH", help="a file whose bytes are the body")
    p.add_argument("--header", action="append", default=[], metavar="K=V", help="a header (repeatable)")
    p.add_argument("--ttbr", type=float, metavar="SECONDS", help="time to be received (the row expires after it)")
    p.add_argument("--delay", type=float, metavar="SECONDS",
                   help="deliver after this many seconds (stored in the queue's .Delayed table)")
    p.add_argument("--count", type=int, default=1, metavar="N", help="send each message N times (default 1)")

    p = command("receive", "take messages from a queue and print them",
                "  sqlqueue receive orders --max 10\n"
                "  sqlqueue --json receive orders --max 1000 > orders.jsonl\n"
                "  sqlqueue receive orders --require || echo 'queue is empty'")
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("--max", type=int, default=1, metavar="N", help="at most this many messages (default 1)")
    p.add_argument("--mode", choices=MODES, default="receive-only",
                   help="receive-only (default) and sends-atomic-with-receive commit a message only after it is "
                        "printed; none deletes first (a message not printed is lost)")
    p.add_argument("--require", action="store_true", help="exit 1 when no message was received")

    p = command("peek", "print the depth estimate of a queue", "  sqlqueue peek orders")
    p.add_argument("queue", metavar="QUEUE")

    command("list", "every queue table in the database, with depth and age of the oldest message",
            "  sqlqueue --url postgresql://app@db/sales list\n  sqlqueue --json list")

    p = command("purge-expired", "delete expired messages in batches",
                "  sqlqueue purge-expired orders --batch-size 5000\n  sqlqueue purge-expired --all")
    p.add_argument("queues", nargs="*", metavar="QUEUE")
    p.add_argument("--all", action="store_true", help="every queue table in the database")
    p.add_argument("--batch-size", type=int, default=10_000, metavar="N", help="rows per transaction (10000)")

    p = command("check", "schema and index check (exit 1 when a finding remains)",
                "  sqlqueue check orders\n  sqlqueue check --all --repair")
    p.add_argument("queues", nargs="*", metavar="QUEUE")
    p.add_argument("--all", action="store_true", help="every queue table in the database")
    p.add_argument("--repair", action="store_true", help="fix what can be fixed (needs DDL rights)")

    p = command("retry-errors", "return failed messages to the queue named in their NServiceBus.FailedQ header",
                "  sqlqueue retry-errors --list\n"
                "  sqlqueue retry-errors --allow orders --filter failedq=orders --filter exception=TimeoutException\n"
                "  sqlqueue retry-errors --allow orders,payments --error-queue audit_errors --max 100")
    p.add_argument("--filter", action="append", default=[], metavar="K=V",
                   help="failedq=, exception= or type=: a substring of the FailedQ, exception type or message "
                        "type header (repeatable; all must match)")
    p.add_argument("--list", action="store_true", help="only list the failed messages, change nothing")
    p.add_argument("--max", type=int, metavar="N", help="return at most this many")
    p.add_argument("--allow", action="append", default=[], metavar="QUEUE[,QUEUE]",
                   help="a queue the retry may write to (repeatable; required to retry): a message whose FailedQ "
                        "names any other queue, or the error queue itself, stays, with the reason")

    p = command("error-groups", "count the error queue's groups into the summary tables beside it "
                "(SqlQueueErrorGroups): catch up with rows that came in, or count every row again",
                "  sqlqueue error-groups                    # count the rows above the high water\n"
                "  sqlqueue error-groups --rebuild          # after rows were deleted or changed outside the provider\n"
                "  sqlqueue --url postgresql://app@db/sales --error-queue '\"ops\".\"error\"' error-groups --json")
    p.add_argument("--rebuild", action="store_true",
                   help="clear the error queue's groups and count every row again (a pass over the queue)")

    archive.add_arguments(command)
    redirects.add_arguments(command)

    p = command("subscribe", "subscribe a queue to events (topics: .NET full type names) in the subscription "
                "table .NET endpoints share",
                "  sqlqueue subscribe analytics Sales.OrderPlaced Sales.IOrderEvent --create-table\n"
                "  sqlqueue --url postgresql://app@db/sales subscribe '\"public\".\"analytics\"' Sales.OrderPlaced")
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("topics", nargs="+", metavar="TOPIC")
    p.add_argument("--as-endpoint", dest="subscriber", metavar="NAME",
                   help="the endpoint name stored with the subscription (default: the queue's table name)")
    p.add_argument("--create-table", action="store_true", help="create the subscription table if it is missing")

    p = command("unsubscribe", "remove an endpoint's subscriptions to events",
                "  sqlqueue unsubscribe analytics Sales.OrderPlaced")
    p.add_argument("subscriber", metavar="ENDPOINT", help="the endpoint name (for a queue: its table name)")
    p.add_argument("topics", nargs="+", metavar="TOPIC")

    command("subscriptions", "list the subscription table", "  sqlqueue subscriptions\n  sqlqueue --json subscriptions")

    p = command("publish", "publish an event: one copy to every queue subscribed to its type or base types",
                "  sqlqueue publish Sales.OrderPlaced --body '{\"OrderId\": 7}' --content-type application/json\n"
                "  sqlqueue publish Sales.OrderPlaced --base-type Sales.IOrderEvent --body-file event.json")
    p.add_argument("event_type", metavar="EVENT_TYPE", help="the event's .NET full type name")
    p.add_argument("--base-type", action="append", default=[], metavar="TYPE",
                   help="a base class or interface of the event (repeatable): its subscribers get it too")
    body = p.add_mutually_exclusive_group()
    body.add_argument("--body", help="the body text (its bytes as given)")
    body.add_argument("--body-file", metavar="PATH", help="a file whose bytes are the body")
    p.add_argument("--header", action="append", default=[], metavar="K=V", help="a header (repeatable)")
    p.add_argument("--content-type", metavar="MIME", help="NServiceBus.ContentType of the body")
    p.add_argument("--ttbr", type=float, metavar="SECONDS", help="time to be received")

    p = command("demo", "run the end-to-end demo on a SQLite file",
                "  sqlqueue demo\n  sqlqueue demo --messages 2000", connects=False)
    p.add_argument("--output", default="demo-output", help="output folder (default ./demo-output)")
    p.add_argument("--messages", type=int, default=10_000)
    return parser
