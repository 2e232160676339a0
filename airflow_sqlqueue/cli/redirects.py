"""``sqlqueue redirects list|add|remove``: the retry redirects of an error queue from the command line.

The same table and rules as the page's **Retry redirects** (``transport.errorqueue.redirects``): names are stored
canonical, the destination must exist, not the error queue, one redirect per source, no chains; a refused change
changes nothing. Every change is recorded like the page's: the row keeps who made it (``--as``, else the login
name), and with ``--conn-id`` the same event (``sqlqueue.redirect_created``, ``sqlqueue.redirect_removed``) is
written to Airflow's audit log. Queue names and users come from the database: printed through ``table`` /
``printable`` or ``json_line``, never raw.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from typing import Any

from airflow_sqlqueue.transport import SqlQueueTransport
from airflow_sqlqueue.transport.common.printable import printable
from airflow_sqlqueue.transport.errorqueue.redirects import (
    MAX_USER,
    Redirect,
    RedirectNotFoundError,
    RedirectRefusedError,
)

from .errors import OK, UsageError, one_line
from .output import emit_json, table

COLUMNS = ("source", "target", "created_by", "created_at")
#: The audit events, as the page writes them (``airflow_sqlqueue.plugins.redirects_api``).
CREATED, REMOVED = "sqlqueue.redirect_created", "sqlqueue.redirect_removed"


def add_arguments(command: Any) -> None:
    """Register ``redirects`` (``command`` is the parser's subcommand factory)."""
    p = command("redirects", "list, add or remove retry redirects: the failed messages of a source queue go to "
                "another queue when retried (every retry path follows them)",
                "  sqlqueue redirects list\n"
                "  sqlqueue redirects add orders orders_v2 --as alice\n"
                "  sqlqueue --conn-id sqlqueue_default redirects remove orders      # audited in Airflow too")
    p.add_argument("action", choices=("list", "add", "remove"))
    p.add_argument("queues", nargs="*", metavar="QUEUE",
                   help="add: SOURCE TARGET (the source may no longer exist; the target must); remove: SOURCE")
    p.add_argument("--as", dest="user", metavar="NAME",
                   help="who makes the change, stored and audited (default: the login name)")


def _user(args: argparse.Namespace) -> str:
    if args.user is not None:
        name = args.user.strip()
        if not name or len(name) > MAX_USER or not name.isprintable():
            raise UsageError(f"--as must be a printable name of 1 to {MAX_USER} characters")
        return name
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no login name (a container without a passwd entry)
        return "sqlqueue"


def _audit(args: argparse.Namespace, event: str, user: str, error_queue: str, redirect: Redirect) -> None:
    """With ``--conn-id``, the page's audit row in Airflow's audit log; a failure to write it is said on stderr
    (the change is made, and kept)."""
    if not args.conn_id:
        return
    details = {"conn_id": args.conn_id, "error_queue": error_queue, "source": redirect.source,
               "target": redirect.target, "via": "cli"}
    try:
        from airflow.models.log import Log
        from airflow.utils.session import create_session

        with create_session() as session:
            session.add(Log(event=event, owner=user, owner_display_name=user,
                            extra=json.dumps(details, sort_keys=True)))
    except Exception as exc:  # noqa: BLE001 - Airflow missing or its database unreachable
        print(printable(f"sqlqueue: warning: not written to Airflow's audit log ({one_line(exc)})"), file=sys.stderr)


def redirects_command(transport: SqlQueueTransport, args: argparse.Namespace) -> int:
    wanted = {"list": 0, "add": 2, "remove": 1}[args.action]
    if len(args.queues) != wanted:
        usage = {"list": "redirects list", "add": "redirects add SOURCE TARGET", "remove": "redirects remove SOURCE"}
        raise UsageError(f"{args.action} takes {wanted or 'no'} queue name{'s' if wanted != 1 else ''}: "
                         f"sqlqueue {usage[args.action]}")
    user = _user(args) if args.action != "list" else ""
    error_queue = transport.name(transport.error_queue)
    if not transport.exists(error_queue):
        raise UsageError(f"error queue {error_queue!r} does not exist; name it with --error-queue")
    redirects = transport.errors().retry_redirects
    if args.action == "list":
        found = redirects.list()
        if args.json:
            for item in found:
                emit_json(item.as_dict())
        else:
            print(table(COLUMNS, [[r.as_dict()[c] for c in COLUMNS] for r in found]) if found
                  else "no retry redirects: retries go to the queue each message failed in")
        return OK
    try:
        if args.action == "add":
            done = redirects.create(args.queues[0], args.queues[1], created_by=user)
        else:
            done = redirects.remove(args.queues[0])
    except RedirectRefusedError as exc:
        raise UsageError(str(exc)) from None
    except RedirectNotFoundError as exc:
        raise UsageError(f"{exc} (see `sqlqueue redirects list`)") from None
    _audit(args, CREATED if args.action == "add" else REMOVED, user, error_queue, done)
    if args.json:
        emit_json({"action": "added" if args.action == "add" else "removed", **done.as_dict()})
    elif args.action == "add":
        print(printable(f"retries of {done.source} now go to {done.target}"))
    else:
        print(printable(f"removed the redirect {done.source} -> {done.target}: retries of {done.source} go back "
                        "to it"))
    return OK
