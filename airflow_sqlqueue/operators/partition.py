"""Partitioned drain for large backlogs: a plan task splits the backlog, mapped tasks drain one partition each.

::

    plan = SqlQueuePlanPartitionsOperator(task_id="plan", queue_name="audit", max_partitions=4)
    SqlQueuePartitionDrainOperator.partial(task_id="drain", queue_name="audit", output_path="/data/batches",
                                           max_concurrency=2).expand(partition=plan.output)

Each partition is a disjoint range of positions (``airflow_sqlqueue.transport.operations.partitions``), so the
mapped tasks never take the same row. Each task writes every batch as a Parquet file and records it in a small
manifest in the task state store *before* the batch's receive commits; a try that crashed is resumed by the next
try from its manifest (the files already written are kept and returned, the rest of the range is drained).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_sqlqueue.hooks.sqlqueue import SqlQueueHook
from airflow_sqlqueue.transport import Partition, ReceivedColumns
from airflow_sqlqueue.transport.common.validation import check_count
from airflow_sqlqueue.transport.operations.partitions import DEFAULT_MAX_PARTITIONS, DEFAULT_MESSAGES_PER_PARTITION

from .base import SqlQueueBaseOperator, rendered_number, text_table
from .drain import SqlQueueDrainOperator, _max_map_length, _safe_name
from .parquet import ParquetBatchWriter

if TYPE_CHECKING:
    from airflow.sdk import Context

#: Key of a partition drain's manifest in the task state store (kept across tries, deleted on success).
MANIFEST_KEY = "sqlqueue_partition_manifest"


class SqlQueuePlanPartitionsOperator(SqlQueueBaseOperator):
    """Split the backlog of a queue into disjoint partitions; returns them as a list for ``.expand(partition=...)``.

    Reads the oldest and newest position (two index seeks, no locks). An empty queue gives an empty list (the
    mapped drains are then skipped).

    :param queue_name: the queue (templated).
    :param partitions: how many (templated); None derives it from the depth: one per ``messages_per_partition``,
        1 to ``max_partitions``.
    :param open_end: the last partition has no upper end, so it also drains messages sent after the plan
        (default False: they wait for the next run).
    """

    template_fields: Sequence[str] = ("queue_name", "sqlqueue_conn_id", "partitions", "messages_per_partition",
                                      "max_partitions", "error_queue")
    ui_color = "#e8f4ea"

    def __init__(self, *, queue_name: str, partitions: int | None = None,
                 messages_per_partition: int = DEFAULT_MESSAGES_PER_PARTITION,
                 max_partitions: int = DEFAULT_MAX_PARTITIONS, open_end: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.queue_name = queue_name
        self.partitions = partitions
        self.messages_per_partition = messages_per_partition
        self.max_partitions = max_partitions
        self.open_end = open_end

    def execute(self, context: Context) -> list[dict[str, Any]]:
        partitions = rendered_number(self.partitions, "partitions", int)
        per_partition = rendered_number(self.messages_per_partition, "messages_per_partition", int)
        most = rendered_number(self.max_partitions, "max_partitions", int)
        check_count(partitions, "partitions", allow_none=True)
        check_count(most, "max_partitions")
        if (partitions or most) > _max_map_length():
            raise ValueError(f"{partitions or most} partitions cannot be expanded: [core] max_map_length is "
                             f"{_max_map_length()}; ask for fewer")
        with self.open_transport() as transport:
            plan = transport.plan_partitions(self.queue_name, partitions=partitions,
                                             messages_per_partition=per_partition, max_partitions=most,
                                             open_end=self.open_end)
        rows = [{"index": p.index, "first": p.first, "last": "(open)" if p.last is None else p.last} for p in plan]
        self.log.info("%d partitions of %s:\n%s", len(plan), self.queue_name,
                      text_table(rows, ("index", "first", "last")) if rows else "(the queue is empty)")
        return [p.as_dict() for p in plan]


class _Manifest:
    """What one partition's drain stored so far: its partition, its Parquet files and their messages.

    Stored in the task state store (kept per task instance and map index across tries) before each batch
    commits. Without a store (``execute`` called directly) it lives in memory only.
    """

    def __init__(self, store: Any, partition: Partition, log: Any) -> None:
        self.store = store
        self.partition = partition
        self.lock = threading.Lock()
        stored = store.get(MANIFEST_KEY) if store is not None else None
        self.files: list[str] = list(stored["files"]) if stored else []
        self.delivered: int = int(stored["delivered"]) if stored else 0
        self.resumed = bool(self.files)
        if store is None:
            log.warning("task_state_store not available: a crashed try cannot be resumed from a manifest")
        elif self.resumed:
            log.warning("resuming partition %d from its manifest: %d files (%d messages) stored by an earlier try",
                        partition.index, len(self.files), self.delivered)
            if stored.get("partition") != partition.as_dict():
                log.warning("the manifest was written for partition %s; its files are kept", stored.get("partition"))

    def as_dict(self) -> dict[str, Any]:
        return {"partition": self.partition.as_dict(), "files": list(self.files), "delivered": self.delivered}

    def add(self, path: str, messages: int) -> None:
        """Record a stored batch durably (call inside the receive transaction, before it commits)."""
        with self.lock:
            self.files.append(path)
            self.delivered += messages
            if self.store is not None:
                self.store.set(MANIFEST_KEY, self.as_dict())


def _forget_manifest(context: Context) -> None:
    """on_success_callback: the task instance is SUCCESS (its XCom is stored), the manifest is no longer needed."""
    store = context.get("task_state_store")
    if store is not None:
        store.delete(MANIFEST_KEY)


class SqlQueuePartitionDrainOperator(SqlQueueDrainOperator):
    """Drain one partition of a queue (from ``SqlQueuePlanPartitionsOperator``) into Parquet files.

    Expand it over the plan: ``.partial(...).expand(partition=plan.output)``. Each batch is written as a Parquet
    file and recorded in the manifest (task state store) before its receive commits; a retry resumes from the
    manifest. Returns the partition's files (those of earlier tries first). The XCom ``drain_summary`` holds the
    counts of this try and the partition.

    :param partition: one item of the plan's output (templated; mapped with ``.expand``).
    :param output_path: directory for the Parquet files (required; templated).
    :param max_messages: stop after this many messages in this partition (default None: the whole range).

    The other parameters are those of ``SqlQueueDrainOperator`` (``max_concurrency`` receivers per partition,
    ``batch_size``, ``max_duration``, ``error_queue``); ``handler`` is not available.
    """

    template_fields: Sequence[str] = (*SqlQueueDrainOperator.template_fields, "partition")

    def __init__(self, *, partition: Any, output_path: Any, max_messages: int | None = None,
                 sqlqueue_conn_id: str = SqlQueueHook.default_conn_name, **kwargs: Any) -> None:
        if kwargs.get("handler") is not None:
            raise ValueError("the partitioned drain writes Parquet files; it takes no handler= (use "
                             "SqlQueueDrainOperator to process messages with a handler)")
        if output_path is None:
            raise ValueError("the partitioned drain needs output_path= (a folder for its Parquet files)")
        super().__init__(output_path=output_path, max_messages=max_messages, sqlqueue_conn_id=sqlqueue_conn_id,
                         **kwargs)
        self.on_success_callback = [*self.on_success_callback, _forget_manifest]
        self.partition = partition

    def execute(self, context: Context) -> list[str]:
        self._check_sizes(rendered=True)
        partition = Partition.from_dict(self.partition)
        manifest = _Manifest(context.get("task_state_store"), partition, self.log)
        target = ParquetBatchWriter(self.output_path)
        with self.open_transport() as transport:
            tag = (f"{_safe_name(transport.name(self.queue_name))}-{_safe_name(str(context.get('run_id') or 'manual'))}"
                   f"-p{partition.index}")

            def sink(batch: ReceivedColumns) -> int:  # the batch as columns: no object per message
                path = target.write(batch, f"{tag}-{uuid.uuid4().hex}.parquet")
                manifest.add(path, len(batch))
                return len(batch)

            budget = None if self.max_messages is None else max(0, self.max_messages - manifest.delivered)
            count = self._drain(transport, sink, budget, context, partition, columns=True)
        self.log.info("partition %d/%d of %s (positions %s to %s): %d messages in this try, %d in all, in %d files "
                      "under %s", partition.index + 1, partition.count, self.queue_name, partition.first,
                      "the end" if partition.last is None else partition.last, count, manifest.delivered,
                      len(manifest.files), target)
        return list(manifest.files)
