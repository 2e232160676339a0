"""Who may do what on the "SQL Queues" page, asked of Airflow's auth manager on every API call: the permission of
each action is in :mod:`.permissions` (view, retry, delete, archive and restore, edit and retry, manage redirects).

- a batched retry on a paused DAG unpauses it when the user may change that DAG (``is_authorized_dag`` with
  ``PUT``); otherwise the run waits and the page says why.

The user comes from Airflow's own ``get_user`` dependency: the ``Authorization: Bearer`` JWT, or the ``_token``
cookie the Airflow UI sets (the page in the UI's iframe sends it with each same-origin request).
"""

from __future__ import annotations

from typing import Annotated

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails
from fastapi import Depends

from .permissions import RESOURCE_NAME, Action, Requirement, may

__all__ = ["RESOURCE_NAME", "ArchiverDep", "BatchRetrierDep", "DeleterDep", "EditorDep", "EditRetrierDep", "ReaderDep",
           "RedirectorDep", "can_change_dag", "can_edit", "can_read"]


def can_read(user: BaseUser) -> bool:
    """Whether the user may see the page and its data."""
    return may(user, Action.VIEW)


def can_edit(user: BaseUser, conn_id: str) -> bool:
    """Whether the user may retry failed messages in the database of ``conn_id``."""
    return may(user, Action.RETRY, conn_id)


def can_change_dag(user: BaseUser, dag_id: str) -> bool:
    """Whether the user may change (pause, unpause) the DAG ``dag_id``."""
    return get_auth_manager().is_authorized_dag(method="PUT", details=DagDetails(id=dag_id), user=user)


requires_read = Requirement(Action.VIEW)
requires_edit = Requirement(Action.RETRY)
ReaderDep = Annotated[BaseUser, Depends(requires_read)]
EditorDep = Annotated[BaseUser, Depends(requires_edit)]
#: Route parameters, one per action (the user, once the action's permission was checked).
DeleterDep = Annotated[BaseUser, Depends(Requirement(Action.DELETE))]
ArchiverDep = Annotated[BaseUser, Depends(Requirement(Action.ARCHIVE))]
EditRetrierDep = Annotated[BaseUser, Depends(Requirement(Action.EDIT_RETRY))]
RedirectorDep = Annotated[BaseUser, Depends(Requirement(Action.REDIRECTS))]
BatchRetrierDep = Annotated[BaseUser, Depends(Requirement(Action.RETRY, batch_retry=True))]
