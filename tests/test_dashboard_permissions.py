"""Every route of the "SQL Queues" page declares the permission of its action, and the real API server enforces it:
401 without a login, 403 for a user who lacks exactly that route's permission (and only then), and the default
roles of the Simple auth manager get what docs/dashboard.md says.

Routes are enumerated from the page's app, so a route added without a permission fails here."""

from __future__ import annotations  # noqa: I001  (tests.airflow_env must be imported before airflow)

import tests.airflow_env  # noqa: F401
from tests.airflow_env import airflow_db  # noqa: F401  (fixture)

from collections.abc import Iterator
from typing import Any

import pytest

from airflow_sqlqueue.plugins.permissions import RULES, Action, Requirement
from tests.test_dashboard_api import CONN_ID, PREFIX, app, as_user, client, variable  # noqa: F401  (fixtures)

SAMPLE_PARAMS = {"conn_id": CONN_ID, "name": "dashboard.js", "archive_id": "a1"}


def requirement_of(dependant: Any) -> Requirement | None:
    """The Requirement a route's dependencies hold (searched through sub-dependencies), or None."""
    for dep in dependant.dependencies:
        if isinstance(dep.call, Requirement):
            return dep.call
        found = requirement_of(dep)
        if found is not None:
            return found
    return None


def page_routes() -> list[tuple[str, str, Requirement | None]]:
    """(method, path, requirement) of every route of the page's app."""
    from fastapi.routing import APIRoute

    from airflow_sqlqueue.plugins.api import create_app

    out = []
    for route in create_app().routes:
        if isinstance(route, APIRoute):
            for method in sorted(route.methods):
                out.append((method, route.path, requirement_of(route.dependant)))
    return out


ROUTES = page_routes()


def call(client: Any, method: str, path: str, headers: dict[str, str] | None = None) -> Any:  # noqa: F811
    url = PREFIX + path.format(**SAMPLE_PARAMS)
    if method == "GET":
        return client.get(url, headers=headers or {}, follow_redirects=False)
    return client.request(method, url, json={}, headers=headers or {}, follow_redirects=False)


def test_every_route_declares_a_permission_and_the_served_openapi_lists_no_other() -> None:
    missing = [(m, p) for m, p, r in ROUTES if r is None]
    assert missing == [], f"routes without a permission (add a Requirement dependency): {missing}"
    assert len(ROUTES) >= 20
    writes = {(m, p): r.action for m, p, r in ROUTES if m != "GET"}
    assert all(action is not Action.VIEW for action in writes.values()), writes  # no write needs only view
    assert {r.action for _, _, r in ROUTES} == set(Action)  # every action has a route


def test_the_served_openapi_document_has_no_route_the_enumeration_misses(client: Any) -> None:  # noqa: F811
    document = client.get(f"{PREFIX}/api/openapi.json", headers=as_user("admin")).json()
    served = {(m.upper(), p) for p, ops in document["paths"].items() for m in ops}
    assert served <= {(m, p) for m, p, _ in ROUTES}


@pytest.mark.parametrize("method, path", [(m, p) for m, p, _ in ROUTES])
def test_anonymous_gets_401_on_every_route(client: Any, method: str, path: str) -> None:  # noqa: F811
    response = call(client, method, path)
    assert response.status_code == 401, response.text


class Policy:
    """What the patched auth manager denies: custom views (resource, method), connection methods, the DAG run."""

    def __init__(self) -> None:
        self.views: set[tuple[str, str]] = set()
        self.connection: set[str] = set()
        self.dag_run = False


@pytest.fixture
def policy(app: Any, monkeypatch: pytest.MonkeyPatch, airflow_db: None) -> Iterator[Policy]:  # noqa: F811
    """The API server's auth manager answering as ``Policy`` says (everything else allowed); edit and retry on."""
    from airflow.api_fastapi.app import get_auth_manager

    rules = Policy()
    manager = get_auth_manager()
    monkeypatch.setattr(manager, "is_authorized_custom_view", lambda *, method, resource_name, user:
                        (resource_name, method) not in rules.views, raising=False)
    monkeypatch.setattr(manager, "is_authorized_connection", lambda *, method, user, details=None:
                        method not in rules.connection, raising=False)
    monkeypatch.setattr(manager, "is_authorized_dag", lambda *, method, user, access_entity=None, details=None:
                        not (rules.dag_run and method == "POST"), raising=False)
    monkeypatch.setenv("AIRFLOW__SQLQUEUE__DASHBOARD_EDIT_RETRY", "True")
    yield rules


