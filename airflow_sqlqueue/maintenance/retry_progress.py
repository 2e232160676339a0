"""Progress and audit of batched retries, stored beside the health samples (the queue database, or the one of
``health_samples_conn_id``), so the "SQL Queues" page reads them back while a run goes on and after it ended.

One table (``sqlqueue_retry_progress``, created with its indexes when first written), one row per event of a run
(a DAG run of ``sqlqueue_error_queue_batch_retry``):

- ``start``: who started it (the user who triggered the DAG run), what it will look at (``detail``: plan,
  selection, redirects, ``to_do``);
- ``batch``: one per batch, as it ended: messages looked at, returned per queue, left with their reasons;
- ``cancel``: a user asked the run to stop (the task asks before each batch and stops there);
- ``end``: the run ended: ``detail.state`` is ``done``, ``cancelled`` or ``failed``.

Statements in ``sql/retry_progress_<dialect>.sql``; identifiers quoted by the dialect, values as parameters.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from airflow_sqlqueue.transport import SqlQueueTransport
from airflow_sqlqueue.transport.common.errors import QueueNotFoundError
from airflow_sqlqueue.transport.dialects import Dialect

from .tables import DialectTable, as_time

PROGRESS_TABLE = "sqlqueue_retry_progress"
#: One row per message a batch returned (the table's name is the progress table's with this suffix).
MESSAGES_SUFFIX = "_messages"
KINDS = ("start", "batch", "cancel", "end")
#: At most this many "left" reasons are kept per batch (the count is always exact).
MAX_LEFT_DETAIL = 100


class ProgressTable(DialectTable):
    """The progress table on one database."""

    file_stem = "retry_progress_{dialect}"

    def __init__(self, dialect: Dialect, table: str = PROGRESS_TABLE) -> None:
        super().__init__(dialect, table, "retry progress table")
        run_index, conn_index = f"{self.address.table}_run_ix", f"{self.address.table}_conn_ix"
        messages = replace(self.address, table=self.address.table + MESSAGES_SUFFIX)
        messages_index = f"{messages.table}_id_ix"
        self.identifiers = {"progress": dialect.qualified(self.address), "run_index": dialect.quote(run_index),
                            "conn_index": dialect.quote(conn_index), "messages": dialect.qualified(messages),
                            "messages_index": dialect.quote(messages_index)}
        self.names = {"progress_name": dialect.qualified(self.address), "run_index_name": run_index,
                      "conn_index_name": conn_index, "messages_name": dialect.qualified(messages),
                      "messages_index_name": messages_index}

    def create(self, cursor: Any) -> None:
        """The tables and their indexes, if missing."""
        for name in ("create_retry_progress", "create_retry_progress_run_index", "create_retry_progress_conn_index",
                     "create_retry_messages", "create_retry_messages_index"):
            self.execute(cursor, name)


def record(transport: SqlQueueTransport, run_id: str, conn_id: str, error_queue: str, kind: str, *,
           batch: int = 0, user_name: str | None = None, looked_at: int = 0, returned: dict[str, int] | None = None,
           left: list[dict[str, str]] | None = None, detail: dict[str, Any] | None = None,
           table: str = PROGRESS_TABLE, now: datetime | None = None,
           message_ids: list[str] | None = None) -> None:
    """Write one row (the table is created when missing); a batch's ``message_ids`` (the messages it returned)
    one row each, by one INSERT ... SELECT in the same transaction."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    progress = ProgressTable(transport.dialect, table)
    returned = returned or {}
    left = left or []
    row = {"run_id": run_id, "conn_id": conn_id, "error_queue": error_queue, "kind": kind, "batch": batch,
           "recorded_at": progress.time_param(now or datetime.now(timezone.utc)), "user_name": user_name,
           "looked_at": looked_at, "returned_total": sum(returned.values()),
           "returned": json.dumps(returned, sort_keys=True), "left_count": len(left),
           "left_detail": json.dumps(left[:MAX_LEFT_DETAIL]), "detail": json.dumps(detail or {}, sort_keys=True)}

    def work(cur: Any) -> None:
        progress.create(cur)
        progress.execute(cur, "insert_retry_progress", row)
        if message_ids:
            progress.execute(cur, "insert_retry_messages", {
                "run_id": run_id, "conn_id": conn_id, "error_queue": error_queue, "batch": batch,
                "recorded_at": row["recorded_at"], "user_name": user_name, "message_ids": json.dumps(message_ids)})

    transport.run(work, what=f"record retry progress into {progress.name!r}")


