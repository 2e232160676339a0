"""Provisioning and maintenance operators: create queues, purge expired messages, check schemas, retry errors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowFailException

from airflow_sqlqueue import lineage, metrics
from airflow_sqlqueue.transport import Finding, SqlQueueTransport
from airflow_sqlqueue.transport.common.validation import check_count
from airflow_sqlqueue.transport.errorqueue.groups import failure_selector

from .base import SqlQueueBaseOperator, allowed_queue_list, queue_list, text_table

if TYPE_CHECKING:
    from airflow.sdk import Context


class SqlQueueCheckFailedError(AirflowFailException):
    """The schema and index check found problems (not retried: a retry would find the same)."""


class SqlQueueCreateQueuesOperator(SqlQueueBaseOperator):
    """Create queue tables (idempotent; safe under concurrent creators); return their canonical names.

    :param queues: a queue address or a list of them (templated).
    :param delayed: also create each queue's ``.Delayed`` table for delayed delivery.
    :param notify: PostgreSQL only: install each queue's wake-up trigger, so sensors and event triggers on it
        wake as soon as a message is committed instead of at their next poll.
    :param sqlqueue_conn_id: an ``mssql``, ``odbc``, ``postgres`` or ``sqlite`` connection.
    """

    template_fields: Sequence[str] = ("queues",)

    def __init__(self, *, queues: str | list[str], delayed: bool = False, notify: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.queues = queues
        self.delayed = delayed
        self.notify = notify

    def execute(self, context: Context) -> list[str]:
        with self.open_transport() as transport:
            names = transport.create_queues(queue_list(self.queues) or [], delayed=self.delayed,
                                             notify=self.notify)
        self.log.info("queues ready: %s", ", ".join(names))
        return names


class _MaintenanceOperator(SqlQueueBaseOperator):
    """An operator that works on given queues, or on every queue discovered in the database."""

    template_fields: Sequence[str] = ("queues",)

    def __init__(self, *, queues: str | list[str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.queues = queues

    def _targets(self, transport: SqlQueueTransport) -> list[str]:
        queues = queue_list(self.queues)
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
        with self.open_transport() as transport:
            result = {q: transport.purge_expired(q, batch_size=self.batch_size) for q in self._targets(transport)}
        self.log.info("purged expired messages: %s", result)
        return result


class SqlQueueCheckSchemaOperator(_MaintenanceOperator):
    """Check queue tables' schema and indexes; optionally repair; fail or warn on findings.

    Returns the findings left (after repair) as dicts ``{"queue", "code", "message", "repairable",
    "not_checked"}``; a ``not_checked`` one says what the engine did not let the check look at (logged as a
    warning, never a failure).

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
        findings: list[Finding] = []
        with self.open_transport() as transport:
            for queue in self._targets(transport):
                findings.extend(transport.check(queue, repair=self.repair))
        rows = [{"queue": f.queue, "code": f.code, "message": f.message, "repairable": f.repairable,
                 "not_checked": f.not_checked} for f in findings]
        unchecked = [r for r in rows if r["not_checked"]]
        if unchecked:  # what the engine did not let the check look at: said, but not a problem found
            self.log.warning("not checked:\n%s", text_table(unchecked, ("queue", "code", "message")))
        if len(unchecked) == len(rows):
            self.log.info("no findings%s", " (after repair)" if self.repair else "")
            return rows
        problems = [r for r in rows if not r["not_checked"]]
        text = text_table(problems, ("queue", "code", "repairable", "message"))
        summary = f"{len(problems)} schema/index findings{' remain after repair' if self.repair else ''}"
        if self.fail_on_findings:
            self.log.error("%s:\n%s", summary, text)
            hint = "" if self.repair else "; run with repair=True to fix the repairable ones"
            raise SqlQueueCheckFailedError(
                f"{summary}: " + "; ".join(f"{r['queue']}: {r['code']}" for r in problems) + hint)
        self.log.warning("%s:\n%s", summary, text)
        return rows


class SqlQueueRetryErrorsOperator(SqlQueueBaseOperator):
    """Return failed messages from the error queue to the queue in their ``NServiceBus.FailedQ`` header.

    Returns the summary dict (``returned`` per queue, ``total_returned``, ``skipped``, ``left`` with reasons).

    :param error_queue: the error queue (templated).
    :param failed_q: only messages that failed in this queue (templated).
    :param exception_type: only messages whose exception type is this (full name, or the class name alone).
    :param max_messages: return at most this many.
    :param allowed_queues: the queues it may write to (templated; required): a message whose FailedQ names any
        other queue, or the error queue itself, stays, with the reason (see docs/error-queue.md).
    :param sqlqueue_conn_id: an ``mssql``, ``odbc``, ``postgres`` or ``sqlite`` connection.
    """

    template_fields: Sequence[str] = ("error_queue", "failed_q", "exception_type", "allowed_queues")

    def __init__(self, *, failed_q: str | None = None, exception_type: str | None = None,
                 max_messages: int | None = None, allowed_queues: Sequence[str] | str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.allowed_queues = allowed_queue_list(allowed_queues)
        check_count(max_messages, "max_messages", allow_none=True)
        self.failed_q = failed_q
        self.exception_type = exception_type
        self.max_messages = max_messages

    def execute(self, context: Context) -> dict[str, Any]:
        with self.open_transport() as transport:
            select = failure_selector(transport.dialect, failed_q=self.failed_q, exception_type=self.exception_type)
            summary = transport.retry_errors(error_queue=self.error_queue, select=select,
                                             max_messages=self.max_messages,
                                             allowed=allowed_queue_list(self.allowed_queues))
        result = summary.as_dict()
        self._returned_to = sorted(summary.returned)
        for queue, count in summary.returned.items():
            metrics.incr("retried", self.sqlqueue_conn_id, queue, count)
        self.log.info("returned %d messages from %s: %s; %d left", result["total_returned"], self.error_queue,
                      result["returned"], len(result["left"]))
        return result

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the error queue in; the queues messages were returned to out."""
        return lineage.retry_lineage(self.get_hook(), self.error_queue, getattr(self, "_returned_to", []))
