"""Operators for SQL queue tables: drain, send, create queues, purge expired, schema check, error-queue retry.

The operators are thin: each reads its arguments, gets a ``SqlQueueHook`` and calls the transport. The one
with policy of its own is ``SqlQueueDrainOperator`` when it hands messages to downstream tasks: every batch is
stored durably (in the task state store, or as Parquet files) *before* its receive transaction commits, so a
crash at any point loses nothing; after a crash a message may be delivered twice, always with the same Id.
"""

from __future__ import annotations

import ast
import base64
import json
import re
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from airflow_sqlqueue.hooks.sqlqueue import SqlQueueHook
from airflow_sqlqueue.transport import (
    Finding,
    InvalidMessageError,
    OutgoingMessage,
    ReceivedMessage,
    SqlQueueTransport,
    TransactionMode,
)
from airflow_sqlqueue.transport.error_queue import failure_selector
from airflow_sqlqueue.transport.validation import check_count, check_seconds

from .parquet import ParquetBatchWriter

if TYPE_CHECKING:
    from airflow.sdk import Context

#: Key under which a drain keeps what it already handed downstream (survives retries of the task instance).
SPOOL_KEY = "sqlqueue_drain_spool"
#: Default of ``max_messages`` (a list for ``.expand()`` holds at most ``[core] max_map_length`` items).
DEFAULT_MAX_MESSAGES = 1000
#: XCom key of the drain's counts (delivered, taken, expired, poison, forwarded, batches, seconds).
DRAIN_SUMMARY_KEY = "drain_summary"
DEFAULT_BATCH_SIZE = 100


class SqlQueueCheckFailedError(AirflowFailException):
    """The schema and index check found problems (not retried: a retry would find the same)."""


# -- message conversion ------------------------------------------------------------------------------
def message_to_dict(message: ReceivedMessage) -> dict[str, Any]:
    """A received message as a JSON-serialisable dict (the items of the drain's list).

    ``body`` holds the body as text when it is valid UTF-8 (``None`` when the column was NULL); otherwise
    ``body_base64`` holds it base64-encoded.
    """
    item: dict[str, Any] = {"id": str(message.id), "headers": dict(message.headers), "seq": message.seq,
                            "queue": message.queue}
    if message.body is None:
        item["body"] = None
    else:
        try:
            item["body"] = message.body.decode("utf-8")
        except UnicodeDecodeError:
            item["body_base64"] = base64.b64encode(message.body).decode("ascii")
    return item


def message_from_dict(item: dict[str, Any]) -> ReceivedMessage:
    """Back from a drain list item to a ``ReceivedMessage`` (body as bytes), e.g. in a mapped task."""
    return ReceivedMessage(uuid.UUID(item["id"]), dict(item.get("headers") or {}), _body_of(item),
                           int(item.get("seq", 0)), item.get("queue", ""))


def _native_text(value: Any) -> Any:
    """A number back to text: native template rendering turns ``"1"`` into ``1`` (headers and bodies are text)."""
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


def _body_of(item: dict[str, Any]) -> bytes | None:
    if item.get("body_base64") is not None:
        return base64.b64decode(item["body_base64"])
    body = item.get("body")
    body = _native_text(body)
    if body is None or isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode("utf-8")
    return json.dumps(body, separators=(",", ":")).encode("utf-8")  # a JSON object or list given inline


_MESSAGE_KEYS = {"body", "body_base64", "headers", "time_to_be_received", "delay", "id", "seq", "queue"}


