"""The ``sqlqueue`` subcommands: each reads its arguments, calls the transport, prints the result."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from pathlib import Path

from airflow_sqlqueue.transport import (
    OutgoingMessage,
    QueueNotFoundError,
    ReceivedMessage,
    SqlQueueTransport,
    ddl_script,
)
from airflow_sqlqueue.transport.common.printable import printable
from airflow_sqlqueue.transport.errorqueue.groups import FailureGroups, failure_of
from airflow_sqlqueue.transport.wire import headers as h

from . import archive, redirects
from .connection import open_transport
from .errors import FINDINGS, OK, UsageError
from .output import age_text, emit_json, json_line, message_json, message_line, progress, table, write_line_now
from .receiving import ReceiveCount, receive_and_print

SEND_CHUNK = 1000
PROGRESS_FROM = 2000
BROWSE_CHUNK = 500


def run(args: argparse.Namespace) -> int:
    """Dispatch to the subcommand; return the exit code."""
    if args.command == "ddl":
        sys.stdout.write(ddl_script(args.dialect, args.queues, delayed=args.delayed, notify=args.notify,
                                    migrate=args.migrate))
        return 0
    if args.command == "demo":
        return demo(args)
    if not archive.needs_connection(args):
        return archive.archives_command(None, args)
    transport = open_transport(args)
    try:
        return COMMANDS[args.command](transport, args)
    finally:
        transport.close()


def _positive(value: int | None, option: str) -> None:
    if value is not None and value < 1:
        raise UsageError(f"{option} must be 1 or more, got {value}")


def _pairs(pairs: list[str], option: str) -> dict[str, str]:
    """``K=V`` strings to a dict; a clear error for anything else."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"{option} {pair!r} is not of the form KEY=VALUE")
        out[key] = value
    return out


def _require(transport: SqlQueueTransport, queues: Iterable[str]) -> list[str]:
    """Canonical names of queues that exist; every name is validated before any is looked up."""
    names = [transport.name(q) for q in queues]
    for name in names:
        if not transport.exists(name):
            raise QueueNotFoundError(f"queue {name!r} does not exist; check the name (and schema), or create it "
                                     "with `sqlqueue create`")
    return names


def _delayed_table(transport: SqlQueueTransport, queue: str) -> str:
    return transport.dialect.format_address(transport.dialect.delayed_address(transport.address(queue)))


def _progressing(args: argparse.Namespace, long: bool) -> bool:
    """Progress bars only for people: not with --json, and only for long work (stderr must be a terminal)."""
    return long and not args.json


# -- create ----------------------------------------------------------------------------------------
def create(transport: SqlQueueTransport, args: argparse.Namespace) -> int:
    names = [transport.name(q) for q in args.queues]  # every name valid before anything is created
    for name in names:
        existed = transport.exists(name)
        transport.create_queue(name, delayed=args.delayed, notify=args.notify)
        if args.json:
            emit_json({"queue": name, "created": not existed, "delayed": args.delayed,
                       **({"notify": True} if args.notify else {})})
        else:
            print(printable(f"{name} already exists" if existed else f"created {name}")
                  + (" (with its delayed table)" if args.delayed else "")
                  + (" (with its wake-up trigger)" if args.notify else ""))
    return OK


# -- send ------------------------------------------------------------------------------------------
def send(transport: SqlQueueTransport, args: argparse.Namespace) -> int:
    _positive(args.count, "--count")
    user_headers = _pairs(args.header, "--header")
    OutgoingMessage(b"", user_headers, args.ttbr, args.delay).validated()  # bad --ttbr/--delay/headers
    name = _require(transport, [args.queue])[0]
    if args.delay is not None and not transport.exists(_delayed_table(transport, name)):
        raise QueueNotFoundError(f"queue {name!r} has no delayed table for --delay; create it with "
                                 "`sqlqueue create QUEUE --delayed`")
    bodies = _bodies(args)
    total = None if args.body is None and args.body_file is None else args.count
    # the transport fills in the standard headers a .NET sender writes (MessageId, TimeSent, ...); --header wins
    messages = (OutgoingMessage(body, user_headers, args.ttbr, args.delay)
                for body in bodies for _ in range(args.count))
    sent = 0
    long = total is None or total >= PROGRESS_FROM
    with progress(f"sending to {name}", total, enabled=_progressing(args, long)) as bar:
        while chunk := list(islice(messages, SEND_CHUNK)):
            transport.send_many(name, chunk)
            sent += len(chunk)
            bar.advance(len(chunk))
    if args.json:
        emit_json({"queue": name, "sent": sent})
    else:
        print(printable(f"sent {sent} message{'s' if sent != 1 else ''} to {name}"))
    return OK


