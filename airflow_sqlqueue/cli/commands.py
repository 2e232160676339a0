"""The ``sqlqueue`` subcommands: each reads its arguments, calls the transport, prints the result."""

from __future__ import annotations

import argparse
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from airflow_sqlqueue.transport import OutgoingMessage, ReceivedMessage, SqlQueueTransport, ddl_script
from airflow_sqlqueue.transport import headers as h

from .output import age_text, emit_json, message_json, progress, table

SEND_CHUNK = 1000
RECEIVE_CHUNK = 500
PROGRESS_FROM = 2000


def run(args: argparse.Namespace) -> int:
    """Dispatch to the subcommand; return the exit code."""
    from .main import open_transport

    if args.command == "ddl":
        sys.stdout.write(ddl_script(args.dialect, args.queues, delayed=args.delayed))
        return 0
    if args.command == "demo":
        return demo(args)
    transport = open_transport(args)
    try:
        return COMMANDS[args.command](transport, args)
    finally:
        transport.close()


def create(transport: SqlQueueTransport, args: argparse.Namespace) -> int:
    names = transport.create_queues(args.queues, delayed=args.delayed)
    for name in names:
        if args.json:
            emit_json({"queue": name, "created": True, "delayed": args.delayed})
        else:
            print(f"created {name}" + (" (with delayed table)" if args.delayed else ""))
    return 0


def parse_pairs(pairs: list[str], what: str) -> dict[str, str]:
    """``K=V`` strings to a dict; a clear error for anything else."""
    from .main import UsageError

    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"{what} {pair!r} is not of the form KEY=VALUE")
        out[key] = value
    return out


def send(transport: SqlQueueTransport, args: argparse.Namespace) -> int:
    from .main import UsageError

    if args.count < 1:
        raise UsageError(f"--count must be 1 or more, got {args.count}")
    transport.address(args.queue)  # a bad name fails before anything is read or sent
    user_headers = parse_pairs(args.header, "--header")
    if args.body is not None:
        bodies: list[bytes] = [args.body.encode("utf-8")]
    elif args.body_file is not None:
        bodies = [Path(args.body_file).read_bytes()]
    elif not sys.stdin.isatty():
        bodies = [line.rstrip(b"\r\n") for line in sys.stdin.buffer if line.strip()]
    else:
        raise UsageError("nothing to send: give --body TEXT, --body-file PATH, or lines on stdin")
    messages = []
    for _ in range(args.count):
        for body in bodies:
            headers = {h.MESSAGE_ID: str(uuid.uuid4()), h.TIME_SENT: h.format_wire_time(), **user_headers}
            messages.append(OutgoingMessage(body=body, headers=headers, time_to_be_received=args.ttbr,
                                            delay=args.delay))
    for message in messages[:1]:
        message.validated()  # bad --ttbr/--delay/headers fail before anything is sent
    sent = 0
    with progress(f"sending to {args.queue}", len(messages), enabled=len(messages) >= PROGRESS_FROM) as bar:
        for start in range(0, len(messages), SEND_CHUNK):
            chunk = messages[start:start + SEND_CHUNK]
            transport.send_many(args.queue, chunk)
            sent += len(chunk)
            bar.advance(len(chunk))
    if args.json:
        emit_json({"queue": transport.name(args.queue), "sent": sent})
    else:
        print(f"sent {sent} message{'s' if sent != 1 else ''} to {transport.name(args.queue)}")
    return 0


def _print_message(message: ReceivedMessage, as_json: bool) -> None:
    if as_json:
        emit_json(message_json(message))
        return
    shown = message_json(message)
    body = shown.get("body", "base64:" + shown.get("body_base64", ""))
    kind = message.headers.get(h.ENCLOSED_MESSAGE_TYPES) or "-"
    print(f"{message.id}  {kind}  {body}")


def receive(transport: SqlQueueTransport, args: argparse.Namespace) -> int:
    from .main import UsageError

    if args.max < 1:
        raise UsageError(f"--max must be 1 or more, got {args.max}")
    got = 0
    with progress(f"receiving from {args.queue}", args.max, enabled=args.max >= PROGRESS_FROM) as bar:
        if args.mode == "none":
            while got < args.max:
                batch = transport.receive(args.queue, min(RECEIVE_CHUNK, args.max - got))
                for message in batch:
                    _print_message(message, args.json)
                got += len(batch)
                bar.advance(len(batch))
                if not batch:
                    break
        else:
            def handler(message: ReceivedMessage, context: Any) -> None:
                _print_message(message, args.json)
                sys.stdout.flush()  # printed before the receive commits
                bar.advance(1)

            summary = transport.process(args.queue, handler, mode=args.mode, max_messages=args.max,
                                        batch_size=min(RECEIVE_CHUNK, args.max), immediate_retries=0)
            got = summary.succeeded
    if not args.json:
        print(f"received {got} message{'s' if got != 1 else ''}", file=sys.stderr)
    return 1 if args.require and got == 0 else 0


