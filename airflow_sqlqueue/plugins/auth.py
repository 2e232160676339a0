"""Who may do what on the "SQL Queues" page, asked of Airflow's auth manager on every API call.

- read (page, listings, history): ``is_authorized_custom_view(method="GET", resource_name="SQL Queues")``,
  the auth-manager check meant for plugin views (Simple auth manager: every role from viewer up).
- retry and delete: the custom view with ``POST`` **and** ``is_authorized_connection(method="PUT")`` on the
  connection whose database is changed (Simple auth manager: op and admin). The connection check is what tells
  readers from editors under the Simple auth manager, which answers custom-view checks the same for every method.
- a batched retry on a paused DAG unpauses it when the user may change that DAG (``is_authorized_dag`` with
  ``PUT``); otherwise the run waits and the page says why.

The user comes from Airflow's own ``get_user`` dependency: the ``Authorization: Bearer`` JWT, or the ``_token``
cookie the Airflow UI sets (the page in the UI's iframe sends it with each same-origin request).
"""

from __future__ import annotations

from typing import Annotated

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.auth.managers.models.resource_details import ConnectionDetails, DagDetails
from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import Depends, HTTPException, Request, status

RESOURCE_NAME = "SQL Queues"


def can_read(user: BaseUser) -> bool:
    """Whether the user may see the page and its data."""
    return get_auth_manager().is_authorized_custom_view(method="GET", resource_name=RESOURCE_NAME, user=user)


def can_edit(user: BaseUser, conn_id: str) -> bool:
    """Whether the user may retry or delete failed messages in the database of ``conn_id``."""
    manager = get_auth_manager()
    return (manager.is_authorized_custom_view(method="POST", resource_name=RESOURCE_NAME, user=user)
            and manager.is_authorized_connection(method="PUT", details=ConnectionDetails(conn_id=conn_id),
                                                 user=user))


def can_change_dag(user: BaseUser, dag_id: str) -> bool:
    """Whether the user may change (pause, unpause) the DAG ``dag_id``."""
    return get_auth_manager().is_authorized_dag(method="PUT", details=DagDetails(id=dag_id), user=user)


def requires_read(user: GetUserDep) -> BaseUser:
    """Dependency: a logged-in user with read access, else 401/403."""
    if not can_read(user):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "Forbidden: viewing SQL queues needs read access to "
                                                       f"the {RESOURCE_NAME!r} view")
    return user


def requires_edit(conn_id: str, request: Request, user: GetUserDep) -> BaseUser:
    """Dependency: a logged-in user who may change the queues of ``conn_id``; JSON bodies only (no form posts)."""
    if not can_read(user) or not can_edit(user, conn_id):
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"Forbidden: retrying or deleting messages needs edit "
                                                       f"access to the {RESOURCE_NAME!r} view and to connection "
                                                       f"{conn_id!r}")
    if "application/json" not in request.headers.get("content-type", ""):
        raise HTTPException(status.HTTP_415_UNSUPPORTED_MEDIA_TYPE, "send a JSON body (application/json)")
    return user


ReaderDep = Annotated[BaseUser, Depends(requires_read)]
EditorDep = Annotated[BaseUser, Depends(requires_edit)]