def _bodies(args: argparse.Namespace) -> Iterator[bytes]:
    """The bodies to send: --body, --body-file, or each non-blank line of stdin (line ending removed)."""
    if args.body is not None:
        return iter([os.fsencode(args.body)])  # the bytes given on the command line
    if args.body_file is not None:
        try:
            return iter([Path(args.body_file).read_bytes()])
        except OSError as exc:
            raise UsageError(f"cannot read --body-file {args.body_file!r}: {exc.strerror or exc}") from None
    if sys.stdin is None or sys.stdin.isatty():
        raise UsageError("nothing to send: give --body TEXT, --body-file PATH, or lines on stdin")
    return (line.rstrip(b"\r\n") for line in sys.stdin.buffer if line.strip())


# -- receive and peek --------------------------------------------------------------------------------
def receive(transport: SqlQueueTransport, args: argparse.Namespace) -> int:
    _positive(args.max, "--max")
    name = _require(transport, [args.queue])[0]
    if transport.exists(_delayed_table(transport, name)):
        transport.move_due_delayed(name)  # as the endpoint's own mover would
    count = ReceiveCount()
    with progress(f"receiving from {name}", args.max,
                  enabled=_progressing(args, args.max >= PROGRESS_FROM)) as bar:
        def render(message: ReceivedMessage) -> str:
            return json_line(message_json(message)) if args.json else message_line(message)

        def write(line: str) -> None:  # the whole line is out before the receive commits
            write_line_now(line)
            bar.advance(1)

        try:
            receive_and_print(transport, name, args.max, render, write, count, held=args.mode != "none")
        except OSError:
            if count.lost:
                print(f"sqlqueue: {count.lost} received message{'s' if count.lost != 1 else ''} not printed "
                      "(stdout closed) are lost: --mode none deletes before printing", file=sys.stderr)
            raise
    if not args.json:
        dropped = [f"{n} {what}" for n, what in ((count.expired, "expired dropped"),
                                                  (count.poison, "poison moved to the error queue"),
                                                  (count.forwarded, "forwarded")) if n]
        print(f"received {count.printed} message{'s' if count.printed != 1 else ''}"
              + (f" ({', '.join(dropped)})" if dropped else ""), file=sys.stderr)
    return FINDINGS if args.require and count.printed == 0 else OK


def peek(transport: SqlQueueTransport, args: argparse.Namespace) -> int:
    name = _require(transport, [args.queue])[0]
    depth = transport.peek(name)
    if args.json:
        emit_json({"queue": name, "depth": depth})
    else:
        print(depth)
    return OK


def list_queues(transport: SqlQueueTransport, args: argparse.Namespace) -> int:
    rows = []
    for queue in transport.discover():
        try:
            rows.append((queue, transport.peek(queue), transport.oldest_age(queue)))
        except QueueNotFoundError:
            continue  # dropped between discovery and its peek: no longer a queue to list
    if args.json:
        for name, depth, age in rows:
            emit_json({"queue": name, "depth": depth, "oldest_age_seconds": age})
    else:
        print(table(["queue", "depth", "oldest"], [(n, d, age_text(a)) for n, d, a in rows]))
    return OK


# -- maintenance -------------------------------------------------------------------------------------
def _targets(transport: SqlQueueTransport, args: argparse.Namespace) -> list[str]:
    if args.all and args.queues:
        raise UsageError("give queue names or --all, not both")
    if args.all:
        return transport.discover()
    if not args.queues:
        raise UsageError("name at least one queue, or pass --all")
    return _require(transport, args.queues)


