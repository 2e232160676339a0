"""Archive failed messages by age or group to Parquet with a manifest (then delete them), and restore them, as tasks.

The work is :mod:`airflow_sqlqueue.archive.error_archive`: files written, fsync'ed and verified before any row is
deleted; a deletion a crash left unfinished is finished by the next run at the same location; a restore puts each
message back once. The return value (XCom) is the manifest's summary, never message content.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.sdk import Context

from airflow_sqlqueue import metrics
from airflow_sqlqueue.archive.error_archive import ArchiveSelection, archive_failed, restore_archive
from airflow_sqlqueue.transport.errorqueue.previews import FailedFilter

from .base import SqlQueueBaseOperator, rendered_list, rendered_number


def _templated(*values: Any) -> bool:
    return any(isinstance(v, str) and "{{" in v for v in values)


def cutoff_from(older_than: Any, cutoff: Any, now: datetime | None = None) -> datetime | None:
    """The cut-off from ``older_than`` (a timedelta or a number of days) or ``cutoff`` (an aware datetime or ISO
    8601 text with a zone); ValueError says which argument is wrong and how to write it."""
    if older_than not in (None, "") and cutoff not in (None, ""):
        raise ValueError("give older_than or cutoff, not both")
    if isinstance(older_than, timedelta):
        age = older_than
    elif older_than not in (None, ""):
        days = rendered_number(older_than, "older_than", float)
        if isinstance(days, bool) or not math.isfinite(days) or days < 0 or days > 100_000:
            raise ValueError(f"older_than must be a number of days from 0 to 100,000 (or a timedelta), got "
                             f"{older_than!r}")
        age = timedelta(days=days)
    else:
        age = None
    if age is not None:
        return (now or datetime.now(timezone.utc)) - age
    if cutoff in (None, ""):
        return None
    if isinstance(cutoff, str):
        try:
            cutoff = datetime.fromisoformat(cutoff.strip())
        except ValueError:
            raise ValueError(f"cutoff {cutoff!r} is not an ISO 8601 time; write e.g. 2026-01-31T00:00:00+00:00"
                             ) from None
    if not isinstance(cutoff, datetime) or cutoff.tzinfo is None:
        raise ValueError(f"cutoff must be a time with its zone, e.g. 2026-01-31T00:00:00+00:00, got {cutoff!r}")
    return cutoff.astimezone(timezone.utc)


class SqlQueueArchiveFailedOperator(SqlQueueBaseOperator):
    """Archive the error queue's failed messages older than a cut-off and/or of one group to Parquet files with a
    manifest at ``location``, then delete exactly those rows. Returns the manifest's summary.

    :param location: a local directory or a URI ``pyarrow.fs`` opens (``s3://``, ``gs://``, ``file://``) (templated).
    :param older_than: archive messages that failed longer ago than this (a timedelta or days; templated).
    :param cutoff: or: archive messages that failed before this time (aware datetime or ISO text; templated).
    :param failed_q: only messages whose FailedQ is this (templated).
    :param exception_type: only messages whose exception type is this (templated).
    :param message_type: only messages whose ``NServiceBus.EnclosedMessageTypes`` is this (templated).
    :param search: only messages whose headers contain this text (templated).
    :param batch_size: rows per read, Parquet row group and delete transaction (templated; 1 to 10,000).
    :param max_messages: archive no more than this many messages in one run (templated).
    :param error_queue: the error queue (templated).
    :param sqlqueue_conn_id: an ``mssql``, ``odbc``, ``postgres`` or ``sqlite`` connection.

    A message whose ``NServiceBus.TimeOfFailure`` cannot be read is never older than a cut-off: archive it by group.
    """

    template_fields: Sequence[str] = ("error_queue", "location", "older_than", "cutoff", "failed_q", "exception_type",
                                      "message_type", "search", "batch_size", "max_messages")

    def __init__(self, *, location: str, older_than: timedelta | float | str | None = None,
                 cutoff: datetime | str | None = None, failed_q: str | None = None,
                 exception_type: str | None = None, message_type: str | None = None, search: str | None = None,
                 batch_size: int | str = 500, max_messages: int | str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.location = location
        self.older_than = older_than
        self.cutoff = cutoff
        self.failed_q = failed_q
        self.exception_type = exception_type
        self.message_type = message_type
        self.search = search
        self.batch_size = batch_size
        self.max_messages = max_messages
        if not _templated(location, older_than, cutoff, failed_q, exception_type, message_type, search, batch_size,
                          max_messages):
            self.selection()  # refuse bad arguments when the DAG is parsed
            self.rendered_batch_size()

    def selection(self) -> ArchiveSelection:
        """What to archive, from the (rendered) arguments; ValueError says which one is wrong."""
        if not isinstance(self.location, str) or not self.location.strip():
            raise ValueError("location is empty: give a local directory or a URI such as s3://bucket/error-archive")
        where = FailedFilter(self.failed_q or None, self.exception_type or None, self.message_type or None,
                             self.search or None)
        return ArchiveSelection(cutoff=cutoff_from(self.older_than, self.cutoff), where=where,
                                max_messages=rendered_number(self.max_messages, "max_messages", int))

    def rendered_batch_size(self) -> int:
        size = rendered_number(self.batch_size, "batch_size", int)
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= 10_000:
            raise ValueError(f"batch_size must be a whole number from 1 to 10,000, got {self.batch_size!r}")
        return size

    def execute(self, context: Context) -> dict[str, Any]:
        selection = self.selection()
        batch_size = self.rendered_batch_size()
        with self.open_transport() as transport:
            queue = transport.name(self.error_queue)
            written = [0]

            def on_batch(count: int) -> None:
                written[0] += count
                self.log.info("written %d messages to the archive so far", written[0])

            result = archive_failed(transport, self.error_queue, self.location.strip(), selection,
                                    batch_size=batch_size, on_batch=on_batch,
                                    labels={"conn_id": self.sqlqueue_conn_id})
        metrics.incr("archived", self.sqlqueue_conn_id, queue, int(result["deleted"]))
        if result["resumed"]:
            self.log.info("finished the deletion of earlier archives a crash had interrupted: %s", result["resumed"])
        self.log.info("archived %d messages of %s to %s (archive %s): %d deleted, %d no longer there, %d skipped",
                      result["rows"], queue, result["location"], result["archive_id"], result["deleted"],
                      result["not_found"], result["skipped"])
        return result


class SqlQueueRestoreArchiveOperator(SqlQueueBaseOperator):
    """Put archived failed messages back into their error queue (same Id, headers and body), each once.

    :param location: where the archive is (templated).
    :param archive_id: which archive, as the archive task returned or ``sqlqueue archives list`` shows (templated).
    :param ids: only these native message ids (templated; None: every message of the archive).
    :param batch_size: rows per transaction (templated; 1 to 10,000).
    """

    template_fields: Sequence[str] = ("location", "archive_id", "ids", "batch_size", "error_queue")

    def __init__(self, *, location: str, archive_id: str, ids: Sequence[str] | str | None = None,
                 batch_size: int | str = 500, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.location = location
        self.archive_id = archive_id
        self.ids = ids
        self.batch_size = batch_size

    def execute(self, context: Context) -> dict[str, Any]:
        size = rendered_number(self.batch_size, "batch_size", int)
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= 10_000:
            raise ValueError(f"batch_size must be a whole number from 1 to 10,000, got {self.batch_size!r}")
        ids = None if self.ids in (None, "") else [str(i) for i in rendered_list(self.ids, "ids")]
        with self.open_transport() as transport:
            result = restore_archive(transport, str(self.location).strip(), str(self.archive_id).strip(), ids=ids,
                                     batch_size=size)
        metrics.incr("archive_restored", self.sqlqueue_conn_id, result["queue"], int(result["restored"]))
        self.log.info("restored %d messages of archive %s into %s (%d were restored before, %d already there)",
                      result["restored"], result["archive_id"], result["queue"], result["already_restored"],
                      result["already_present"])
        return result
