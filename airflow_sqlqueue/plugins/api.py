"""The FastAPI app of the "SQL Queues" page, mounted by the plugin under ``/sqlqueue`` in the Airflow API server.

Routes (every one needs a logged-in user; see :mod:`.auth` for the permissions):

| route | needs |
|---|---|
| ``GET /`` (the page), ``GET /assets/{name}`` | read |
| ``GET /api/openapi.json``: the OpenAPI document of these routes (typed requests and answers, see :mod:`.models`)
  | read |
| ``GET /api/overview``: every connection with its queues, depth, age, net flow, thresholds, breaches | read |
| ``GET /api/connections/{conn_id}/history?queue=&hours=``: depth samples of one queue | read |
| ``GET /api/connections/{conn_id}/failed/groups?by=``: counts by exception type, message type or FailedQ | read |
| ``GET /api/connections/{conn_id}/failed?after=&limit=&failed_q=&exception_type=&message_type=&search=``: one
  page of previews (cut in SQL) after a position | read |
| ``POST /api/connections/{conn_id}/failed/retry`` ``{"messages": [{"seq", "id"}]}``: return to the source queue
  (only queues of the configuration) | edit |
| ``POST /api/connections/{conn_id}/failed/delete`` ``{"messages": [{"seq", "id"}]}``: delete | edit |
| ``POST /api/connections/{conn_id}/failed/edit-retry`` ``{"seq", "id", "headers", "body"}``: send an edited copy
  (only with ``[sqlqueue] dashboard_edit_retry = True``) | edit |
| ``GET /api/connections/{conn_id}/batch-retries``: the queues a retry may write to, and the recent batched
  retries with their progress (batches done, returned, left, state) | read |
| ``POST /api/connections/{conn_id}/batch-retries`` ``{"positions" or the group filter, "batch_size",
  "ramp_start", "rate_per_second", "max_messages", "redirects"}``: start a run of the batched-retry DAG | edit |
| ``POST /api/connections/{conn_id}/batch-retries/cancel`` ``{"run_id"}``: stop a run before its next batch | edit |

The error archive's routes are in :mod:`.archive_api`; retry redirects and permissions in :mod:`.redirects_api`.
"edit" above is the permission of the route's action (:mod:`.permissions`): retry, delete, edit and retry.

Only connection ids and queue names leave the server: never a host, login, password or extra.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from importlib import resources
from typing import Annotated, Any, Literal

from fastapi import FastAPI, HTTPException, Query, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from pydantic import BaseModel, Field

from airflow_sqlqueue.dashboard import audit as audit_log
from airflow_sqlqueue.dashboard import batch_retries, failed, queues, sources
from airflow_sqlqueue.extras import DISTRIBUTION
from airflow_sqlqueue.maintenance.config import CONFIG_ENV, MaintenanceConfigError, retry_targets
from airflow_sqlqueue.transport.common.errors import InvalidAddressError, SqlQueueError
from airflow_sqlqueue.transport.dialects.connect import DatabaseConnectionError
from airflow_sqlqueue.transport.errorqueue.error_queue import PositionsNotFoundError, RetryRefusedError
from airflow_sqlqueue.transport.errorqueue.previews import FailedFilter, Position
from airflow_sqlqueue.transport.wire.headers import FAILURE_HEADERS

from . import models
from .archive_api import archive_router
from .auth import BatchRetrierDep, DeleterDep, EditorDep, EditRetrierDep, ReaderDep, can_change_dag, can_edit
from .groups_api import groups_router
from .message_api import message_router
from .redirects_api import redirects_router
from .texts import MAX_SEQ, Field_, Text

log = logging.getLogger(__name__)
ASSETS = {"dashboard.js": "text/javascript", "dashboard.css": "text/css", "icon.svg": "image/svg+xml",
          "icon-dark.svg": "image/svg+xml", "archive.js": "text/javascript", "message.js": "text/javascript",
          "groups.js": "text/javascript", "common.js": "text/javascript", "workbench.css": "text/css",
          "redirects.js": "text/javascript"}
MAX_SELECTED = 1000
#: The errors every API route may answer, each a ``Problem`` (documented in the OpenAPI document).
PROBLEMS: dict[int | str, dict[str, Any]] = {code: {"model": models.Problem, "description": what} for code, what in (
    (400, "a value the request got wrong"), (401, "not logged in"), (403, "not allowed"),
    (404, "no such connection, queue, message or run"), (409, "refused, with the reason; nothing was changed"),
    (415, "not a JSON body"), (422, "the request's fields are wrong"), (500, "the configuration is wrong"),
    (502, "the database could not be used"))}
MAX_PAGE = 500


class Chosen(BaseModel):
    """One failed message by position and native Id, as a page lists it."""

    seq: int = Field(ge=1, le=MAX_SEQ)
    id: Text = Field(min_length=1, max_length=100)


class Edit(BaseModel):
    """An edited copy of one failed message: new headers and/or a new body (text; None keeps the original)."""

    seq: int = Field(ge=1, le=MAX_SEQ)
    id: Text = Field(min_length=1, max_length=100)
    headers: dict[str, str | None] | None = None
    body: str | None = Field(default=None, max_length=10_000_000)


class BatchRetryRequest(BaseModel):
    """A batched retry as the page asks for it: positions or a group filter, the plan, redirects (values only)."""

    positions: list[Chosen] = Field(default_factory=list, max_length=MAX_SELECTED)
    failed_q: Text | None = Field(default=None, max_length=500)
    exception_type: Text | None = Field(default=None, max_length=500)
    message_type: Text | None = Field(default=None, max_length=500)
    missing: list[Field_] = Field(default_factory=list, max_length=3)
    batch_size: int = 500
    ramp_start: int | None = None
    rate_per_second: float | None = Field(default=None, allow_inf_nan=False)
    max_messages: int | None = None
    redirects: dict[Text, Text] = Field(default_factory=dict, max_length=100)


class RunChoice(BaseModel):
    """One batched-retry run, by its DAG run id."""

    run_id: Text = Field(min_length=1, max_length=250)


class Selection(BaseModel):
    """Failed messages chosen in the browser."""

    messages: list[Chosen] = Field(min_length=1, max_length=MAX_SELECTED)

    def positions(self) -> list[Position]:
        return [Position(m.seq, m.id) for m in self.messages]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("airflow-sqlqueue")
    except PackageNotFoundError:
        return "0"


def _static(name: str) -> str:
    return resources.files(__package__).joinpath("static", name).read_text(encoding="utf-8")


def public_error(exc: BaseException, conn_id: str) -> str:
    """An error text safe for the browser: the provider's own messages name queues and rights, never connection
    fields; a driver's message may hold a host or login, so only its type is sent (details in the server log)."""
    if isinstance(exc, SqlQueueError) and not isinstance(exc, DatabaseConnectionError):
        return str(exc)
    log.warning("SQL queues dashboard: connection %r failed: %s", conn_id, exc)  # the password is blanked
    return (f"the database of connection {conn_id!r} could not be used ({type(exc).__name__}); "
            "details are in the API server log")


