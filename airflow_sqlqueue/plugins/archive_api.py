"""The error archive's routes of the "SQL Queues" page (included by :func:`airflow_sqlqueue.plugins.api.create_app`).

| route | needs |
|---|---|
| ``GET /api/archive/connections``: configured connections, whether archiving is set up and the user may act
  | read |
| ``GET /api/connections/{conn_id}/archives``: the archives of that connection's error queue | read |
| ``GET /api/connections/{conn_id}/archives/{archive_id}?after=&limit=&failed_q=&exception_type=&message_type=
  &search=``: the archive's summary and one page of its messages (previews) | read |
| ``POST /api/connections/{conn_id}/archives`` ``{"older_than_days", "failed_q", "exception_type", "message_type",
  "search", "max_messages"}``: archive now | edit |
| ``POST /api/connections/{conn_id}/archives/{archive_id}/restore`` ``{"ids": [...] or null}``: restore | edit |

The location is the deployment's ``archive.location`` (maintenance configuration): a request never names one.
Each action is audited with the user (Airflow's audit log). An archive made through another connection is not shown
and cannot be restored through this one.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, status
from pydantic import BaseModel, Field

from airflow_sqlqueue import metrics
from airflow_sqlqueue.archive.error_archive import (
    ArchiveSelection,
    archive_failed,
    archive_page,
    list_archives,
    read_archive,
    restore_archive,
)
from airflow_sqlqueue.dashboard import audit as audit_log
from airflow_sqlqueue.dashboard import sources
from airflow_sqlqueue.transport.errorqueue.previews import FailedFilter

from . import models
from .auth import ArchiverDep, ReaderDep
from .permissions import Action, may
from .texts import MAX_SEQ, Field_, Text

MAX_PAGE = 500
MAX_RESTORE_IDS = 10_000


class ArchiveNow(BaseModel):
    """What to archive now: older than some days and/or one group (at least one of them)."""

    older_than_days: float | None = Field(default=None, ge=0, le=100_000, allow_inf_nan=False)
    failed_q: Text | None = Field(default=None, max_length=500)
    exception_type: Text | None = Field(default=None, max_length=500)
    message_type: Text | None = Field(default=None, max_length=500)
    search: Text | None = Field(default=None, max_length=200)
    missing: list[Field_] = Field(default_factory=list, max_length=3)
    max_messages: int | None = Field(default=None, ge=1, le=10_000_000)


class Restore(BaseModel):
    """Which archived messages go back: these native ids, or every one (null)."""

    ids: list[Annotated[Text, Field(min_length=1, max_length=100)]] | None = Field(default=None,
                                                                                   max_length=MAX_RESTORE_IDS)


def _setup(conn_id: str) -> tuple[Any, str]:
    """The connection's settings and the deployment's archive location (409 when archiving is not set up)."""
    config = sources.dashboard_config()
    conn = sources.configured_connection(config, conn_id)
    if config.archive is None:
        raise HTTPException(status.HTTP_409_CONFLICT, "archiving is not set up: an administrator adds an 'archive' "
                            "key with a location to the Variable 'sqlqueue_maintenance'")
    return conn, config.archive.location


def _ours(summary: dict[str, Any], conn_id: str, error_queue: str) -> bool:
    return summary.get("queue") == error_queue and summary.get("labels", {}).get("conn_id", conn_id) == conn_id


def archive_router(guard: Callable[[str, Callable[[], Any]], Any],
                   problems: dict[int | str, dict[str, Any]] | None = None) -> APIRouter:
    """The routes, with the page's error mapping ``guard`` (clear HTTP errors, no connection fields) and the
    errors they may answer (for the OpenAPI document)."""
    router = APIRouter()

    @router.get("/api/archive/connections", response_model=models.ArchiveSetup, responses=problems)
    def connections(user: ReaderDep) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            config = sources.dashboard_config()
            return {"configured": config.archive is not None,
                    "older_than_days": config.archive.older_than_days if config.archive else None,
                    "connections": [{"conn_id": c.conn_id, "can_edit": may(user, Action.ARCHIVE, c.conn_id)}
                                    for c in config.connections]}

        return guard("", work)

    def _error_queue(conn: Any) -> str:
        with sources.open_transport(conn.conn_id, conn.error_queue) as transport:
            return transport.name(conn.error_queue)

    @router.get("/api/connections/{conn_id}/archives", response_model=models.Archives, responses=problems)
    def archives(conn_id: str, user: ReaderDep) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            conn, location = _setup(conn_id)
            error_queue = _error_queue(conn)
            found = [a for a in list_archives(location, error_queue) if _ours(a, conn_id, error_queue)]
            for item in found:
                item.pop("location", None)
            return {"conn_id": conn_id, "error_queue": error_queue, "can_edit": may(user, Action.ARCHIVE, conn_id),
                    "archives": found}

        return guard(conn_id, work)

    @router.get("/api/connections/{conn_id}/archives/{archive_id}", response_model=models.ArchivePage,
                responses=problems)
    def archive_messages(conn_id: str, archive_id: str, user: ReaderDep,
                         after: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
                         limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
                         failed_q: Annotated[Text | None, Query(max_length=500)] = None,
                         exception_type: Annotated[Text | None, Query(max_length=500)] = None,
                         message_type: Annotated[Text | None, Query(max_length=500)] = None,
                         search: Annotated[Text | None, Query(max_length=200)] = None,
                         missing: Annotated[list[Field_] | None, Query(max_length=3)] = None) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            conn, location = _setup(conn_id)
            summary = read_archive(location, archive_id)
            if not _ours(summary, conn_id, _error_queue(conn)):
                raise HTTPException(status.HTTP_404_NOT_FOUND, f"archive {archive_id!r} is not an archive of "
                                                               f"connection {conn_id!r}")
            summary.pop("location", None)
            page = archive_page(location, archive_id, after_seq=after, limit=limit + 1,
                                where=FailedFilter(failed_q, exception_type, message_type, search,
                                                    frozenset(missing or ())))
            return {"conn_id": conn_id, "can_edit": may(user, Action.ARCHIVE, conn_id), "archive": summary,
                    "messages": page[:limit], "next_after": page[limit - 1]["seq"] if len(page) > limit else None}

        return guard(conn_id, work)

    @router.post("/api/connections/{conn_id}/archives", response_model=models.Archived, responses=problems)
    def archive_now(conn_id: str, request: ArchiveNow, user: ArchiverDep) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            conn, location = _setup(conn_id)
            cutoff = None if request.older_than_days is None else \
                datetime.now(timezone.utc) - timedelta(days=request.older_than_days)
            selection = ArchiveSelection(cutoff=cutoff, where=FailedFilter(
                request.failed_q or None, request.exception_type or None, request.message_type or None,
                request.search or None, frozenset(request.missing)), max_messages=request.max_messages)
            with sources.open_transport(conn_id, conn.error_queue) as transport:
                result = archive_failed(transport, conn.error_queue, location, selection,
                                        labels={"conn_id": conn_id})
            metrics.incr("archived", conn_id, result["queue"], int(result["deleted"]))
            audit_log.audit("sqlqueue.archive_failed_messages", user.get_name(), {
                "conn_id": conn_id, "error_queue": result["queue"], "archive_id": result["archive_id"],
                "selection": result["selection"], "rows": result["rows"], "deleted": result["deleted"],
                "not_found": result["not_found"]})
            result.pop("location", None)
            return {"conn_id": conn_id, **result}

        return guard(conn_id, work)

    @router.post("/api/connections/{conn_id}/archives/{archive_id}/restore", response_model=models.Restored,
                 responses=problems)
    def restore(conn_id: str, archive_id: str, request: Restore, user: ArchiverDep) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            conn, location = _setup(conn_id)
            with sources.open_transport(conn_id, conn.error_queue) as transport:
                error_queue = transport.name(conn.error_queue)
                if not _ours(read_archive(location, archive_id), conn_id, error_queue):
                    raise HTTPException(status.HTTP_404_NOT_FOUND, f"archive {archive_id!r} is not an archive of "
                                                                   f"connection {conn_id!r}")
                result = restore_archive(transport, location, archive_id, ids=request.ids,
                                         error_queue=error_queue)
            audit_log.audit("sqlqueue.restore_archived_messages", user.get_name(), {
                "conn_id": conn_id, "error_queue": error_queue, "archive_id": archive_id,
                "ids": request.ids, "result": result})
            return {"conn_id": conn_id, **result}

        return guard(conn_id, work)

    return router
