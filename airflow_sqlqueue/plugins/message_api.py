"""The failed-message page's routes of the "SQL Queues" page (included by
:func:`airflow_sqlqueue.plugins.api.create_app`).

| route | needs |
|---|---|
| ``GET /message?conn_id=&id=&seq=``: the page of one failed message (a URL to share) | read |
| ``GET /api/connections/{conn_id}/failed/message?id=&seq=``: one failed message: failure, headers, body laid
  out by content type (cut at 64 KiB), its retry history | read |
| ``GET /api/connections/{conn_id}/failed/conversation?conversation_id=&but=``: the failed messages of a
  conversation (a search of the headers: the page loads it after the message) | read |
| ``GET /api/connections/{conn_id}/failed/message/body?id=&seq=``: the whole body, as a download | read |
| ``GET /api/connections/{conn_id}/failed/retried?id=...``: for Ids of a page of the list, how often each was
  retried before, last when and by whom | read |

``seq`` is optional: without it the message is found by its Id (a returned message that failed again is back
under a new position, the same Id). Retry, edit and retry, delete and archive use the list's routes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse, Response

from airflow_sqlqueue.dashboard import message as one
from airflow_sqlqueue.dashboard import retry_history, sources
from airflow_sqlqueue.transport.wire.headers import FAILURE_HEADERS

from . import models
from .auth import ReaderDep, can_edit
from .texts import MAX_SEQ, Text

MessageId = Annotated[Text, Query(min_length=1, max_length=100)]
Seq = Annotated[int | None, Query(ge=1, le=MAX_SEQ)]


def message_router(guard: Callable[[str, Callable[[], Any]], Any], static: Callable[[str], str],
                   edit_retry_on: Callable[[], bool], problems: dict[int | str, dict[str, Any]] | None = None
                   ) -> APIRouter:
    """The routes, with the page's error mapping ``guard``, its static files and the edit-and-retry switch."""
    router = APIRouter()

    @router.get("/message", response_class=HTMLResponse, include_in_schema=False)
    def page(user: ReaderDep) -> HTMLResponse:
        return HTMLResponse(static("message.html"), headers={"Cache-Control": "no-store"})

    @router.get("/api/connections/{conn_id}/failed/message", response_model=models.MessageDetail,
                responses=problems)
    def message(conn_id: str, user: ReaderDep, id: MessageId, seq: Seq = None) -> dict[str, Any]:  # noqa: A002
        def work() -> dict[str, Any]:
            config = sources.dashboard_config()
            conn = sources.configured_connection(config, conn_id)
            with sources.open_transport(conn_id, conn.error_queue) as transport:
                error_queue = transport.name(conn.error_queue)
                found = one.read_message(transport, error_queue, seq, id)
                shown = one.canonical(transport, error_queue)
            with sources.open_transport(config.samples_conn_id(conn_id)) as store:
                batched = retry_history.batched_retries(store, conn_id, found["id"])
            history = retry_history.message_history(conn_id, found["id"], found["time_of_failure"],
                                                    found["headers"], batched=batched)
            return {"conn_id": conn_id, "error_queue": shown, "can_edit": can_edit(user, conn_id),
                    "edit_retry": edit_retry_on(), "failure_headers": list(FAILURE_HEADERS),
                    "body_shown_bytes": one.BODY_SHOWN_BYTES, **found, "history": history}

        return guard(conn_id, work)

    @router.get("/api/connections/{conn_id}/failed/conversation", response_model=models.Conversation,
                responses=problems)
    def conversation(conn_id: str, user: ReaderDep,
                     conversation_id: Annotated[Text, Query(min_length=1, max_length=200)],
                     but: Annotated[Text | None, Query(max_length=100)] = None, seq: Seq = None,
                     after: Annotated[int | None, Query(ge=0, le=MAX_SEQ)] = None) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            conn = sources.configured_connection(sources.dashboard_config(), conn_id)
            with sources.open_transport(conn_id, conn.error_queue) as transport:
                talk = one.conversation(transport, transport.name(conn.error_queue), conversation_id, but or "",
                                        seq=seq, after=after)
            return {"conn_id": conn_id, "conversation_id": conversation_id, **talk}

        return guard(conn_id, work)

    @router.get("/api/connections/{conn_id}/failed/message/body", include_in_schema=False)
    def body(conn_id: str, user: ReaderDep, id: MessageId, seq: Annotated[int, Query(ge=1, le=MAX_SEQ)]  # noqa: A002
             ) -> Response:
        def work() -> bytes:
            conn = sources.configured_connection(sources.dashboard_config(), conn_id)
            with sources.open_transport(conn_id, conn.error_queue) as transport:
                return one.whole_body(transport, transport.name(conn.error_queue), seq, id)

        data = guard(conn_id, work)
        # never shown by the browser as a page: a download, no type sniffing, sandboxed should it be opened
        return Response(data, media_type="application/octet-stream", headers={
            "Content-Disposition": f'attachment; filename="message-{seq}.bin"', "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "sandbox; default-src 'none'", "Cache-Control": "no-store"})

    @router.get("/api/connections/{conn_id}/failed/retried", response_model=models.RetriedIds, responses=problems)
    def retried(conn_id: str, user: ReaderDep,
                id: Annotated[list[Annotated[Text, Query(min_length=1, max_length=100)]],  # noqa: A002
                              Query(min_length=1, max_length=100)]) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            sources.configured_connection(sources.dashboard_config(), conn_id)
            return {"conn_id": conn_id, "retried": retry_history.retried_ids(conn_id, id)}

        return guard(conn_id, work)

    return router