def purge_expired(transport: SqlQueueTransport, args: argparse.Namespace) -> int:
    _positive(args.batch_size, "--batch-size")
    results = []
    for queue in _targets(transport, args):
        with progress(f"purging {queue}", None, enabled=_progressing(args, True)) as bar:
            count = transport.purge_expired(queue, batch_size=args.batch_size, progress=bar.advance)
        results.append((queue, count))
        if args.json:
            emit_json({"queue": queue, "purged": count})
    if not args.json:
        print(table(["queue", "purged"], results))
    return OK


def check(transport: SqlQueueTransport, args: argparse.Namespace) -> int:
    """Findings per queue; with --repair the repairable ones are fixed and reported as repaired."""
    report = []  # (finding, status)
    remaining = 0
    queues = _targets(transport, args)
    for queue in queues:
        before = transport.check(queue)
        after = transport.check(queue, repair=True) if args.repair and any(f.repairable for f in before) else before
        left = {f.code for f in after}
        report += [(f, "repaired") for f in before if f.code not in left]
        report += [(f, "not checked" if f.not_checked else "repairable" if f.repairable else "manual")
                   for f in after]
        remaining += sum(1 for f in after if not f.not_checked)  # what could not be checked fails nothing
    if args.json:
        for f, status in report:
            emit_json({"queue": f.queue, "code": f.code, "message": f.message, "repairable": f.repairable,
                       "repaired": status == "repaired", "not_checked": f.not_checked})
    elif report:
        print(table(["queue", "finding", "status", "detail"], [(f.queue, f.code, s, f.message) for f, s in report]))
    else:
        print(f"no findings in {len(queues)} queue{'s' if len(queues) != 1 else ''}")
    return FINDINGS if remaining else OK


# -- error queue -------------------------------------------------------------------------------------
def _selector(filters: dict[str, str]) -> Callable[[ReceivedMessage], bool]:
    fields = {"failedq": h.FAILED_Q, "exception": h.EXCEPTION_TYPE, "type": h.ENCLOSED_MESSAGE_TYPES}
    unknown = set(filters) - set(fields)
    if unknown:
        raise UsageError(f"unknown --filter {', '.join(sorted(unknown))}; use failedq=, exception= or type=")

    def select(message: ReceivedMessage) -> bool:
        return all(value in (message.headers.get(fields[key]) or "") for key, value in filters.items())

    return select


def retry_errors(transport: SqlQueueTransport, args: argparse.Namespace) -> int:
    _positive(args.max, "--max")
    select = _selector(_pairs(args.filter, "--filter"))
    _require(transport, [transport.name(transport.error_queue)])
    if args.list:
        return _list_errors(transport, args, select)
    allowed = [q.strip() for item in args.allow for q in item.split(",") if q.strip()]
    if not allowed:
        raise UsageError("name the queues the retry may write to with --allow QUEUE (repeatable): a message's "
                         "NServiceBus.FailedQ is a header anyone who can fail a message controls, so it is never "
                         "trusted as a destination on its own; --list shows where the failed messages came from")
    try:
        errors = transport.errors(allowed=allowed)
    except ValueError as exc:
        raise UsageError(f"--allow: {exc}") from None
    summary = errors.retry_all(select, args.max)
    if args.json:
        emit_json(summary.as_dict())
    else:
        rows = sorted(summary.returned.items())
        print(table(["queue", "returned"], rows) if rows else "nothing returned")
        for item in summary.left:
            print(printable(f"left in the error queue: {item['id']}: {item['reason']}"), file=sys.stderr)
    return OK


def error_groups(transport: SqlQueueTransport, args: argparse.Namespace) -> int:
    """Catch the error groups summary up (or rebuild it) and say how it compares with the queue."""
    _require(transport, [transport.name(transport.error_queue)])
    summary = transport.errors().summary
    counted = summary.rebuild() if args.rebuild else summary.catch_up()
    state = summary.read(catch_up_rows=0, check=True)  # the exact count, at once
    result = {"error_queue": summary.name, "rebuilt": bool(args.rebuild), "counted_now": counted,
              "rows": state.rows, "grouped": state.counted, "groups": len(state.groups), "behind": state.behind,
              "drift": state.drift, "high_water": state.high_water}
    if args.json:
        emit_json(result)
    else:
        print(table(["error queue", "rows", "grouped", "groups", "counted now", "drift"],
                    [(printable(summary.name), state.rows, state.counted, len(state.groups), counted, state.drift)]))
        if state.drift:
            print(f"the groups count {state.drift:+d} rows fewer than the queue holds: rows were taken out or "
                  "changed outside this provider; run with --rebuild", file=sys.stderr)
    return OK