def outgoing_message(item: Any, *, time_to_be_received: float | timedelta | None = None,
                     delay: float | timedelta | None = None) -> OutgoingMessage:
    """An ``OutgoingMessage`` from a string, bytes, or a dict ``{"body", "headers", ...}``.

    Dicts from ``SqlQueueDrainOperator`` are accepted as they are (``id``, ``seq`` and ``queue`` are ignored:
    a sent message always gets a new native Id). A dict may set its own ``time_to_be_received`` or ``delay``.
    """
    if isinstance(item, OutgoingMessage):
        return item
    if isinstance(item, str | bytes | int | float) and not isinstance(item, bool):
        return OutgoingMessage(body=_native_text(item), time_to_be_received=time_to_be_received, delay=delay)
    if isinstance(item, dict):
        unknown = set(item) - _MESSAGE_KEYS
        if unknown:
            raise InvalidMessageError(f"message has unknown keys {sorted(unknown)}; a message dict takes "
                                      f"{sorted(_MESSAGE_KEYS - {'id', 'seq', 'queue'})}")
        headers = item.get("headers") or {}
        if not isinstance(headers, dict):
            raise InvalidMessageError(f"message headers must be a dict of str to str, got {type(headers).__name__}")
        headers = {k: _native_text(v) for k, v in headers.items()}
        return OutgoingMessage(body=_body_of(item), headers=headers,
                               time_to_be_received=item.get("time_to_be_received", time_to_be_received),
                               delay=item.get("delay", delay))
    raise InvalidMessageError(f"a message must be a str, bytes or a dict with 'body' and 'headers', got "
                              f"{type(item).__name__}")


def _as_list(value: Any, what: str) -> list[Any]:
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


def _queue_list(queues: str | Iterable[str] | None) -> list[str] | None:
    if queues is None:
        return None
    if isinstance(queues, str):
        return [queues]
    return list(queues)


def _rendered_number(value: Any, what: str, kind: type) -> Any:
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


def _max_map_length() -> int:
    from airflow.sdk.configuration import conf

    return conf.getint("core", "max_map_length", fallback=1024)


