"""``SqlQueueDrainOperator``: receive messages with bounded concurrency into a handler, a list or Parquet.

When it hands messages to downstream tasks, every batch is stored durably (in the task state store, or as
Parquet files) *before* its receive commits, so a crash at any point loses nothing; after a crash a message
may be delivered twice, always with the same Id.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk.configuration import conf

from airflow_sqlqueue import lineage, metrics
from airflow_sqlqueue.hooks.sqlqueue import SqlQueueHook
from airflow_sqlqueue.transport import Partition, ReceivedColumns, ReceivedMessage, SqlQueueTransport, TransactionMode
from airflow_sqlqueue.transport.common.validation import check_count, check_seconds

from .base import SqlQueueBaseOperator, rendered_number
from .messages import message_to_dict
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


def _max_map_length() -> int:
    return conf.getint("core", "max_map_length", fallback=1024)


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("._") or "x"


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


class SqlQueueDrainOperator(SqlQueueBaseOperator):
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
        super().__init__(on_success_callback=[*callbacks, _forget_spool], sqlqueue_conn_id=sqlqueue_conn_id,
                         error_queue=error_queue, **kwargs)
        self.queue_name = queue_name
        self.max_messages = max_messages
        self.max_duration = max_duration
        self.max_concurrency = max_concurrency
        self.batch_size = batch_size
        self.handler = handler
        self.mode = TransactionMode.parse(mode)
        self.immediate_retries = immediate_retries
        self.output_path = output_path
        if handler is not None and output_path is not None:
            raise ValueError("give either handler= (process each message) or output_path= (write Parquet), "
                             "not both")
        self._check_sizes(rendered=False)

    def _check_sizes(self, *, rendered: bool) -> None:
        """Check the sizes; before rendering, a template string is left for the run to check."""
        if rendered:
            for name, kind in (("max_messages", int), ("max_duration", float), ("max_concurrency", int),
                               ("batch_size", int)):
                setattr(self, name, rendered_number(getattr(self, name), name, kind))
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
        with self.open_transport() as transport:
            transport.check_concurrency(self.max_concurrency, "max_concurrency")  # fits the database's connections
            if self.handler is not None:
                summary = transport.process(
                    self.queue_name, self.handler, mode=self.mode, max_messages=self.max_messages,
                    max_duration=self.max_duration, batch_size=self.batch_size, concurrency=self.max_concurrency,
                    immediate_retries=self.immediate_retries)
                result = summary.as_dict()
                self.log.info("drained %s: %s", self.queue_name, result)
                queue = transport.name(self.queue_name)
                metrics.incr("processed", self.sqlqueue_conn_id, queue, int(result.get("succeeded") or 0))
                metrics.incr("failed", self.sqlqueue_conn_id, queue, int(result.get("failed") or 0))
                return result
            spool = _Spool(context.get("task_state_store"), self.log)
            if self.output_path is None:
                return self._drain_to_list(transport, spool, context)
            return self._drain_to_parquet(transport, spool, context)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the queue table in; the Parquet location out when draining to Parquet."""
        hook = self.get_hook()
        outputs = [lineage.path_dataset(self.output_path)] if self.output_path is not None else []
        return lineage.operator_lineage([lineage.queue_dataset(hook, self.queue_name)], outputs)

    # -- list for .expand() ------------------------------------------------------------------------------
    def _drain_to_list(self, transport: SqlQueueTransport, spool: _Spool, context: Context) -> list[dict[str, Any]]:
        # a row is known by id and position: rows of other programs may share an id (SQLite), and each is delivered
        seen = {(item["id"], item.get("seq")) for item in spool.items}

        def sink(messages: list[ReceivedMessage]) -> int:
            new = [message_to_dict(m) for m in messages if (m.id_text, m.seq) not in seen]
            seen.update((item["id"], item.get("seq")) for item in new)
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

        def sink(batch: ReceivedColumns) -> int:  # the batch as columns: no object per message
            path = target.write(batch, f"{tag}-{uuid.uuid4().hex}.parquet")
            spool.add([path])
            return len(batch)

        count = self._drain(transport, sink, self.max_messages, context, columns=True)
        self.log.info("drained %d messages from %s into %d new Parquet files under %s", count, self.queue_name,
                      len(spool.items), target)
        return list(spool.items)

    # -- the receive loop --------------------------------------------------------------------------------
    def _drain(self, transport: SqlQueueTransport, sink: Callable[[Any], int], budget: int | None,
               context: Context, partition: Partition | None = None, columns: bool = False) -> int:
        """Receive batches with ``max_concurrency`` receivers; ``sink`` stores each batch before its commit (a list
        of messages, or one ``ReceivedColumns`` with ``columns``).

        The counts (delivered, expired, poison, ...) are pushed as the XCom ``drain_summary``.
        """
        summary = transport.drain(self.queue_name, sink, max_messages=budget, max_duration=self.max_duration,
                                  batch_size=self.batch_size, concurrency=self.max_concurrency, partition=partition,
                                  columns=columns)
        counts = summary.as_dict()
        if partition is not None:
            counts["partition"] = partition.as_dict()
        self.log.info("drain of %s: %s", self.queue_name, counts)
        metrics.incr("drained", self.sqlqueue_conn_id, transport.name(self.queue_name), summary.delivered)
        ti = context.get("ti")
        if ti is not None:  # always there in a task run; absent when execute() is called directly
            ti.xcom_push(key=DRAIN_SUMMARY_KEY, value=counts)
        return summary.delivered
