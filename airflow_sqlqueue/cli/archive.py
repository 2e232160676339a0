"""``sqlqueue archive-failed`` and ``sqlqueue archives list|show|restore``: the error archive from the command line.

Everything printed from an archive (ids, queue names, group fields, previews) went through ``terminal.printable``
(tables) or ``json_line`` (``--json``): rows are untrusted and never reach the terminal raw.
"""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta, timezone

from airflow_sqlqueue.archive.error_archive import (
    ArchiveSelection,
    archive_failed,
    archive_page,
    list_archives,
    read_archive,
    restore_archive,
)
from airflow_sqlqueue.transport import SqlQueueTransport
from airflow_sqlqueue.transport.common.printable import printable
from airflow_sqlqueue.transport.errorqueue.previews import FailedFilter

from .errors import OK, UsageError
from .output import emit_json, table

SUMMARY_COLUMNS = ("archive_id", "status", "queue", "rows", "deleted", "restored", "min_time_of_failure",
                   "max_time_of_failure")


def add_arguments(command: object) -> None:
    """Register the two subcommands (``command`` is the parser's subcommand factory)."""
    p = command("archive-failed",  # type: ignore[operator]
                "archive failed messages older than a cut-off and/or of one group to Parquet with a manifest, "
                "then delete them",
                "  sqlqueue archive-failed --location /srv/error-archive --older-than-days 30\n"
                "  sqlqueue archive-failed --location s3://bucket/errors --exception-type System.TimeoutException")
    p.add_argument("--location", required=True, metavar="DIR_OR_URI",
                   help="a local directory or a URI pyarrow opens (s3://, gs://, file://)")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--older-than-days", type=float, metavar="DAYS",
                      help="messages that failed longer ago than this (a message whose TimeOfFailure cannot be "
                           "read is never older)")
    when.add_argument("--cutoff", metavar="ISO_TIME", help="messages that failed before this time (with its zone)")
    p.add_argument("--failed-q", metavar="QUEUE", help="only messages whose NServiceBus.FailedQ is this")
    p.add_argument("--exception-type", metavar="TYPE", help="only this exception type (full name, as stored)")
    p.add_argument("--message-type", metavar="TYPE", help="only this NServiceBus.EnclosedMessageTypes value")
    p.add_argument("--search", metavar="TEXT", help="only messages whose headers contain this text")
    p.add_argument("--batch-size", type=int, default=500, metavar="N", help="rows per transaction (500)")
    p.add_argument("--max", type=int, metavar="N", help="archive at most this many messages")

    p = command("archives", "list, show or restore the error archives at a location",  # type: ignore[operator]
                "  sqlqueue archives list --location /srv/error-archive\n"
                "  sqlqueue archives show 20260101T000000Z-1a2b3c4d --location /srv/error-archive --limit 20\n"
                "  sqlqueue archives restore 20260101T000000Z-1a2b3c4d --location /srv/error-archive --id 6f1e...")
    p.add_argument("action", choices=("list", "show", "restore"))
    p.add_argument("archive_id", nargs="?", metavar="ARCHIVE_ID", help="for show and restore")
    p.add_argument("--location", required=True, metavar="DIR_OR_URI")
    p.add_argument("--id", dest="ids", action="append", metavar="ID",
                   help="restore: only this native message id (repeatable; default: every message)")
    p.add_argument("--limit", type=int, default=50, metavar="N", help="show: messages per page (50)")
    p.add_argument("--after", type=int, default=0, metavar="SEQ", help="show: messages after this position")
    p.add_argument("--batch-size", type=int, default=500, metavar="N", help="restore: rows per transaction (500)")


def needs_connection(args: argparse.Namespace) -> bool:
    """``archives list`` and ``archives show`` read only the location."""
    return not (args.command == "archives" and args.action in ("list", "show"))


def _cutoff(args: argparse.Namespace) -> datetime | None:
    if args.older_than_days is not None:
        if not 0 <= args.older_than_days <= 100_000:
            raise UsageError(f"--older-than-days must be from 0 to 100000, got {args.older_than_days}")
        return datetime.now(timezone.utc) - timedelta(days=args.older_than_days)
    if args.cutoff is None:
        return None
    try:
        when = datetime.fromisoformat(args.cutoff)
    except ValueError:
        raise UsageError(f"--cutoff {args.cutoff!r} is not an ISO 8601 time; write e.g. 2026-01-31T00:00:00+00:00"
                         ) from None
    if when.tzinfo is None:
        raise UsageError("--cutoff needs its zone, e.g. 2026-01-31T00:00:00+00:00")
    return when


def archive_failed_command(transport: SqlQueueTransport, args: argparse.Namespace) -> int:
    where = FailedFilter(args.failed_q, args.exception_type, args.message_type, args.search)
    selection = ArchiveSelection(cutoff=_cutoff(args), where=where, max_messages=args.max)
    labels = {"conn_id": args.conn_id} if args.conn_id else {}
    result = archive_failed(transport, transport.error_queue, args.location, selection, batch_size=args.batch_size,
                            labels=labels)
    if args.json:
        emit_json(result)
        return OK
    print(table(SUMMARY_COLUMNS, [[result.get(c) for c in SUMMARY_COLUMNS]]))
    if result["resumed"]:
        print(printable(f"finished the deletion of interrupted archives: {', '.join(result['resumed'])}"))
    if result["not_found"]:
        print(printable(f"{result['not_found']} selected messages were gone before deletion (not restorable)"))
    return OK


def archives_command(transport: SqlQueueTransport | None, args: argparse.Namespace) -> int:
    if args.action != "list" and not args.archive_id:
        raise UsageError(f"archives {args.action} needs an ARCHIVE_ID (see `sqlqueue archives list`)")
    if args.action == "list":
        found = list_archives(args.location)
        if args.json:
            for item in found:
                emit_json(item)
        else:
            print(table(SUMMARY_COLUMNS, [[a.get(c) for c in SUMMARY_COLUMNS] for a in found])
                  if found else "no archives at this location")
        return OK
    if args.action == "show":
        if not 1 <= args.limit <= 10_000:
            raise UsageError(f"--limit must be from 1 to 10000, got {args.limit}")
        summary = read_archive(args.location, args.archive_id)
        page = archive_page(args.location, args.archive_id, after_seq=args.after, limit=args.limit)
        if args.json:
            emit_json({"archive": summary, "messages": page})
            return OK
        print(table(SUMMARY_COLUMNS, [[summary.get(c) for c in SUMMARY_COLUMNS]]))
        print()
        columns = ("seq", "id", "time_of_failure", "failed_q", "exception_type", "restored", "body_preview")
        print(table(columns, [[m[c] if c != "body_preview" else m[c][:60] for c in columns] for m in page])
              if page else "no messages")
        return OK
    assert transport is not None
    result = restore_archive(transport, args.location, args.archive_id, ids=args.ids, batch_size=args.batch_size)
    if args.json:
        emit_json(result)
    else:
        print(printable(f"restored {result['restored']} messages into {result['queue']} "
                        f"({result['already_restored']} were restored before, {result['already_present']} were "
                        "already there)"))
    return OK