def peek(transport: SqlQueueTransport, args: argparse.Namespace) -> int:
    depth = transport.peek(args.queue)
    if args.json:
        emit_json({"queue": transport.name(args.queue), "depth": depth})
    else:
        print(depth)
    return 0


def list_queues(transport: SqlQueueTransport, args: argparse.Namespace) -> int:
    rows = [(q, transport.peek(q), transport.oldest_age(q)) for q in transport.discover()]
    if args.json:
        for name, depth, age in rows:
            emit_json({"queue": name, "depth": depth, "oldest_age_seconds": age})
    else:
        print(table(["queue", "depth", "oldest"], [(n, d, age_text(a)) for n, d, a in rows]))
    return 0


def _targets(transport: SqlQueueTransport, args: argparse.Namespace) -> list[str]:
    from .main import UsageError

    if args.all and args.queues:
        raise UsageError("give queue names or --all, not both")
    if args.all:
        return transport.discover()
    if not args.queues:
        raise UsageError("name at least one queue, or pass --all")
    return [transport.name(q) for q in args.queues]


def purge_expired(transport: SqlQueueTransport, args: argparse.Namespace) -> int:
    from .main import UsageError

    if args.batch_size < 1:
        raise UsageError(f"--batch-size must be 1 or more, got {args.batch_size}")
    results = []
    for queue in _targets(transport, args):
        with progress(f"purging {queue}", None) as bar:
            count = transport.purge_expired(queue, batch_size=args.batch_size, progress=bar.advance)
        results.append((queue, count))
        if args.json:
            emit_json({"queue": queue, "purged": count})
    if not args.json:
        print(table(["queue", "purged"], results))
    return 0


def check(transport: SqlQueueTransport, args: argparse.Namespace) -> int:
    findings = []
    for queue in _targets(transport, args):
        findings.extend(transport.check(queue, repair=args.repair))
    if args.json:
        for f in findings:
            emit_json({"queue": f.queue, "code": f.code, "message": f.message, "repairable": f.repairable})
    elif findings:
        print(table(["queue", "finding", "repairable", "detail"],
                    [(f.queue, f.code, "yes" if f.repairable else "no", f.message) for f in findings]))
    else:
        print("no findings")
    return 1 if findings else 0


def _selector(filters: dict[str, str]) -> Any:
    from .main import UsageError

    fields = {"failedq": h.FAILED_Q, "exception": h.EXCEPTION_TYPE, "type": h.ENCLOSED_MESSAGE_TYPES}
    unknown = set(filters) - set(fields)
    if unknown:
        raise UsageError(f"unknown --filter {', '.join(sorted(unknown))}; use failedq=, exception= or type=")

    def select(message: ReceivedMessage) -> bool:
        return all(value in (message.headers.get(fields[key]) or "") for key, value in filters.items())

    return select


def retry_errors(transport: SqlQueueTransport, args: argparse.Namespace) -> int:
    select = _selector(parse_pairs(args.filter, "--filter"))
    if args.list:
        return _list_errors(transport, args, select)
    summary = transport.retry_errors(select=select, max_messages=args.max)
    if args.json:
        emit_json(summary.as_dict())
    else:
        rows = sorted(summary.returned.items())
        print(table(["queue", "returned"], rows) if rows else "nothing returned")
        for item in summary.left:
            print(f"left in the error queue: {item['id']}: {item['reason']}", file=sys.stderr)
    return 0


def _list_errors(transport: SqlQueueTransport, args: argparse.Namespace, select: Any) -> int:
    from airflow_sqlqueue.transport.headers import PoisonHeadersError, parse_headers

    groups: Counter[tuple[str, str]] = Counter()
    after = 0
    while True:
        rows = transport.browse(transport.error_queue, after_seq=after, limit=500)
        for row in rows:
            after = row.seq
            try:
                headers = parse_headers(row.headers)
            except PoisonHeadersError:
                headers = {}
            message = ReceivedMessage(row.id, headers, row.body, row.seq)
            if not select(message):
                continue
            key = (headers.get(h.FAILED_Q) or "-", headers.get(h.EXCEPTION_TYPE) or "-")
            groups[key] += 1
            if args.json:
                emit_json({**message_json(message), "failed_q": key[0], "exception_type": key[1],
                           "exception_message": headers.get(h.EXCEPTION_MESSAGE)})
        if len(rows) < 500:
            break
    if not args.json:
        print(table(["failed queue", "exception", "messages"], [(q, e, n) for (q, e), n in sorted(groups.items())]))
    return 0


def demo(args: argparse.Namespace) -> int:
    from airflow_sqlqueue.demo import format_report, run_demo

    report = run_demo(args.output, messages=args.messages)
    if args.json:
        emit_json(report)
    else:
        print(format_report(report))
    return 0


COMMANDS = {
    "create": create,
    "send": send,
    "receive": receive,
    "peek": peek,
    "list": list_queues,
    "purge-expired": purge_expired,
    "check": check,
    "retry-errors": retry_errors,
}
