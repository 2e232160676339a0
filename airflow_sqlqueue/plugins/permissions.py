"""Who may do what on the "SQL Queues" page: one permission per action, each asked of Airflow's auth manager.

Each action and the auth-manager checks it needs (all of them):

- ``view`` (the page, listings, groups, history, runs, archives, redirects): custom view ``SQL Queues`` ``GET``.
- ``retry`` (selected or batched, cancel a batched retry): view; custom view ``SQL Queues`` ``POST``; connection
  ``PUT``. A batched retry also creates a run of its DAG: DAG ``sqlqueue_error_queue_batch_retry``, runs, ``POST``.
- ``delete``: view; custom view ``SQL Queues`` ``DELETE``; connection ``DELETE``.
- ``archive`` (archive and restore): view; custom view ``SQL Queues Archive`` ``POST``; connection ``PUT``.
- ``edit_retry``: view; custom view ``SQL Queues Edit and Retry`` ``POST``; connection ``PUT`` (and
  ``[sqlqueue] dashboard_edit_retry = True``).
- ``redirects`` (create and remove retry redirects): view; custom view ``SQL Queues Redirects`` ``PUT``;
  connection ``PUT``.

A custom view check is what an auth manager offers plugins (FAB: the permission "<method's action> on <resource>",
e.g. ``can_create`` on ``SQL Queues Archive``, granted per role). The connection check names the connection whose
database the action changes; it is what tells readers from operators under the Simple auth manager, which answers
custom-view checks alike for every role from viewer up. Every route of the page's API declares its action with a
:class:`Requirement` dependency (tests/test_dashboard_permissions.py fails for a route without one).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import HTTPException, Request, status

RESOURCE_NAME = "SQL Queues"
#: The DAG a batched retry creates a run of (``airflow_sqlqueue.maintenance.retry_batches.DAG_ID``).
BATCH_RETRY_DAG = "sqlqueue_error_queue_batch_retry"


class Action(str, Enum):
    """An action of the page, each its own permission."""

    VIEW = "view"
    RETRY = "retry"
    DELETE = "delete"
    ARCHIVE = "archive"
    EDIT_RETRY = "edit_retry"
    REDIRECTS = "redirects"


@dataclass(frozen=True)
class Rule:
    """The auth-manager checks of one action: a custom view (resource and method) and, for actions that change a
    queue database, a method on the connection."""

    resource: str
    method: str
    connection_method: str | None
    what: str


RULES: dict[Action, Rule] = {
    Action.VIEW: Rule(RESOURCE_NAME, "GET", None, "viewing SQL queues"),
    Action.RETRY: Rule(RESOURCE_NAME, "POST", "PUT", "retrying failed messages"),
    Action.DELETE: Rule(RESOURCE_NAME, "DELETE", "DELETE", "deleting failed messages"),
    Action.ARCHIVE: Rule(f"{RESOURCE_NAME} Archive", "POST", "PUT", "archiving and restoring failed messages"),
    Action.EDIT_RETRY: Rule(f"{RESOURCE_NAME} Edit and Retry", "POST", "PUT", "edit and retry"),
    Action.REDIRECTS: Rule(f"{RESOURCE_NAME} Redirects", "PUT", "PUT", "managing retry redirects"),
}


#: The FAB auth manager's action for each method (``get_fab_action_from_method_map`` of
#: apache-airflow-providers-fab; tests/test_dashboard_permissions_fab.py checks it against the installed one).
FAB_ACTIONS = {"GET": "can_read", "POST": "can_create", "PUT": "can_edit", "DELETE": "can_delete"}
#: FAB's resource for every connection check (FAB does not tell connections apart).
FAB_CONNECTIONS = "Connections"
#: What FAB asks for a batched retry (``is_authorized_dag(POST, RUN, that DAG)``): create runs **and** edit the DAG,
#: either for every DAG or for this one (``DAG Run:<dag_id>``, ``DAG:<dag_id>``); each pair is enough.
FAB_BATCH_RETRY = ((("can_create", "DAG Runs"), ("can_edit", "DAGs")),
                   (("can_create", f"DAG Run:{BATCH_RETRY_DAG}"), ("can_edit", f"DAG:{BATCH_RETRY_DAG}")))


def fab_permissions(action: Action) -> list[tuple[str, str]]:
    """The FAB permissions (action name, resource name) a role needs for ``action``, view included (a batched
    retry also needs one pair of :data:`FAB_BATCH_RETRY`)."""
    needed = {(FAB_ACTIONS[rule.method], rule.resource) for rule in (RULES[Action.VIEW], RULES[action])}
    if RULES[action].connection_method is not None:
        needed.add((FAB_ACTIONS[RULES[action].connection_method], FAB_CONNECTIONS))
    return sorted(needed)


def create_fab_permissions(security_manager: Any) -> list[tuple[str, str]]:
    """Create the page's custom-view permissions in FAB's tables (FAB makes no resource for a plugin's view, so
    they cannot be granted, nor does Admin get them, until they exist); return them. Idempotent.

    ``security_manager`` is FAB's (``appbuilder.sm``); see docs/dashboard.md, "Who may do what"."""
    made = sorted({(FAB_ACTIONS[rule.method], rule.resource) for rule in RULES.values()})
    for action_name, resource_name in made:
        security_manager.create_permission(action_name, resource_name)
    return made


