"""Retry failed messages in controlled batches as an Airflow task: logs, progress, retries, an audit trail, cancel.

The task walks the error queue once (oldest first) in batches
(:mod:`airflow_sqlqueue.transport.errorqueue.batch_retry`): each batch is one transaction, logged as a progress
line and as an audit line (logger ``airflow_sqlqueue.retry.audit``, JSON: run, batch, start and end time, returned
per queue, left with reasons), and the batches are the task's return value (XCom). Stopping the task (mark it
failed or success in the UI, or its timeout) cancels it before the next batch: a batch is never half done. A retry
of the task starts again from the oldest message still there, so no message is returned twice.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import Context

from airflow_sqlqueue import lineage, metrics
from airflow_sqlqueue.transport.errorqueue.batches import BatchPlan, BatchRecord
from airflow_sqlqueue.transport.errorqueue.previews import FailedFilter

from .base import SqlQueueBaseOperator, allowed_queue_list, rendered_number

audit_log = logging.getLogger("airflow_sqlqueue.retry.audit")


class SqlQueueBatchRetryOperator(SqlQueueBaseOperator):
    """Return failed messages to the queue in their ``NServiceBus.FailedQ`` in batches, at a bounded rate.

    Returns ``{"returned": {queue: n}, "total_returned", "cancelled", "left": [...], "batches": [...]}``.

    :param error_queue: the error queue (templated).
    :param batch_size: messages per transaction at full speed (templated; 1 to 10,000).
    :param ramp_start: the first batch's size, doubled each batch up to ``batch_size`` (templated).
    :param rate_per_second: at most this many messages per second over the run (templated; None: no limit).
    :param max_messages: look at no more than this many messages (templated).
    :param redirects: ``{"A": "B"}``: messages that failed in queue A go to queue B (templated).
    :param allowed_queues: the queues it may write to (after redirects; templated; required): a message whose
        FailedQ names any other queue, or the error queue itself, stays, with the reason (see docs/error-queue.md).
    :param failed_q: only messages whose FailedQ is this (templated).
    :param exception_type: only messages whose exception type is this, as the header holds it (templated).
    :param message_type: only messages whose ``NServiceBus.EnclosedMessageTypes`` is this (templated).
    :param sqlqueue_conn_id: an ``mssql``, ``odbc``, ``postgres`` or ``sqlite`` connection.
    """

    template_fields: Sequence[str] = ("error_queue", "batch_size", "ramp_start", "rate_per_second", "max_messages",
                                      "redirects", "allowed_queues", "failed_q", "exception_type", "message_type")

    def __init__(self, *, batch_size: int | str = 500, ramp_start: int | str | None = None,
                 rate_per_second: float | str | None = None, max_messages: int | str | None = None,
                 redirects: Mapping[str, str] | None = None, allowed_queues: Sequence[str] | str | None = None,
                 failed_q: str | None = None, exception_type: str | None = None, message_type: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.batch_size = batch_size
        self.ramp_start = ramp_start
        self.rate_per_second = rate_per_second
        self.max_messages = max_messages
        self.redirects = dict(redirects or {})
        self.allowed_queues = allowed_queue_list(allowed_queues)
        self.failed_q = failed_q
        self.exception_type = exception_type
        self.message_type = message_type
        self._stop = threading.Event()
        if not any(isinstance(v, str) and "{{" in v for v in (batch_size, ramp_start, rate_per_second, max_messages)):
            self.plan()  # refuse bad numbers when the DAG is parsed

    def plan(self) -> BatchPlan:
        """The batch plan from the (rendered) arguments; ValueError says which one is wrong."""
        return BatchPlan(batch_size=rendered_number(self.batch_size, "batch_size", int),
                         ramp_start=rendered_number(self.ramp_start, "ramp_start", int),
                         rate_per_second=rendered_number(self.rate_per_second, "rate_per_second", float),
                         max_messages=rendered_number(self.max_messages, "max_messages", int))

    def on_kill(self) -> None:
        self._stop.set()

    def execute(self, context: Context) -> dict[str, Any]:
        plan = self.plan()
        run = f"{context['dag'].dag_id}/{context['run_id']}/{context['task_instance'].task_id}" \
            if "dag" in context and "run_id" in context and "task_instance" in context else self.task_id
        where = FailedFilter(self.failed_q, self.exception_type, self.message_type)
        with self.open_transport() as transport:
            errors = transport.errors(self.error_queue, allowed=allowed_queue_list(self.allowed_queues),
                                      redirects=self.redirects)
            done = [0]

            def on_batch(record: BatchRecord) -> None:
                done[0] += record.total_returned
                for queue, count in record.returned.items():
                    metrics.incr("retried", self.sqlqueue_conn_id, queue, count)
                self.log.info("batch %d: %d of %d returned (%s), %d left; %d returned so far", record.batch,
                              record.total_returned, record.looked_at, record.returned, len(record.left), done[0])
                audit_log.info(json.dumps({"run": run, "error_queue": transport.name(self.error_queue),
                                           "batch": record.batch, "started_at": record.started_at,
                                           "finished_at": record.finished_at, "looked_at": record.looked_at,
                                           "returned": record.returned, "left": record.left}, sort_keys=True))

            summary = errors.retry_in_batches(plan, where=where, on_batch=on_batch, should_stop=self._stop.is_set)
        result = summary.as_dict()
        self._returned_to = sorted(result["returned"])
        self.log.info("returned %d messages from %s in %d batches%s: %s", result["total_returned"], self.error_queue,
                      len(result["batches"]), " (cancelled)" if result["cancelled"] else "", result["returned"])
        return result

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the error queue in; the queues messages were returned to out."""
        return lineage.retry_lineage(self.get_hook(), self.error_queue, getattr(self, "_returned_to", []))