@pytest.mark.parametrize("method, path, requirement", ROUTES)
def test_a_user_lacking_the_routes_permission_gets_403_and_only_then(
        client: Any, policy: Policy, method: str, path: str, requirement: Requirement) -> None:  # noqa: F811
    rule = RULES[requirement.action]
    policy.views = {(rule.resource, rule.method)}
    denied = call(client, method, path, as_user("admin"))
    assert denied.status_code == 403 and "Forbidden" in denied.json()["detail"], denied.text
    if rule.connection_method:
        policy.views, policy.connection = set(), {rule.connection_method}
        assert call(client, method, path, as_user("admin")).status_code == 403
        policy.connection = set()
    if requirement.batch_retry:
        policy.dag_run = True
        assert call(client, method, path, as_user("admin")).status_code == 403
        policy.dag_run = False
    # lacking every OTHER action's own permission does not stop this route
    policy.views = {(RULES[a].resource, RULES[a].method) for a in Action if a not in (Action.VIEW, requirement.action)}
    allowed = call(client, method, path, as_user("admin"))
    assert allowed.status_code != 403, allowed.text


@pytest.mark.parametrize("role, expected", [
    ("viewer", {Action.VIEW}), ("user", {Action.VIEW}), ("op", set(Action)), ("admin", set(Action))])
def test_the_simple_auth_managers_default_roles_get_what_the_docs_say(
        client: Any, airflow_db: None, monkeypatch: pytest.MonkeyPatch, role: str,  # noqa: F811
        expected: set[Action]) -> None:
    monkeypatch.setenv("AIRFLOW__SQLQUEUE__DASHBOARD_EDIT_RETRY", "True")
    for method, path, requirement in ROUTES:
        status = call(client, method, path, as_user(role)).status_code
        assert (status != 403) == (requirement.action in expected), (role, method, path, status)


@pytest.mark.parametrize("action", [a for a in Action if a is not Action.VIEW], ids=lambda a: a.value)
def test_the_permissions_route_tells_the_page_each_action_on_its_own(
        client: Any, policy: Policy, variable: Any, action: Action) -> None:  # noqa: F811
    """What the page shows buttons by: lacking one action's permission turns off that action alone."""
    variable({"connections": {CONN_ID: {}}})
    rule = RULES[action]
    url = f"{PREFIX}/api/connections/{CONN_ID}/permissions"
    for lacking in ({"views": {(rule.resource, rule.method)}}, {"connection": {rule.connection_method}}):
        policy.views, policy.connection = lacking.get("views", set()), lacking.get("connection", set())
        got = client.get(url, headers=as_user("admin"))
        assert got.status_code == 200, got.text
        expected = {a.value: a is not action for a in Action}
        if "connection" in lacking:  # the connection method is shared: every action asking for it is off
            expected = {a.value: RULES[a].connection_method != rule.connection_method for a in Action}
        assert got.json()["actions"] == expected, lacking


def test_a_user_who_may_retry_but_not_delete_is_told_so_and_refused_only_delete(
        client: Any, policy: Policy, variable: Any) -> None:  # noqa: F811
    """The defect of issue 31's page: delete buttons shown by the retry permission. Without DELETE on the
    connection the page is told ``delete: false`` (no button), and the delete route answers 403, retry not."""
    variable({"connections": {CONN_ID: {}}})
    policy.connection = {"DELETE"}
    actions = client.get(f"{PREFIX}/api/connections/{CONN_ID}/permissions", headers=as_user("admin")).json()["actions"]
    assert actions["retry"] is True and actions["delete"] is False
    base = f"{PREFIX}/api/connections/{CONN_ID}/failed"
    body = {"messages": [{"seq": 1, "id": "00000000-0000-0000-0000-000000000000"}]}
    assert client.post(f"{base}/delete", json=body, headers=as_user("admin")).status_code == 403
    assert client.post(f"{base}/retry", json=body, headers=as_user("admin")).status_code != 403
