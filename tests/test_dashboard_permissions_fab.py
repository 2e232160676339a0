"""The page's permissions under the real FAB auth manager (apache-airflow-providers-fab; skipped without it): a role
holding exactly the FAB permissions docs/dashboard.md lists for an action may take that action and no other, and
loses it without any one of them; a batched retry needs what FAB's ``is_authorized_dag`` asks for a run of the DAG.

The users are FAB's own ``User``/``Role``/``Permission`` models, unsaved: outside a Flask app FAB reads a user's
permissions from its roles, the same set it reads from its tables inside one.
"""

from __future__ import annotations  # noqa: I001  (tests.airflow_env must be imported before airflow)

import tests.airflow_env  # noqa: F401

import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("airflow.providers.fab.auth_manager.fab_auth_manager",
                    reason="apache-airflow-providers-fab is not installed")

from airflow.providers.fab.auth_manager.fab_auth_manager import FabAuthManager  # noqa: E402
from airflow.providers.fab.auth_manager.models import Action as FabAction  # noqa: E402
from airflow.providers.fab.auth_manager.models import Permission, Resource, Role, User  # noqa: E402
from airflow.providers.fab.www.utils import get_fab_action_from_method_map  # noqa: E402

from airflow_sqlqueue.plugins import permissions  # noqa: E402
from airflow_sqlqueue.plugins.permissions import (  # noqa: E402
    FAB_BATCH_RETRY,
    Action,
    allowed_actions,
    fab_permissions,
    may_trigger_batch_retry,
)

DOCS = Path(__file__).resolve().parent.parent / "docs" / "dashboard.md"
#: The rows of the docs' table "Who may do what", by action.
ROWS = {"view": Action.VIEW, "retry": Action.RETRY, "delete": Action.DELETE, "archive and restore": Action.ARCHIVE,
        "edit and retry": Action.EDIT_RETRY, "manage redirects": Action.REDIRECTS}


def user_with(perms: list[tuple[str, str]] | tuple[tuple[str, str], ...]) -> Any:
    role = Role(name="tested")
    role.permissions = []
    for action_name, resource_name in perms:
        permission = Permission()
        permission.action, permission.resource = FabAction(name=action_name), Resource(name=resource_name)
        role.permissions.append(permission)
    user = User(username="tested", first_name="t", last_name="t")
    user.roles = [role]
    return user


@pytest.fixture
def fab(monkeypatch: pytest.MonkeyPatch) -> FabAuthManager:
    import airflow.api_fastapi.app as app_module

    manager = FabAuthManager()
    monkeypatch.setattr(app_module, "get_auth_manager", lambda: manager)
    return manager


def test_the_method_map_is_fabs() -> None:
    assert {m: get_fab_action_from_method_map()[m] for m in permissions.FAB_ACTIONS} == permissions.FAB_ACTIONS


@pytest.mark.parametrize("action", list(Action), ids=lambda a: a.value)
def test_a_role_with_the_documented_permissions_may_take_exactly_that_action(fab: FabAuthManager,
                                                                             action: Action) -> None:
    granted = fab_permissions(action)
    expected = {a.value: a in (Action.VIEW, action) for a in Action}
    assert allowed_actions(user_with(granted), "any_connection") == expected
    for missing in granted:  # each one is needed
        assert allowed_actions(user_with([p for p in granted if p != missing]), "any_connection")[action.value] \
            is False, missing


def test_a_batched_retry_needs_to_create_runs_and_edit_the_dag(fab: FabAuthManager) -> None:
    retry = fab_permissions(Action.RETRY)
    for pair in FAB_BATCH_RETRY:
        assert may_trigger_batch_retry(user_with(pair)) is True
        for one in pair:  # creating runs alone (what the docs said before) is not enough, nor editing alone
            assert may_trigger_batch_retry(user_with([*retry, one])) is False, one
    other = ("can_create", "DAG Run:some_other_dag"), ("can_edit", "DAG:some_other_dag")
    assert may_trigger_batch_retry(user_with(other)) is False


def test_the_docs_table_lists_exactly_these_permissions() -> None:
    text = DOCS.read_text(encoding="utf-8")
    table = text.split("## Who may do what", 1)[1].split("\n\n", 2)[2]
    seen = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        name = cells[0].strip("*") if cells else ""
        if name in ROWS:
            listed = re.findall(r"`(can_\w+)` on `([^`]+)`", cells[-1])
            seen[ROWS[name]] = listed
    assert set(seen) == set(Action)
    for action, listed in seen.items():
        base = [p for p in listed if p not in [q for pair in FAB_BATCH_RETRY for q in pair]]
        assert sorted(base) == fab_permissions(action), action
        if action is Action.RETRY:
            assert [q for q in listed if q not in base] == [q for pair in FAB_BATCH_RETRY for q in pair]