def server_paths() -> dict[str, str]:
    """Paths of this server that no text sent to the browser may show, each with the words shown instead: the
    configuration file, the archive location, Airflow's home."""
    import os

    paths: dict[str, str] = {}
    config_file = os.environ.get(CONFIG_ENV)
    if config_file:
        paths[config_file] = f"the configuration file (${CONFIG_ENV})"
        paths[os.path.abspath(config_file)] = paths[config_file]
    try:
        archive = sources.dashboard_config().archive
    except Exception:  # noqa: BLE001 - a configuration that cannot be read has no archive location to hide
        archive = None
    if archive is not None and archive.location:
        paths[str(archive.location)] = "the archive location"
    home = os.environ.get("AIRFLOW_HOME")
    if home:
        paths[home] = "$AIRFLOW_HOME"
    return paths


def scrub(text: str, paths: dict[str, str] | None = None) -> str:
    """``text`` with every server path replaced by what it is (longest first, so a path inside another goes too)."""
    for path, words in sorted((paths if paths is not None else server_paths()).items(), key=lambda p: -len(p[0])):
        if len(path) > 1:
            text = text.replace(path, words)
    return text


def public_source(source: str) -> str:
    """Where the configuration came from, in words without a path."""
    return f"the configuration file (${CONFIG_ENV})" if source.startswith("file ") else scrub(source)


def _guard(conn_id: str, work: Callable[[], Any]) -> Any:
    """Run ``work`` and turn the errors it may raise into clear HTTP errors."""
    from airflow.exceptions import AirflowNotFoundException

    try:
        return work()
    except sources.UnknownConnectionError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
    except AirflowNotFoundException:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"connection {conn_id!r} is not defined in Airflow") from None
    except PositionsNotFoundError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
    except RetryRefusedError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    except MaintenanceConfigError as exc:
        raise HTTPException(status.HTTP_500_INTERNAL_SERVER_ERROR, f"SQL queue configuration: {exc}") from None
    except (InvalidAddressError, ValueError) as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from None
    except HTTPException:
        raise
    except Exception as exc:  # noqa: BLE001 - a database failure, explained without connection fields
        if isinstance(exc, ModuleNotFoundError) and DISTRIBUTION in str(exc):
            # an optional part the API server lacks (pyarrow for the archive): the text names the extra to install
            raise HTTPException(status.HTTP_501_NOT_IMPLEMENTED, str(exc)) from None
        raise HTTPException(status.HTTP_502_BAD_GATEWAY, public_error(exc, conn_id)) from None