def _table(rows: list[dict[str, Any]], columns: Sequence[str]) -> str:
    """A plain-text table for the task log."""
    cells = [[str(row.get(c, "")) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("._") or "x"


# -- the drain -----------------------------------------------------------------------------------------
class _Spool:
    """What this task instance already handed downstream, stored in the task state store before each commit.

    The task state store is kept per task instance across retries (XComs are not: a new try deletes them),
    so a try that crashed after a commit is recovered by the next try.
    """

    def __init__(self, store: Any, log: Any) -> None:
        self.store = store
        self.lock = threading.Lock()
        self.items: list[Any] = []
        if store is None:
            log.warning("task_state_store not available: crash recovery of the drained batch is disabled")
        else:
            self.items = list(store.get(SPOOL_KEY) or [])
            if self.items:
                log.warning("recovered %d items handed over by an earlier try that did not finish",
                            len(self.items))

    def add(self, new: list[Any]) -> None:
        """Store ``new`` durably (call inside the receive transaction, before it commits)."""
        with self.lock:
            self.items.extend(new)
            if self.store is not None and new:
                self.store.set(SPOOL_KEY, self.items)


def _forget_spool(context: Context) -> None:
    """on_success_callback: the task instance is SUCCESS (its XCom is stored), the spool is no longer needed."""
    store = context.get("task_state_store")
    if store is not None:
        store.delete(SPOOL_KEY)


class SqlQueueDrainOperator(BaseOperator):
    """Receive up to ``max_messages`` from a queue with at most ``max_concurrency`` receivers at once.

    Three shapes, chosen by the arguments:

    * ``handler=`` runs ``handler(message, context)`` per message inside the receive transaction (with the
      semantics of ``mode``, immediate retries, then the error queue); returns the summary dict
      (``received``, ``succeeded``, ``failed``, ``retries``, ``expired``, ``poison``, ...).
    * no handler, no ``output_path``: returns the messages as a list of dicts ``{"id", "headers", "body"
      (or "body_base64"), "seq", "queue"}`` ready for ``.expand()``. ``max_messages`` must not exceed
      ``[core] max_map_length``. Each batch is stored in the task state store before its receive commits;
      a retry after a crash returns the earlier try's messages too (same Ids, duplicates removed).
    * ``output_path=``: writes one Parquet file per batch (columns ``id``, ``seq``, ``queue``, ``headers``
      JSON text, ``body`` binary, ``received_at``), written, fsync'ed and renamed into place before the
      receive commits; returns the list of file paths.

    :param queue_name: the queue to drain (templated). (Not ``queue``: that is the executor queue of
        every Airflow operator.)
    :param sqlqueue_conn_id: an ``mssql``, ``odbc``, ``postgres`` or ``sqlite`` connection.
    :param max_messages: stop after this many messages (``None``: until empty, with a handler or Parquet).
    :param max_duration: stop starting new batches after this many seconds.
    :param max_concurrency: receivers (threads) at once.
    :param batch_size: messages per receive transaction.
    :param handler: ``handler(message, context)`` run per message; see ``SqlQueueTransport.process``.
    :param mode: transaction mode for the handler: ``none``, ``receive-only``, ``sends-atomic-with-receive``
        or ``transaction-scope``.
    :param immediate_retries: handler retries per message before it goes to the error queue.
    :param output_path: a directory (local path, ``file://``, remote URL or ``ObjectStoragePath``) for
        Parquet files (templated).
    :param error_queue: the error queue (templated).
    """

    template_fields: Sequence[str] = ("queue_name", "sqlqueue_conn_id", "max_messages", "max_duration",
                                      "max_concurrency", "batch_size", "output_path", "error_queue")
    ui_color = "#e8f4ea"

    def __init__(self, *, queue_name: str, sqlqueue_conn_id: str = SqlQueueHook.default_conn_name,
                 max_messages: int | None = DEFAULT_MAX_MESSAGES, max_duration: float | None = None,
                 max_concurrency: int = 1, batch_size: int = DEFAULT_BATCH_SIZE,
                 handler: Callable[..., Any] | None = None, mode: str | TransactionMode = "sends-atomic-with-receive",
                 immediate_retries: int = 5, output_path: Any = None, error_queue: str = "error",
                 **kwargs: Any) -> None:
        callbacks = kwargs.pop("on_success_callback", None)
        if callbacks is None:
            callbacks = []
        elif not isinstance(callbacks, list):
            callbacks = [callbacks]
        super().__init__(on_success_callback=[*callbacks, _forget_spool], **kwargs)
        self.queue_name = queue_name
        self.sqlqueue_conn_id = sqlqueue_conn_id
        self.max_messages = max_messages
        self.max_duration = max_duration
        self.max_concurrency = max_concurrency
        self.batch_size = batch_size
        self.handler = handler
        self.mode = TransactionMode.parse(mode)
        self.immediate_retries = immediate_retries
        self.output_path = output_path
        self.error_queue = error_queue
        if handler is not None and output_path is not None:
            raise ValueError("give either handler= (process each message) or output_path= (write Parquet), "
                             "not both")
        self._check_sizes(rendered=False)

    def _check_sizes(self, *, rendered: bool) -> None:
        """Check the sizes; before rendering, a template string is left for the run to check."""
        if rendered:
            for name, kind in (("max_messages", int), ("max_duration", float), ("max_concurrency", int),
                               ("batch_size", int)):
                setattr(self, name, _rendered_number(getattr(self, name), name, kind))
        checks = ((self.max_messages, "max_messages", True), (self.max_concurrency, "max_concurrency", False),
                  (self.batch_size, "batch_size", False))
        for value, what, allow_none in checks:
            if not isinstance(value, str):
                check_count(value, what, allow_none=allow_none)
        if not isinstance(self.max_duration, str):
            check_seconds(self.max_duration, "max_duration", allow_none=True)
        if not isinstance(self.max_messages, str):
            self._check_list_size()

    @property
    def returns_list(self) -> bool:
        """Whether the drain hands the messages themselves to downstream tasks (for ``.expand()``)."""
        return self.handler is None and self.output_path is None

    def _check_list_size(self) -> None:
        if not self.returns_list:
            return
        limit = _max_map_length()
        if self.max_messages is None or self.max_messages > limit:
            raise ValueError(
                f"max_messages={self.max_messages} but a list for .expand() holds at most [core] max_map_length"
                f"={limit} items; lower max_messages, raise max_map_length, or drain to Parquet with "
                "output_path=")

    def execute(self, context: Context) -> Any:
        self._check_sizes(rendered=True)
        hook = SqlQueueHook(self.sqlqueue_conn_id, error_queue=self.error_queue)
        try:
            transport = hook.transport
            if self.handler is not None:
                summary = transport.process(
                    self.queue_name, self.handler, mode=self.mode, max_messages=self.max_messages,
                    max_duration=self.max_duration, batch_size=self.batch_size, concurrency=self.max_concurrency,
                    immediate_retries=self.immediate_retries)
                result = summary.as_dict()
                self.log.info("drained %s: %s", self.queue_name, result)
                return result
            spool = _Spool(context.get("task_state_store"), self.log)
            if self.output_path is None:
                return self._drain_to_list(transport, spool, context)
            return self._drain_to_parquet(transport, spool, context)
        finally:
            hook.close()

    # -- list for .expand() ------------------------------------------------------------------------------
    def _drain_to_list(self, transport: SqlQueueTransport, spool: _Spool, context: Context) -> list[dict[str, Any]]:
        seen = {item["id"] for item in spool.items}

        def sink(messages: list[ReceivedMessage]) -> int:
            new = [message_to_dict(m) for m in messages if str(m.id) not in seen]
            seen.update(item["id"] for item in new)
            spool.add(new)
            return len(new)

        assert self.max_messages is not None  # checked by _check_list_size
        budget = self.max_messages - len(spool.items)
        self._drain(transport, sink, budget, context)
        self.log.info("drained %d messages from %s", len(spool.items), self.queue_name)
        return list(spool.items)

    # -- Parquet files -----------------------------------------------------------------------------------
    def _drain_to_parquet(self, transport: SqlQueueTransport, spool: _Spool, context: Context) -> list[str]:
        target = ParquetBatchWriter(self.output_path)
        tag = f"{_safe_name(transport.name(self.queue_name))}-{_safe_name(str(context.get('run_id') or 'manual'))}"

        def sink(messages: list[ReceivedMessage]) -> int:
            path = target.write(messages, f"{tag}-{uuid.uuid4().hex}.parquet")
            spool.add([path])
            return len(messages)

        count = self._drain(transport, sink, self.max_messages, context)
        self.log.info("drained %d messages from %s into %d new Parquet files under %s", count, self.queue_name,
                      len(spool.items), target)
        return list(spool.items)

    # -- the receive loop --------------------------------------------------------------------------------
    def _drain(self, transport: SqlQueueTransport, sink: Callable[[list[ReceivedMessage]], int],
               budget: int | None, context: Context) -> int:
        """Receive batches with ``max_concurrency`` receivers; ``sink`` stores each batch before its commit.

        The counts (delivered, expired, poison, ...) are pushed as the XCom ``drain_summary``.
        """
        summary = transport.drain(self.queue_name, sink, max_messages=budget, max_duration=self.max_duration,
                                  batch_size=self.batch_size, concurrency=self.max_concurrency)
        self.log.info("drain of %s: %s", self.queue_name, summary.as_dict())
        ti = context.get("ti")
        if ti is not None:  # always there in a task run; absent when execute() is called directly
            ti.xcom_push(key=DRAIN_SUMMARY_KEY, value=summary.as_dict())
        return summary.delivered


# -- send ----------------------------------------------------------------------------------------------
class SqlQueueSendOperator(BaseOperator):
    """Send messages to a queue in one batch; return their native Ids as strings.

    Give ``messages`` (a list of strings, or of dicts ``{"body", "headers"}``, e.g. another task's output)
    or a single ``body`` (with ``headers``). Delayed messages get their Id when they are due, so they are not
    in the returned list.

    :param queue_name: destination queue (templated).
    :param messages: the messages (templated; an ``XComArg`` such as ``task.output`` is resolved natively).
    :param body: the body of a single message (templated).
    :param headers: headers of the single message (templated).
    :param sqlqueue_conn_id: an ``mssql``, ``odbc``, ``postgres`` or ``sqlite`` connection.
    :param time_to_be_received: seconds (or timedelta) after which an unreceived message expires.
    :param delay: seconds (or timedelta) to wait before the message becomes receivable.
    """

    template_fields: Sequence[str] = ("queue_name", "messages", "body", "headers")
    ui_color = "#eaf0fb"

    def __init__(self, *, queue_name: str, messages: Any = None, body: str | bytes | None = None,
                 headers: dict[str, str] | None = None, sqlqueue_conn_id: str = SqlQueueHook.default_conn_name,
                 time_to_be_received: float | timedelta | None = None, delay: float | timedelta | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if messages is None and body is None:
            raise ValueError("give messages= (a list) or body= (one message)")
        if messages is not None and (body is not None or headers is not None):
            raise ValueError("give either messages= or body=/headers=, not both")
        self.queue_name = queue_name
        self.messages = messages
        self.body = body
        self.headers = headers
        self.sqlqueue_conn_id = sqlqueue_conn_id
        self.time_to_be_received = time_to_be_received
        self.delay = delay

    def execute(self, context: Context) -> list[str]:
        if self.messages is not None:
            items = _as_list(self.messages, "messages")
        else:
            items = [{"body": self.body, "headers": self.headers or {}}]
        outgoing = [outgoing_message(i, time_to_be_received=self.time_to_be_received, delay=self.delay)
                    for i in items]  # all validated before anything is sent
        hook = SqlQueueHook(self.sqlqueue_conn_id)
        try:
            ids = hook.transport.send_many(self.queue_name, outgoing)
        finally:
            hook.close()
        self.log.info("sent %d messages to %s (%d delayed)", len(outgoing), self.queue_name, len(outgoing) - len(ids))
        return [str(i) for i in ids]


# -- provisioning and maintenance ----------------------------------------------------------------------
class SqlQueueCreateQueuesOperator(BaseOperator):
    """Create queue tables (idempotent; safe under concurrent creators); return their canonical names.

    :param queues: a queue address or a list of them (templated).
    :param delayed: also create each queue's ``.Delayed`` table for delayed delivery.
    :param sqlqueue_conn_id: an ``mssql``, ``odbc``, ``postgres`` or ``sqlite`` connection.
    """

    template_fields: Sequence[str] = ("queues",)

    def __init__(self, *, queues: str | list[str], delayed: bool = False,
                 sqlqueue_conn_id: str = SqlQueueHook.default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.queues = queues
        self.delayed = delayed
        self.sqlqueue_conn_id = sqlqueue_conn_id

    def execute(self, context: Context) -> list[str]:
        hook = SqlQueueHook(self.sqlqueue_conn_id)
        try:
            names = hook.transport.create_queues(_queue_list(self.queues) or [], delayed=self.delayed)
        finally:
            hook.close()
        self.log.info("queues ready: %s", ", ".join(names))
        return names


class _MaintenanceOperator(BaseOperator):
    template_fields: Sequence[str] = ("queues",)

    def __init__(self, *, queues: str | list[str] | None = None,
                 sqlqueue_conn_id: str = SqlQueueHook.default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.queues = queues
        self.sqlqueue_conn_id = sqlqueue_conn_id

    def _targets(self, transport: SqlQueueTransport) -> list[str]:
        queues = _queue_list(self.queues)
        if queues is None:
            queues = transport.discover()
            self.log.info("discovered %d queues: %s", len(queues), ", ".join(queues))
        return [transport.name(q) for q in queues]


class SqlQueuePurgeExpiredOperator(_MaintenanceOperator):
    """Delete expired messages in batches (each its own short transaction); return ``{queue: count}``.

    :param queues: queues to purge (templated); ``None`` purges every queue discovered in the database.
    :param batch_size: rows deleted per transaction.
    :param sqlqueue_conn_id: an ``mssql``, ``odbc``, ``postgres`` or ``sqlite`` connection.
    """

    def __init__(self, *, queues: str | list[str] | None = None, batch_size: int = 10_000, **kwargs: Any) -> None:
        super().__init__(queues=queues, **kwargs)
        check_count(batch_size, "batch_size")
        self.batch_size = batch_size

    def execute(self, context: Context) -> dict[str, int]:
        hook = SqlQueueHook(self.sqlqueue_conn_id)
        try:
            transport = hook.transport
            result = {q: transport.purge_expired(q, batch_size=self.batch_size) for q in self._targets(transport)}
        finally:
            hook.close()
        self.log.info("purged expired messages: %s", result)
        return result


class SqlQueueCheckSchemaOperator(_MaintenanceOperator):
    """Check queue tables' schema and indexes; optionally repair; fail or warn on findings.

    Returns the findings left (after repair) as dicts ``{"queue", "code", "message", "repairable"}``.

    :param queues: queues to check (templated); ``None`` checks every queue discovered in the database.
    :param repair: run the repair statements of repairable findings (DDL rights needed), then check again.
    :param fail_on_findings: fail the task when findings remain; otherwise log them as a warning.
    :param sqlqueue_conn_id: an ``mssql``, ``odbc``, ``postgres`` or ``sqlite`` connection.
    """

    def __init__(self, *, queues: str | list[str] | None = None, repair: bool = False,
                 fail_on_findings: bool = True, **kwargs: Any) -> None:
        super().__init__(queues=queues, **kwargs)
        self.repair = repair
        self.fail_on_findings = fail_on_findings

    def execute(self, context: Context) -> list[dict[str, Any]]:
        hook = SqlQueueHook(self.sqlqueue_conn_id)
        try:
            transport = hook.transport
            findings: list[Finding] = []
            for queue in self._targets(transport):
                findings.extend(transport.check(queue, repair=self.repair))
        finally:
            hook.close()
        rows = [{"queue": f.queue, "code": f.code, "message": f.message, "repairable": f.repairable}
                for f in findings]
        if not rows:
            self.log.info("no findings%s", " (after repair)" if self.repair else "")
            return rows
        text = _table(rows, ("queue", "code", "repairable", "message"))
        summary = f"{len(rows)} schema/index findings{' remain after repair' if self.repair else ''}"
        if self.fail_on_findings:
            self.log.error("%s:\n%s", summary, text)
            hint = "" if self.repair else "; run with repair=True to fix the repairable ones"
            raise SqlQueueCheckFailedError(
                f"{summary}: " + "; ".join(f"{r['queue']}: {r['code']}" for r in rows) + hint)
        self.log.warning("%s:\n%s", summary, text)
        return rows


class SqlQueueRetryErrorsOperator(BaseOperator):
    """Return failed messages from the error queue to the queue in their ``NServiceBus.FailedQ`` header.

    Returns the summary dict (``returned`` per queue, ``total_returned``, ``skipped``, ``left`` with reasons).

    :param error_queue: the error queue (templated).
    :param failed_q: only messages that failed in this queue (templated).
    :param exception_type: only messages whose exception type is this (full name, or the class name alone).
    :param max_messages: return at most this many.
    :param sqlqueue_conn_id: an ``mssql``, ``odbc``, ``postgres`` or ``sqlite`` connection.
    """

    template_fields: Sequence[str] = ("error_queue", "failed_q", "exception_type")

    def __init__(self, *, error_queue: str = "error", failed_q: str | None = None, exception_type: str | None = None,
                 max_messages: int | None = None, sqlqueue_conn_id: str = SqlQueueHook.default_conn_name,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        check_count(max_messages, "max_messages", allow_none=True)
        self.error_queue = error_queue
        self.failed_q = failed_q
        self.exception_type = exception_type
        self.max_messages = max_messages
        self.sqlqueue_conn_id = sqlqueue_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        hook = SqlQueueHook(self.sqlqueue_conn_id, error_queue=self.error_queue)
        try:
            transport = hook.transport
            select = failure_selector(transport, failed_q=self.failed_q, exception_type=self.exception_type)
            summary = transport.retry_errors(error_queue=self.error_queue, select=select,
                                             max_messages=self.max_messages)
        finally:
            hook.close()
        result = summary.as_dict()
        self.log.info("returned %d messages from %s: %s; %d left", result["total_returned"], self.error_queue,
                      result["returned"], len(result["left"]))
        return result