def _list_errors(transport: SqlQueueTransport, args: argparse.Namespace,
                 select: Callable[[ReceivedMessage], bool]) -> int:
    """List (never take) the failed messages that match: one JSON object each, or a table grouped by cause."""
    groups = FailureGroups()
    for row in transport.errors().rows(BROWSE_CHUNK):
        failure = failure_of(row.headers)
        message = ReceivedMessage(row.id, failure.headers, row.body, row.seq)
        if not select(message):
            continue
        groups.add(failure)
        if args.json:
            emit_json({**message_json(message), "failed_q": failure.headers.get(h.FAILED_Q),
                       "exception_type": failure.headers.get(h.EXCEPTION_TYPE),
                       "exception_message": failure.headers.get(h.EXCEPTION_MESSAGE)})
    if not args.json:
        rows = [(g["failed_q"], g["exception_type"], g["count"]) for g in groups.ordered()]
        print(table(["failed queue", "exception", "messages"], rows) if rows else "no failed messages")
    return OK


def demo(args: argparse.Namespace) -> int:
    from airflow_sqlqueue.demo import format_report, run_demo

    report = run_demo(args.output, messages=args.messages,
                      progress=lambda text: print(f"sqlqueue demo: {text}", file=sys.stderr, flush=True))
    if args.json:
        emit_json(report)
    else:
        print(format_report(report))
    return 0 if report["adds_up"] else 1  # 1: the counts do not add up (a finding)


# -- publish / subscribe ------------------------------------------------------------------------------
def subscribe(transport: SqlQueueTransport, args: argparse.Namespace) -> int:
    if args.create_table:
        transport.create_subscription_table()
    name = _require(transport, [args.queue])[0]
    rows = transport.subscribe(name, args.topics, endpoint=args.subscriber)
    if args.json:
        for row in rows:
            emit_json(row.as_dict())
    else:
        print(f"subscribed {name} (endpoint {rows[0].endpoint}) to {', '.join(r.topic for r in rows)}")
    return OK


def unsubscribe(transport: SqlQueueTransport, args: argparse.Namespace) -> int:
    removed = transport.unsubscribe(args.subscriber, args.topics)
    if args.json:
        emit_json({"endpoint": args.subscriber, "removed": removed})
    else:
        print(f"removed {removed} subscription{'s' if removed != 1 else ''} of {args.subscriber}")
    return OK


def subscriptions(transport: SqlQueueTransport, args: argparse.Namespace) -> int:
    rows = transport.subscriptions()
    if args.json:
        for row in rows:
            emit_json(row.as_dict())
    else:
        print(table(["topic", "endpoint", "queue address"],
                    h.printable([(r.topic, r.endpoint, r.queue_address) for r in rows])))
    return OK


def publish(transport: SqlQueueTransport, args: argparse.Namespace) -> int:
    headers = _pairs(args.header, "--header")
    body = next(_bodies(args)) if args.body is not None or args.body_file is not None else b""
    result = transport.publish(args.event_type, OutgoingMessage(body, headers, args.ttbr,
                                                                content_type=args.content_type),
                               base_types=args.base_type)
    if args.json:
        emit_json(result.as_dict())
    else:
        where = ", ".join(result.sent) or "no subscriber"
        print(f"published {args.event_type} ({result.message_id}) to {where}")
    return OK


COMMANDS = {
    "subscribe": subscribe,
    "unsubscribe": unsubscribe,
    "subscriptions": subscriptions,
    "publish": publish,
    "create": create,
    "send": send,
    "receive": receive,
    "peek": peek,
    "list": list_queues,
    "purge-expired": purge_expired,
    "check": check,
    "retry-errors": retry_errors,
    "error-groups": error_groups,
    "archive-failed": archive.archive_failed_command,
    "archives": archive.archives_command,
    "redirects": redirects.redirects_command,
}