def _connection_overview(config: Any, conn: Any, user: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"conn_id": conn.conn_id, "error_queue": conn.error_queue,
                             "can_edit": can_edit(user, conn.conn_id), "queues": [], "error": None}
    try:
        with sources.open_transport(conn.conn_id, conn.error_queue) as transport, \
                sources.open_transport(config.samples_conn_id(conn.conn_id)) as samples:
            entry["error_queue"] = queues.canonical(transport, conn.error_queue)
            entry["queues"] = queues.connection_queues(config, conn, transport, samples)
    except HTTPException:
        raise
    except Exception as exc:  # noqa: BLE001 - one broken connection must not hide the others
        from airflow.exceptions import AirflowNotFoundException

        entry["error"] = (f"connection {conn.conn_id!r} is not defined in Airflow"
                          if isinstance(exc, AirflowNotFoundException) else public_error(exc, conn.conn_id))
    return entry


def create_app() -> FastAPI:
    """The dashboard's FastAPI app (mounted by the plugin; its routes depend on Airflow's auth manager)."""
    app = FastAPI(title="SQL Queues", description=__doc__, version=_version(), docs_url=None, redoc_url=None,
                  openapi_url=None)  # served by the route below, to logged-in readers only

    @app.exception_handler(HTTPException)
    async def login_redirect(request: Request, exc: HTTPException) -> Response:
        """A browser opening a page (not an API call) while not logged in goes to Airflow's login page; any other
        request gets the 401."""
        if exc.status_code == status.HTTP_401_UNAUTHORIZED and not request.url.path.startswith(
                f"{request.scope.get('root_path', '')}/api/") and "text/html" in request.headers.get("accept", ""):
            from airflow.api_fastapi.app import get_auth_manager

            return RedirectResponse(get_auth_manager().get_url_login(next_url=str(request.url)),
                                    status_code=status.HTTP_303_SEE_OTHER)
        detail = scrub(exc.detail) if isinstance(exc.detail, str) else exc.detail
        return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> Response:
        """422 with what was wrong where; the offending value is not echoed (it may be NaN, huge or binary)."""
        errors = [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
                  for e in exc.errors()]
        return JSONResponse({"detail": errors}, status_code=status.HTTP_422_UNPROCESSABLE_ENTITY)

    @app.get("/api/openapi.json", include_in_schema=False)
    def openapi(request: Request, user: ReaderDep) -> JSONResponse:
        """The OpenAPI document of this API (its routes as the browser calls them, under the mount point)."""
        return JSONResponse({**app.openapi(), "servers": [{"url": request.scope.get("root_path", "") or "/"}]})

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page(user: ReaderDep) -> HTMLResponse:
        return HTMLResponse(_static("index.html"), headers={"Cache-Control": "no-store"})

    @app.get("/assets/{name}", include_in_schema=False)
    def asset(name: str, user: ReaderDep) -> Response:
        if name not in ASSETS:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no asset {name!r}")
        return Response(_static(name), media_type=ASSETS[name])

    @app.get("/api/overview", response_model=models.Overview, responses=PROBLEMS)
    def overview(user: ReaderDep) -> dict[str, Any]:
        config = _guard("", sources.dashboard_config)
        paths = server_paths()
        connections = [_connection_overview(config, conn, user) for conn in config.connections]
        for entry in connections:
            if entry["error"]:
                entry["error"] = scrub(entry["error"], paths)
        return {"source": public_source(config.source), "user": user.get_name(), "connections": connections}

    @app.get("/api/connections/{conn_id}/history", response_model=models.History, responses=PROBLEMS)
    def history(conn_id: str, user: ReaderDep, queue: Annotated[Text, Query(min_length=1, max_length=500)],
                hours: Annotated[float, Query(gt=0, le=24 * 90)] = queues.DEFAULT_HISTORY_HOURS) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            config = sources.dashboard_config()
            conn = sources.configured_connection(config, conn_id)
            with sources.open_transport(conn_id, conn.error_queue) as transport:
                shown = queues.canonical(transport, queue)
                name = queues.configured_name(transport, queues.resolve_queues(conn, transport), queue)
                if name is None:
                    raise HTTPException(status.HTTP_404_NOT_FOUND,
                                        f"queue {shown!r} is not among the queues of connection {conn_id!r}")
            with sources.open_transport(config.samples_conn_id(conn_id)) as samples_transport:
                samples = queues.queue_history(config, conn_id, name, samples_transport, hours=hours)
            return {"conn_id": conn_id, "queue": shown, "hours": hours, "samples": queues.history_points(samples),
                    "net_flow_per_minute": queues.net_flow_per_minute(samples)}

        return _guard(conn_id, work)

    @app.get("/api/connections/{conn_id}/failed/groups", response_model=models.Groups, responses=PROBLEMS)
    def failed_groups(conn_id: str, user: ReaderDep,
                      by: Literal["exception_type", "message_type", "failed_q", "all"] = "exception_type",
                      recount: bool = False) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            conn = sources.configured_connection(sources.dashboard_config(), conn_id)
            with sources.open_transport(conn_id, conn.error_queue) as transport:
                return {"conn_id": conn_id, "can_edit": can_edit(user, conn_id),
                        **failed.failed_groups(transport, conn.error_queue, by, cache_key=conn_id,
                                               check=True if recount else None)}

        return _guard(conn_id, work)

    @app.get("/api/connections/{conn_id}/failed", response_model=models.FailedPage, responses=PROBLEMS)
    def failed_messages(conn_id: str, user: ReaderDep, after: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
                        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
                        failed_q: Annotated[Text | None, Query(max_length=500)] = None,
                        exception_type: Annotated[Text | None, Query(max_length=500)] = None,
                        message_type: Annotated[Text | None, Query(max_length=500)] = None,
                        search: Annotated[Text | None, Query(max_length=200)] = None,
                        missing: Annotated[list[Field_] | None, Query(max_length=3)] = None) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            where = FailedFilter(failed_q, exception_type, message_type, search, frozenset(missing or ()))
            conn = sources.configured_connection(sources.dashboard_config(), conn_id)
            with sources.open_transport(conn_id, conn.error_queue) as transport:
                return {"conn_id": conn_id, "can_edit": can_edit(user, conn_id), "edit_retry": _edit_retry_on(),
                        "failure_headers": list(FAILURE_HEADERS),
                        **failed.failed_messages(transport, conn.error_queue, after_seq=after, limit=limit,
                                                 where=where)}

        return _guard(conn_id, work)

    def _act(event: str, conn_id: str, user: Any, selection: Selection, retry: bool) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            conn = sources.configured_connection(sources.dashboard_config(), conn_id)
            positions = selection.positions()
            with sources.open_transport(conn_id, conn.error_queue) as transport:
                error_queue = transport.name(conn.error_queue)
                if retry:
                    error_queue, targets = retry_targets(conn, transport)
                    result = failed.retry_messages(transport, error_queue, positions, targets)
                else:
                    result = failed.delete_messages(transport, error_queue, positions)
            audit_log.audit(event, user.get_name(), {
                "conn_id": conn_id, "error_queue": error_queue,
                "messages": [{"seq": p.seq, "id": p.id} for p in positions], "result": result})
            return {"conn_id": conn_id, "error_queue": error_queue, **result}

        return _guard(conn_id, work)

    @app.post("/api/connections/{conn_id}/failed/edit-retry", response_model=models.EditSent, responses=PROBLEMS)
    def edit_retry(conn_id: str, edit: Edit, user: EditRetrierDep) -> dict[str, Any]:
        if not _edit_retry_on():
            raise HTTPException(status.HTTP_403_FORBIDDEN, "edit and retry is off in this deployment; an "
                                "administrator turns it on with [sqlqueue] dashboard_edit_retry = True")

        def work() -> dict[str, Any]:
            conn = sources.configured_connection(sources.dashboard_config(), conn_id)
            with sources.open_transport(conn_id, conn.error_queue) as transport:
                error_queue = transport.name(conn.error_queue)
                error_queue, targets = retry_targets(conn, transport)
                result = transport.errors(error_queue, allowed=targets).edit_and_retry(
                    Position(edit.seq, edit.id), headers=edit.headers,
                    body=None if edit.body is None else edit.body.encode("utf-8"))
            audit_log.audit("sqlqueue.edit_retry_failed_message", user.get_name(), {
                "conn_id": conn_id, "error_queue": error_queue, "message": {"seq": edit.seq, "id": edit.id},
                "headers_edited": edit.headers is not None, "body_edited": edit.body is not None, "result": result})
            return {"conn_id": conn_id, "error_queue": error_queue, **result}

        return _guard(conn_id, work)

    def _edit_retry_on() -> bool:
        from airflow.configuration import conf

        return conf.getboolean("sqlqueue", "dashboard_edit_retry", fallback=False)

    @app.get("/api/connections/{conn_id}/batch-retries", response_model=models.Runs, responses=PROBLEMS)
    def batch_retry_runs(conn_id: str, user: ReaderDep) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            config = sources.dashboard_config()
            conn = sources.configured_connection(config, conn_id)
            with sources.open_transport(conn_id, conn.error_queue) as transport:
                targets = batch_retries.retry_targets(conn, transport)
            with sources.open_transport(config.samples_conn_id(conn_id)) as store:
                runs = batch_retries.runs(config, conn_id, store)
            return {"conn_id": conn_id, "can_edit": can_edit(user, conn_id), "edit_retry": _edit_retry_on(),
                    **targets, "runs": runs}

        return _guard(conn_id, work)

    @app.post("/api/connections/{conn_id}/batch-retries", response_model=models.RunStarted, responses=PROBLEMS)
    def start_batch_retry(conn_id: str, request: BatchRetryRequest, user: BatchRetrierDep) -> dict[str, Any]:
        from airflow.exceptions import DagNotFound

        def work() -> dict[str, Any]:
            conn = sources.configured_connection(sources.dashboard_config(), conn_id)
            with sources.open_transport(conn_id, conn.error_queue) as transport:
                try:
                    run_id = batch_retries.start(conn, transport, request.model_dump(), user.get_name())
                except DagNotFound:
                    raise HTTPException(status.HTTP_404_NOT_FOUND, (
                        f"the DAG {batch_retries.DAG_ID!r} is not deployed: add the provider's DAG folder "
                        "(airflow_sqlqueue/example_dags) as a DAG bundle, or copy error_queue_batch_retry.py from "
                        "it into the DAGs folder")) from None
            unpaused, hint = False, None
            if batch_retries.dag_paused():
                if can_change_dag(user, batch_retries.DAG_ID):
                    batch_retries.unpause()
                    unpaused = True
                else:
                    hint = batch_retries.PAUSED_HINT
            audit_log.audit("sqlqueue.batch_retry_started", user.get_name(), {
                "conn_id": conn_id, "run_id": run_id, "unpaused_dag": unpaused,
                "request": {**request.model_dump(exclude={"positions"}), "positions": len(request.positions)}})
            return {"conn_id": conn_id, "run_id": run_id, "run_path": batch_retries.run_path(run_id),
                    "unpaused_dag": unpaused, "hint": hint}

        return _guard(conn_id, work)

    @app.post("/api/connections/{conn_id}/batch-retries/cancel", response_model=models.CancelAsked, responses=PROBLEMS)
    def cancel_batch_retry(conn_id: str, choice: RunChoice, user: EditorDep) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            config = sources.dashboard_config()
            conn = sources.configured_connection(config, conn_id)
            with sources.open_transport(config.samples_conn_id(conn_id)) as store:
                try:
                    result = batch_retries.cancel(config, conn_id, conn.error_queue, store, choice.run_id,
                                                  user.get_name())
                except batch_retries.RunNotFoundError as exc:
                    raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
                except batch_retries.RunFinishedError as exc:
                    raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
            audit_log.audit("sqlqueue.batch_retry_cancelled", user.get_name(), {"conn_id": conn_id, **result})
            return {"conn_id": conn_id, **result}

        return _guard(conn_id, work)

    @app.post("/api/connections/{conn_id}/failed/retry", response_model=models.Returned, responses=PROBLEMS)
    def retry(conn_id: str, selection: Selection, user: EditorDep) -> dict[str, Any]:
        return _act("sqlqueue.retry_failed_messages", conn_id, user, selection, retry=True)

    @app.post("/api/connections/{conn_id}/failed/delete", response_model=models.Deleted, responses=PROBLEMS)
    def delete(conn_id: str, selection: Selection, user: DeleterDep) -> dict[str, Any]:
        return _act("sqlqueue.delete_failed_messages", conn_id, user, selection, retry=False)

    app.include_router(archive_router(_guard, PROBLEMS))  # the error archive: plugins/archive_api.py
    app.include_router(redirects_router(_guard, PROBLEMS))  # retry redirects, permissions: plugins/redirects_api.py
    app.include_router(message_router(_guard, _static, _edit_retry_on, PROBLEMS))  # plugins/message_api.py
    app.include_router(groups_router(_guard, PROBLEMS))  # group cards and actions: plugins/groups_api.py
    return app
