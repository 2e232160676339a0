"""Exit codes of ``sqlqueue`` and which errors map to which."""

from __future__ import annotations

from airflow_sqlqueue.transport import (
    InvalidAddressError,
    InvalidMessageError,
    QueueNotFoundError,
    SqlQueueError,
    UnsupportedConnectionError,
)

OK, FINDINGS, USAGE, DATABASE = 0, 1, 2, 3


class UsageError(SqlQueueError):
    """Wrong or missing arguments (exit 2)."""


#: Input errors (exit 2): arguments, URLs, queue names, message fields, and queues that do not exist.
INPUT_ERRORS = (UsageError, InvalidAddressError, InvalidMessageError, UnsupportedConnectionError, QueueNotFoundError,
                ValueError)


def exit_code(exc: BaseException) -> int:
    """2 for input errors, 3 for connection and database errors."""
    return USAGE if isinstance(exc, INPUT_ERRORS) else DATABASE


def one_line(exc: BaseException) -> str:
    """The first line of an error's text (its type name when it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