def may(user: BaseUser, action: Action, conn_id: str | None = None) -> bool:
    """Whether ``user`` may take ``action`` (on the database of ``conn_id``, for actions that change one)."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import ConnectionDetails

    manager = get_auth_manager()
    for rule in {RULES[Action.VIEW], RULES[action]}:
        if not manager.is_authorized_custom_view(method=rule.method, resource_name=rule.resource, user=user):
            return False
    rule = RULES[action]
    if rule.connection_method is not None:
        if conn_id is None:
            return False
        return bool(manager.is_authorized_connection(method=rule.connection_method,
                                                     details=ConnectionDetails(conn_id=conn_id), user=user))
    return True


def may_trigger_batch_retry(user: BaseUser) -> bool:
    """Whether ``user`` may create a run of the batched-retry DAG."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails

    return bool(get_auth_manager().is_authorized_dag(method="POST", access_entity=DagAccessEntity.RUN,
                                                     details=DagDetails(id=BATCH_RETRY_DAG), user=user))


def allowed_actions(user: BaseUser, conn_id: str) -> dict[str, bool]:
    """Every action and whether ``user`` may take it on ``conn_id`` (what the page shows buttons for)."""
    return {action.value: may(user, action, conn_id) for action in Action}


class Requirement:
    """A route's dependency: a logged-in user (else 401) with the permission of ``action`` on the route's
    ``{conn_id}`` (else 403 naming what is missing); a request that changes something sends a JSON body (415).

    :param batch_retry: the route creates a run of the batched-retry DAG (that DAG's run permission too).
    """

    def __init__(self, action: Action, *, batch_retry: bool = False) -> None:
        self.action = action
        self.batch_retry = batch_retry

    def __repr__(self) -> str:
        return f"Requirement({self.action.value!r}{', batch_retry=True' if self.batch_retry else ''})"

    def __call__(self, request: Request, user: GetUserDep) -> BaseUser:
        conn_id: Any = request.path_params.get("conn_id")
        rule = RULES[self.action]
        if not may(user, self.action, conn_id):
            where = f" and to connection {conn_id!r}" if rule.connection_method and conn_id else ""
            raise HTTPException(status.HTTP_403_FORBIDDEN, f"Forbidden: {rule.what} needs the {self.action.value!r} "
                                f"permission ({rule.method} on the {rule.resource!r} view{where})")
        if self.batch_retry and not may_trigger_batch_retry(user):
            raise HTTPException(status.HTTP_403_FORBIDDEN, f"Forbidden: a batched retry creates a run of the DAG "
                                f"{BATCH_RETRY_DAG!r}: that needs permission to trigger it")
        if self.action is not Action.VIEW and request.method not in ("GET", "HEAD") and \
                "application/json" not in request.headers.get("content-type", ""):
            raise HTTPException(status.HTTP_415_UNSUPPORTED_MEDIA_TYPE, "send a JSON body (application/json)")
        return user
