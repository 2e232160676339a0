"""What every SQL queue operator shares: the connection id, the error queue, the hook, and rendered values."""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from airflow.sdk import BaseOperator

from airflow_sqlqueue.hooks.sqlqueue import SqlQueueHook
from airflow_sqlqueue.transport import InvalidMessageError, SqlQueueTransport


class SqlQueueBaseOperator(BaseOperator):
    """Base class of the operators: each reads its arguments, opens the hook, calls the transport once.

    :param sqlqueue_conn_id: an existing ``mssql``, ``odbc``, ``postgres`` or ``sqlite`` connection.
    :param error_queue: the error queue of that database.
    """

    def __init__(self, *, sqlqueue_conn_id: str = SqlQueueHook.default_conn_name, error_queue: str = "error",
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sqlqueue_conn_id = sqlqueue_conn_id
        self.error_queue = error_queue

    def get_hook(self) -> SqlQueueHook:
        """The hook on ``sqlqueue_conn_id``."""
        return SqlQueueHook(self.sqlqueue_conn_id, error_queue=self.error_queue)

    @contextmanager
    def open_transport(self) -> Iterator[SqlQueueTransport]:
        """The transport for the block; its connections are closed at the end."""
        with self.get_hook() as hook:
            yield hook.transport


def queue_list(queues: str | Iterable[str] | None) -> list[str] | None:
    """One queue or several as a list (None stays None: "every queue discovered")."""
    if queues is None:
        return None
    if isinstance(queues, str):
        return [queues]
    return list(queues)


def allowed_queue_list(queues: str | Iterable[str] | None) -> str | list[str]:
    """The queues a retry may write to, as a list (a template string stays as it is until rendered); an operator
    that retries must be given them: ``NServiceBus.FailedQ`` is a header anyone who can fail a message controls."""
    if queues is None or (not isinstance(queues, str) and not list(queues)):
        raise ValueError("allowed_queues: name the queues a retry may write to (a message whose FailedQ names any "
                         "other queue stays in the error queue, with the reason); see docs/error-queue.md")
    if isinstance(queues, str):
        return queues if "{{" in queues else [queues]
    return list(queues)


def rendered_number(value: Any, what: str, kind: type) -> Any:
    """A size as given, or the number a template rendered to as text (empty or ``None`` text: None)."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text in ("", "None"):
        return None
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"{what} rendered to {value!r}, which is not a number; make the template render "
                         f"{'a whole number' if kind is int else 'a number of seconds'}") from None


def rendered_list(value: Any, what: str) -> list[Any]:
    """A rendered template value as a list (tolerates non-native rendering of a list)."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            for parse in (json.loads, ast.literal_eval):
                try:
                    parsed = parse(text)
                except (ValueError, SyntaxError):
                    continue
                if isinstance(parsed, list):
                    return parsed
        raise InvalidMessageError(
            f"{what} rendered to a string, not a list: {text[:80]!r}. Pass the upstream task's output "
            "directly (messages=task.output), or set render_template_as_native_obj=True on the DAG")
    if isinstance(value, dict):
        return [value]
    if isinstance(value, Iterable) and not isinstance(value, bytes):
        return list(value)
    raise InvalidMessageError(f"{what} must be a list, got {type(value).__name__}")


def text_table(rows: list[dict[str, Any]], columns: Sequence[str]) -> str:
    """A plain-text table for the task log."""
    cells = [[str(row.get(c, "")) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)
