"""The "SQL Queues" page shows each action only to a user with that action's permission (issue 31: the delete
buttons followed the retry permission, and a click answered 403). Headless Chromium on the real API server, as in
tests/test_dashboard_browser.py, with an auth manager where ``retrier`` may retry but not delete
(tests/retry_only_auth_manager.py), ``reader`` only view, and ``admin`` everything."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_sqlqueue.transport import SqlQueueTransport
from tests import test_dashboard_api as api_tests
from tests.test_dashboard_browser import (  # noqa: F401  (fixtures)
    CHROMIUM,
    Browser,
    api_server,
    browser,
    frame,
    open_page,
    wait_for,
)

pytestmark = [pytest.mark.browser, pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")]
ROOT = Path(__file__).resolve().parent.parent
#: Each button of the error browser and the action it stands for.
BUTTONS = {"retry": "retry", "delete": "delete", "batch-start": "retry"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("actions-page")
    path = root / "queues.db"
    with SqlQueueTransport.from_url(f"sqlite:///{path}", error_queue="error") as transport:
        api_tests.fill_queues(transport, lambda name: name)
    home = root / "airflow-home"
    home.mkdir()
    env = {"AIRFLOW__CORE__AUTH_MANAGER": "tests.retry_only_auth_manager.RetryOnlyAuthManager",
           "PYTHONPATH": f"{ROOT}:{ROOT / 'airflow_sqlqueue'}"}
    yield from api_server(home, path, {"connections": {"sqlqueue_default": {}}}, extra_env=env,
                          users={"retrier": "op", "reader": "viewer"})


def buttons_shown(browser: Browser, server: str, username: str) -> dict[str, Any]:  # noqa: F811
    """Log in as ``username``, open the error browser; which buttons show, and what the server says."""
    open_page(browser, server, "light", username)
    browser.js(frame("doc.querySelector('button.browse-errors').click()"))
    wait_for("the failed messages", lambda: browser.js(frame("doc.querySelectorAll('tr.message').length")) == 3,
             timeout=60)
    wait_for("the user's actions", lambda: browser.js(frame(
        "Object.keys(doc.defaultView.eval('state.allowed')).length > 0")), timeout=30)
    shown = browser.js(frame("Object.fromEntries(['retry', 'delete', 'batch-start'].map(id => "
                             "[id, !doc.getElementById(id).hidden]))"))
    wait_for("the group cards", lambda: browser.js(frame("doc.querySelectorAll('article.group-card').length")) > 0,
             timeout=30)
    for kind in ("retry", "batch", "archive", "delete"):  # each group action shows by its own permission too
        shown[f"group-{kind}"] = browser.js(frame(
            f"!doc.querySelector('article.group-card button.group-{kind}').hidden"))
    browser.js(frame("doc.querySelector('tr.message details').open = true"))
    wait_for("the details row", lambda: browser.js(frame(
        "doc.querySelectorAll('tr.message-detail:not([hidden])').length")) > 0, timeout=30)
    shown["edit-retry"] = browser.js(frame("doc.querySelectorAll('tr.message-detail button.edit-retry').length > 0"))
    # what the server answers the page's own delete request (nothing is deleted: no such message)
    browser.js(frame("""(doc.defaultView.sqDelete = doc.defaultView.fetch(
        'api/connections/sqlqueue_default/failed/delete', { method: 'POST',
        headers: {'Content-Type': 'application/json'},
        body: JSON.stringify({messages: [{seq: 999999, id: '00000000-0000-0000-0000-000000000000'}]})})
        .then(r => doc.defaultView.sqDeleteStatus = r.status), true)"""))
    shown["delete_status"] = wait_for("the delete answer", lambda: browser.js(frame(
        "doc.defaultView.sqDeleteStatus")), timeout=30)
    return shown


@pytest.mark.parametrize("username, expected", [
    ("admin", {"retry": True, "delete": True, "batch-start": True, "edit-retry": True, "delete_status": 404,
      "group-retry": True, "group-batch": True, "group-archive": True, "group-delete": True}),
    ("retrier", {"retry": True, "delete": False, "batch-start": True, "edit-retry": True, "delete_status": 403,
      "group-retry": True, "group-batch": True, "group-archive": True, "group-delete": False}),
    ("reader", {"retry": False, "delete": False, "batch-start": False, "edit-retry": False, "delete_status": 403,
      "group-retry": False, "group-batch": False, "group-archive": False, "group-delete": False}),
])
def test_each_button_shows_only_with_its_own_permission(server: str, browser: Browser,  # noqa: F811
                                                        username: str, expected: dict[str, Any]) -> None:
    assert buttons_shown(browser, server, username) == expected