def cancel_requested(transport: SqlQueueTransport, run_id: str, table: str = PROGRESS_TABLE) -> bool:
    """Whether someone asked run ``run_id`` to stop."""
    progress = ProgressTable(transport.dialect, table)
    try:
        count = transport.run(lambda cur: progress.execute(cur, "retry_cancel_requested", {"run_id": run_id})
                              .fetchone()[0], what=f"read retry progress from {progress.name!r}", read_only=True)
    except QueueNotFoundError:
        return False
    return int(count or 0) > 0


def recent_runs(transport: SqlQueueTransport, conn_id: str, n: int = 20, table: str = PROGRESS_TABLE) -> list[str]:
    """Run ids of the latest ``n`` runs started on ``conn_id``, newest first."""
    progress = ProgressTable(transport.dialect, table)
    try:
        rows = transport.run(lambda cur: progress.execute(cur, "recent_retry_runs", {"conn_id": conn_id, "n": n})
                             .fetchall(), what=f"read retry progress from {progress.name!r}", read_only=True)
    except QueueNotFoundError:
        return []
    return [str(r[0]) for r in rows]


def run_rows(transport: SqlQueueTransport, run_id: str, table: str = PROGRESS_TABLE) -> list[dict[str, Any]]:
    """Every row of one run, oldest first (JSON columns decoded); empty when nothing was recorded."""
    progress = ProgressTable(transport.dialect, table)
    try:
        rows = transport.run(lambda cur: progress.execute(cur, "retry_progress_of_run", {"run_id": run_id})
                             .fetchall(), what=f"read retry progress from {progress.name!r}", read_only=True)
    except QueueNotFoundError:
        return []
    return [{"kind": r[0], "batch": int(r[1]), "recorded_at": as_time(r[2]), "user_name": r[3],
             "looked_at": int(r[4]), "returned_total": int(r[5]), "returned": json.loads(r[6]),
             "left_count": int(r[7]), "left": json.loads(r[8]), "detail": json.loads(r[9])} for r in rows]


def message_retries(transport: SqlQueueTransport, conn_id: str, message_id: str,
                    table: str = PROGRESS_TABLE) -> list[dict[str, Any]]:
    """The batched retries that returned one message (by native Id) on ``conn_id``, oldest first: run, batch,
    when, and who started the run; empty when none (or nothing was recorded yet)."""
    progress = ProgressTable(transport.dialect, table)
    try:
        rows = transport.run(lambda cur: progress.execute(cur, "retry_messages_of", {
            "message_id": message_id.lower(), "conn_id": conn_id}).fetchall(),
            what=f"read batched retries from {progress.name!r}", read_only=True)
    except QueueNotFoundError:
        return []
    return [{"run_id": str(r[0]), "batch": int(r[1]), "at": as_time(r[2]), "by": r[3]} for r in rows]


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One run's progress from its rows: who started it and when, batches done, returned (per queue and in all),
    left (count and the first reasons), still to do, and its state (``queued`` before the task started,
    ``running``, ``cancelling``, ``done``, ``cancelled``, ``failed``)."""
    start = next((r for r in rows if r["kind"] == "start"), None)
    batches = [r for r in rows if r["kind"] == "batch"]
    cancels = [r for r in rows if r["kind"] == "cancel"]
    end = next((r for r in reversed(rows) if r["kind"] == "end"), None)
    returned: dict[str, int] = {}
    for b in batches:
        for queue, count in b["returned"].items():
            returned[queue] = returned.get(queue, 0) + int(count)
    looked_at = sum(b["looked_at"] for b in batches)
    to_do = (start or {}).get("detail", {}).get("to_do")
    if end is not None:
        state = end["detail"].get("state", "done")
    elif start is None:
        state = "queued"
    else:
        state = "cancelling" if cancels else "running"
    return {
        "state": state, "started_by": start["user_name"] if start else None,
        "started_at": start["recorded_at"].isoformat() if start else None,
        "ended_at": end["recorded_at"].isoformat() if end else None,
        "plan": (start or {}).get("detail", {}).get("plan"),
        "selection": (start or {}).get("detail", {}).get("selection"),
        "redirects": (start or {}).get("detail", {}).get("redirects"),
        "to_do": to_do, "batches_done": len(batches), "looked_at": looked_at,
        "remaining": None if to_do is None else max(int(to_do) - looked_at, 0),
        "returned": returned, "total_returned": sum(returned.values()),
        "left_count": sum(b["left_count"] for b in batches), "left": [x for b in batches for x in b["left"]][:20],
        "cancel_requested_by": cancels[0]["user_name"] if cancels else None,
        "error": end["detail"].get("error") if end else None,
        "batches": [{"batch": b["batch"], "finished_at": b["recorded_at"].isoformat(), "looked_at": b["looked_at"],
                     "returned": b["returned"], "left_count": b["left_count"],
                     "started_at": b["detail"].get("started_at")} for b in batches],
    }
