"""The "SQL Queues" Airflow plugin: a page in the Airflow UI's navigation, backed by a FastAPI app.

Registered by the ``airflow.plugins`` entry point, so installing the provider is enough. The FastAPI app is
mounted by the API server under ``/sqlqueue``; the UI shows it in an iframe at ``/plugin/sql-queues`` (Airflow 3
``external_views``). The view's ``href`` and icons are relative, so the browser resolves them against the UI's
base URL: the page works when the API server is served under a path prefix (``[api] base_url`` with a path).
The nav label is short ("Queues"): Airflow's narrow nav cut "SQL Queues" to "SQL Que...". The app is built on its
first request, so the other Airflow components that load plugins (scheduler, workers) never import the API
server's modules for it.
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

URL_PREFIX = "/sqlqueue"
NAV_LABEL = "Queues"


class LazyApp:
    """An ASGI app that builds the dashboard's FastAPI app on its first request."""

    def __init__(self) -> None:
        self._app: Any = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if self._app is None:
            from airflow_sqlqueue.plugins.api import create_app

            self._app = create_app()
        await self._app(scope, receive, send)


class SqlQueueDashboardPlugin(AirflowPlugin):
    """Adds "SQL Queues" (depth, critical time, throughput, net flow, history, error-queue browser with batched
    retries and edit and retry) to the Airflow UI."""

    name = "sqlqueue_dashboard"
    fastapi_apps = [{"app": LazyApp(), "url_prefix": URL_PREFIX, "name": "SQL Queues"}]
    external_views = [{"name": NAV_LABEL, "href": f"{URL_PREFIX[1:]}/", "destination": "nav",
                       "url_route": "sql-queues", "icon": f"{URL_PREFIX[1:]}/assets/icon.svg",
                       "icon_dark_mode": f"{URL_PREFIX[1:]}/assets/icon-dark.svg"}]
