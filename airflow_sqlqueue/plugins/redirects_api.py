"""Retry redirects and the user's permissions on the "SQL Queues" page (included by
:func:`airflow_sqlqueue.plugins.api.create_app`).

| route | needs |
|---|---|
| ``GET /api/connections/{conn_id}/permissions``: each action and whether the user may take it | view |
| ``GET /api/connections/{conn_id}/redirects``: the stored retry redirects, and the queues one may go to | view |
| ``POST /api/connections/{conn_id}/redirects`` ``{"source", "target"}``: redirect the retries of ``source`` to
  ``target`` (a configured queue of the connection that exists) | redirects |
| ``POST /api/connections/{conn_id}/redirects/remove`` ``{"source"}``: remove that redirect | redirects |

Redirects live in the connection's database (:mod:`airflow_sqlqueue.transport.errorqueue.redirects`) and every
retry path follows them; each change is audited with the user (Airflow's audit log). Queue names are canonical.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from fastapi import APIRouter, HTTPException, status
from pydantic import BaseModel, Field

from airflow_sqlqueue.dashboard import audit as audit_log
from airflow_sqlqueue.dashboard import sources
from airflow_sqlqueue.dashboard.queues import canonical
from airflow_sqlqueue.maintenance.config import retry_targets
from airflow_sqlqueue.transport.errorqueue.redirects import (
    MAX_NAME,
    Redirect,
    RedirectNotFoundError,
    RedirectRefusedError,
)

from .auth import ReaderDep, RedirectorDep
from .models import Answer
from .permissions import Action, allowed_actions, may
from .texts import Text


class RedirectIn(BaseModel):
    """A redirect to make: the queue whose failed messages are redirected, and where they go back to."""

    source: Text = Field(min_length=1, max_length=MAX_NAME)
    target: Text = Field(min_length=1, max_length=MAX_NAME)


class RedirectOut(Answer):
    source: str
    target: str
    created_by: str | None
    created_at: str | None


class SourceIn(BaseModel):
    """The redirect to remove, by its source queue (any spelling)."""

    source: Text = Field(min_length=1, max_length=MAX_NAME)


class Redirects(Answer):
    conn_id: str
    error_queue: str
    can_manage: bool
    queues: list[str]
    redirects: list[RedirectOut]


class RedirectChanged(Answer):
    conn_id: str
    redirect: RedirectOut


class Permissions(Answer):
    conn_id: str
    user: str
    actions: dict[str, bool]


def redirects_router(guard: Callable[[str, Callable[[], Any]], Any],
                     problems: dict[int | str, dict[str, Any]] | None = None) -> APIRouter:
    """The routes, with the page's error mapping ``guard`` and the errors they may answer (OpenAPI)."""
    router = APIRouter()

    @router.get("/api/connections/{conn_id}/permissions", response_model=Permissions, responses=problems)
    def permissions(conn_id: str, user: ReaderDep) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            sources.configured_connection(sources.dashboard_config(), conn_id)
            return {"conn_id": conn_id, "user": user.get_name(), "actions": allowed_actions(user, conn_id)}

        return guard(conn_id, work)

    @router.get("/api/connections/{conn_id}/redirects", response_model=Redirects, responses=problems)
    def list_redirects(conn_id: str, user: ReaderDep) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            conn = sources.configured_connection(sources.dashboard_config(), conn_id)
            with sources.open_transport(conn_id, conn.error_queue) as transport:
                error_queue, targets = retry_targets(conn, transport)
                found = transport.errors(error_queue).retry_redirects.list()
                return {"conn_id": conn_id, "error_queue": canonical(transport, error_queue),
                        "can_manage": may(user, Action.REDIRECTS, conn_id),
                        "queues": [canonical(transport, q) for q in targets],
                        "redirects": [r.as_dict() for r in found]}

        return guard(conn_id, work)

    def change(conn_id: str, user: BaseUser, event: str, refusals: dict[type[Exception], int],
               act: Callable[[Any, Any], tuple[str, Redirect]]) -> dict[str, Any]:
        """A redirect changed by ``act(conn, transport)`` (its error queue and the redirect), on the page's error
        mapping: a refusal of ``refusals`` answers its status with the reason (nothing changed), else audited as
        ``event`` with the user."""
        def work() -> dict[str, Any]:
            conn = sources.configured_connection(sources.dashboard_config(), conn_id)
            with sources.open_transport(conn_id, conn.error_queue) as transport:
                try:
                    error_queue, redirect = act(conn, transport)
                except tuple(refusals) as exc:
                    code = next(c for kind, c in refusals.items() if isinstance(exc, kind))
                    raise HTTPException(code, str(exc)) from None
            audit_log.audit(event, user.get_name(), {
                "conn_id": conn_id, "error_queue": error_queue, "source": redirect.source, "target": redirect.target})
            return {"conn_id": conn_id, "redirect": redirect.as_dict()}

        return guard(conn_id, work)

    @router.post("/api/connections/{conn_id}/redirects", response_model=RedirectChanged, responses=problems)
    def create_redirect(conn_id: str, request: RedirectIn, user: RedirectorDep) -> dict[str, Any]:
        def act(conn: Any, transport: Any) -> tuple[str, Redirect]:
            error_queue, targets = retry_targets(conn, transport)
            try:
                wanted = transport.address(request.target)
            except ValueError as exc:
                raise HTTPException(status.HTTP_400_BAD_REQUEST, f"target: {exc}") from None
            if not any(transport.dialect.same_queue(wanted, transport.address(q)) for q in targets):
                raise HTTPException(status.HTTP_409_CONFLICT, (
                    f"target {canonical(transport, request.target)!r} is not a queue a retry may write to on "
                    f"connection {conn_id!r} (allowed: {', '.join(canonical(transport, q) for q in targets)})"))
            return error_queue, transport.errors(error_queue).retry_redirects.create(
                request.source, request.target, created_by=user.get_name())

        # RedirectExistsError is a RedirectRefusedError: both 409
        return change(conn_id, user, "sqlqueue.redirect_created", {RedirectRefusedError: status.HTTP_409_CONFLICT},
                      act)

    @router.post("/api/connections/{conn_id}/redirects/remove", response_model=RedirectChanged, responses=problems)
    def remove_redirect(conn_id: str, request: SourceIn, user: RedirectorDep) -> dict[str, Any]:
        def act(conn: Any, transport: Any) -> tuple[str, Redirect]:
            error_queue = transport.name(conn.error_queue)
            return error_queue, transport.errors(error_queue).retry_redirects.remove(request.source)

        return change(conn_id, user, "sqlqueue.redirect_removed", {
            RedirectNotFoundError: status.HTTP_404_NOT_FOUND, RedirectRefusedError: status.HTTP_400_BAD_REQUEST}, act)

    return router
