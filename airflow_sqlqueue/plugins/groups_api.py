"""The group cards and whole-group actions of the "SQL Queues" page (included by
:func:`airflow_sqlqueue.plugins.api.create_app`).

| route | needs |
|---|---|
| ``GET /api/connections/{conn_id}/failed/group-cards?by=``: the groups with count, first and last failure, last
  retried (by whom, through which run) and how many failed again after a retry | read |
| ``POST /api/connections/{conn_id}/failed/group/retry`` ``{group filter, "expected"}``: return the whole group
  (up to 1,000 messages; more: a batched retry) | retry |
| ``POST /api/connections/{conn_id}/failed/group/delete`` ``{group filter, "expected"}``: delete the whole group
  | delete |

``expected`` is the count the user confirmed: a group that holds another number now is left as it is (409 with
its count). A group is named by at least one field or ``missing`` (never "every message"). Archiving a group and a
batched retry of a group use the archive's and the batched retry's routes with the same filter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query, status
from pydantic import BaseModel, Field

from airflow_sqlqueue.dashboard import audit as audit_log
from airflow_sqlqueue.dashboard import group_actions, sources
from airflow_sqlqueue.maintenance.config import retry_targets
from airflow_sqlqueue.transport.errorqueue.previews import FailedFilter

from . import models
from .auth import DeleterDep, EditorDep, ReaderDep, can_edit
from .texts import Field_, Text


class GroupAction(BaseModel):
    """One group, by its filter (as a group card gives it), and the number of messages the user confirmed."""

    failed_q: Text | None = Field(default=None, min_length=1, max_length=500)
    exception_type: Text | None = Field(default=None, min_length=1, max_length=500)
    message_type: Text | None = Field(default=None, min_length=1, max_length=500)
    missing: list[Field_] = Field(default_factory=list, max_length=3)
    expected: int = Field(ge=1, le=group_actions.MAX_DELETE)

    def where(self) -> FailedFilter:
        if not (self.failed_q or self.exception_type or self.message_type or self.missing):
            raise ValueError("name a group (a field or 'missing'): a group action never takes every message")
        return FailedFilter(self.failed_q, self.exception_type, self.message_type, None, frozenset(self.missing))

    def described(self) -> dict[str, Any]:
        return self.model_dump(exclude={"expected"}, exclude_none=True)


def groups_router(guard: Callable[[str, Callable[[], Any]], Any],
                  problems: dict[int | str, dict[str, Any]] | None = None) -> APIRouter:
    """The routes, with the page's error mapping ``guard`` and the errors they may answer."""
    router = APIRouter()

    @router.get("/api/connections/{conn_id}/failed/group-cards", response_model=models.GroupCards,
                responses=problems)
    def cards(conn_id: str, user: ReaderDep,
              by: Annotated[Literal["exception_type", "message_type", "failed_q", "all"], Query()] = "exception_type",
              recount: Annotated[bool, Query()] = False) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            conn = sources.configured_connection(sources.dashboard_config(), conn_id)
            with sources.open_transport(conn_id, conn.error_queue) as transport:
                data = group_actions.group_cards(transport, transport.name(conn.error_queue), conn_id, by,
                                                 check=True if recount else None)
            return {"conn_id": conn_id, "can_edit": can_edit(user, conn_id),
                    "max_return": group_actions.MAX_RETURN, **data}

        return guard(conn_id, work)

    def _act(conn_id: str, request: GroupAction, user: Any, retry: bool) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            where = request.where()
            conn = sources.configured_connection(sources.dashboard_config(), conn_id)
            with sources.open_transport(conn_id, conn.error_queue) as transport:
                error_queue = transport.name(conn.error_queue)
                try:
                    if retry:
                        error_queue, targets = retry_targets(conn, transport)
                        result = group_actions.return_group(transport, error_queue, targets, where, request.expected)
                    else:
                        result = group_actions.delete_group(transport, error_queue, where, request.expected)
                except group_actions.CountChangedError as exc:
                    raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
            event = "sqlqueue.retry_failed_group" if retry else "sqlqueue.delete_failed_group"
            audit_log.audit(event, user.get_name(), {
                "conn_id": conn_id, "error_queue": error_queue, "filter": request.described(),
                "expected": request.expected, **result})
            result.pop("returned_ids", None)
            return {"conn_id": conn_id, "error_queue": error_queue, **result}

        return guard(conn_id, work)

    @router.post("/api/connections/{conn_id}/failed/group/retry", response_model=models.GroupReturned,
                 responses=problems)
    def retry_group(conn_id: str, request: GroupAction, user: EditorDep) -> dict[str, Any]:
        return _act(conn_id, request, user, retry=True)

    @router.post("/api/connections/{conn_id}/failed/group/delete", response_model=models.GroupDeleted,
                 responses=problems)
    def delete_group(conn_id: str, request: GroupAction, user: DeleterDep) -> dict[str, Any]:
        return _act(conn_id, request, user, retry=False)

    return router
