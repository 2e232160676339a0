"""Output for people (aligned tables) and for scripts (one JSON object per line)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from airflow_sqlqueue.transport import ReceivedMessage
from airflow_sqlqueue.transport.common.printable import printable, printable_json
from airflow_sqlqueue.transport.wire import headers as h
from airflow_sqlqueue.transport.wire.payload import to_payload


def message_json(message: ReceivedMessage) -> dict[str, Any]:
    """A received message as ``{"id", "headers", "body"}`` (``body_base64`` when the body is not UTF-8; ``body``
    null for a NULL body): the provider's one payload codec, with header text kept exactly (``json_line``
    escapes what a terminal must not see)."""
    return to_payload(message, ("id", "headers"), exact=True)


def message_line(message: ReceivedMessage) -> str:
    """A received message on one line for people: id, message type, body (newlines shown as \\n, every control
    and bidi character escaped: see ``terminal.printable``)."""
    shown = message_json(message)
    body = (shown["body"] or "") if "body" in shown else "base64:" + shown["body_base64"]
    kind = message.headers.get(h.ENCLOSED_MESSAGE_TYPES) or "-"
    return printable(f"{message.id}  {kind}  {body}")


def json_line(obj: Any) -> str:
    """One JSON object as a line: non-ASCII as it is, except controls, bidi and invisible characters and lone
    surrogates (from a stored ``"\\ud800"`` escape), written as JSON escapes (the same value for a parser)."""
    return printable_json(json.dumps(obj, ensure_ascii=False, default=str))


def emit_json(obj: Any) -> None:
    """Print one JSON object on its own line."""
    sys.stdout.write(json_line(obj) + "\n")


def write_line_now(text: str) -> None:
    """Write one line to stdout completely, now, or raise OSError (a message counts as printed only then).

    With ``PYTHONUNBUFFERED`` (common in containers) ``sys.stdout`` writes straight to the file, and a short
    write into a pipe whose reader went away drops the rest of the line without an error: write the bytes
    ourselves until every one is taken.
    """
    sys.stdout.flush()  # whatever was printed before goes first
    data = memoryview((text + "\n").encode("utf-8"))
    out = sys.stdout.buffer
    while data:
        written = out.write(data)
        if written is None:  # a non-blocking stdout that is full: nothing was taken yet
            raise BlockingIOError("stdout is not accepting output")
        data = data[written:]
    out.flush()


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain aligned text table (cells escaped for the terminal: see ``terminal.printable``)."""
    cells = [[printable(name) for name in headers]] + [["" if c is None else printable(c) for c in row]
                                                       for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def age_text(seconds: float | None) -> str:
    """A short human age: 42s, 7m, 3h, 2d."""
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{max(seconds, 0):.0f}s"


class Progress:
    """A progress bar on stderr when it is a terminal and rich is installed; silent otherwise."""

    def __init__(self, bar: Any = None, task: Any = None) -> None:
        self._bar = bar
        self._task = task

    def advance(self, n: int) -> None:
        if self._bar is not None:
            self._bar.advance(self._task, n)


@contextmanager
def progress(description: str, total: int | None, *, enabled: bool = True) -> Iterator[Progress]:
    """Show progress on stderr for long work (only with ``enabled``, a terminal on stderr, and rich installed).

    Output on stdout is routed above the bar only when stdout is the terminal too; redirected stdout
    (a file, a pipe) is left alone.
    """
    if not enabled or not sys.stderr.isatty():
        yield Progress()
        return
    try:
        from rich.console import Console
        from rich.progress import Progress as RichProgress
    except ImportError:
        yield Progress()
        return
    with RichProgress(console=Console(stderr=True), transient=True, redirect_stdout=sys.stdout.isatty(),
                      redirect_stderr=False) as bar:
        yield Progress(bar, bar.add_task(description, total=total))
