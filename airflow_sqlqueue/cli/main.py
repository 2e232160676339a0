"""``sqlqueue``: parse the arguments, run the subcommand, turn errors into one line and an exit code.

Exit codes: 0 success; 1 findings (``check`` found problems, ``receive --require`` found nothing);
2 usage or input errors; 3 connection or database errors.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Sequence

from airflow_sqlqueue.transport.common.printable import printable, printable_lines
from airflow_sqlqueue.transport.common.redaction import redact_arguments

from . import commands
from .errors import OK, exit_code, one_line
from .parser import build_parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``sqlqueue``; return the exit code."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(arguments)
    arguments.append(os.environ.get("SQLQUEUE_URL") or "")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_ScrubbingFormatter("%(levelname)s %(name)s: %(message)s", arguments=arguments))
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.ERROR, handlers=[handler])
    try:
        return commands.run(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader closed stdout (e.g. `| head -1`): not an error of ours
        _silence_stdout()
        return OK
    except Exception as exc:  # one clear line, never a traceback unless --debug
        if args.debug:
            sys.stderr.write(printable_lines(redact_arguments(traceback.format_exc(), arguments)))
        sys.stderr.write(f"sqlqueue: error: {printable(redact_arguments(one_line(exc), arguments))}\n")
        return exit_code(exc)


class _ScrubbingFormatter(logging.Formatter):
    """Log lines (``--debug``) without passwords (those of the URLs among the arguments blanked whole)."""

    def __init__(self, fmt: str, *, arguments: Sequence[str]) -> None:
        super().__init__(fmt)
        self.arguments = arguments

    def format(self, record: logging.LogRecord) -> str:
        return printable_lines(redact_arguments(super().format(record), self.arguments))


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
