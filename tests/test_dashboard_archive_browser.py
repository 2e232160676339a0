"""The error archive on the "SQL Queues" page in headless Chromium (the real API server under a path prefix, as in
tests/test_dashboard_browser.py): archive now, the list, browsing an archive with the keyboard, hostile content
shown as text, restore of a selection, audit rows. Screenshots: docs/dashboard-archive-{light,dark}.png with
``SQLQUEUE_DASHBOARD_SCREENSHOTS=docs``."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from airflow_sqlqueue.transport import OutgoingMessage, SqlQueueTransport
from airflow_sqlqueue.transport.wire import headers as h
from tests.test_dashboard_browser import (  # noqa: F401  (fixtures)
    CHROMIUM,
    Browser,
    api_server,
    browser,
    frame,
    open_page,
    press,
    shoot,
    wait_for,
)

pytestmark = [pytest.mark.browser, pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")]
HOSTILE = "<img src=x onerror=\"document.title='pwned'\">\u202eEvil"
ROWS = "doc.querySelectorAll('#archive-messages tr.archived')"


@pytest.fixture(scope="module")
def archive_setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A SQLite error queue of 8 old failures (one with hostile headers and body) and 2 fresh ones, and the API
    server with an archive location in the deployment's configuration."""
    root = tmp_path_factory.mktemp("archive-page")
    path = root / "queues.db"
    old = h.format_wire_time(datetime.now(timezone.utc) - timedelta(days=45))
    with SqlQueueTransport.from_url(f"sqlite:///{path}", error_queue="error") as transport:
        transport.create_queues(["orders", "error"])
        ids = transport.send_many("error", [OutgoingMessage(body=f'{{"order": {i}}}', headers={
            h.FAILED_Q: "orders", h.EXCEPTION_TYPE: "System.TimeoutException", h.TIME_OF_FAILURE: old,
            h.ENCLOSED_MESSAGE_TYPES: "Sales.OrderPlaced"}) for i in range(7)])
        ids += transport.send_many("error", [OutgoingMessage(body=HOSTILE.encode(), headers={
            h.FAILED_Q: "orders", h.EXCEPTION_TYPE: HOSTILE, h.TIME_OF_FAILURE: old})])
        fresh = transport.send_many("error", [OutgoingMessage(body=b"new", headers={
            h.FAILED_Q: "orders", h.EXCEPTION_TYPE: "System.TimeoutException",
            h.TIME_OF_FAILURE: h.format_wire_time()}) for _ in range(2)])
    home = root / "airflow-home"
    home.mkdir()
    config = {"connections": {"sqlqueue_default": {}},
              "archive": {"location": str(root / "archive"), "older_than_days": 30}}
    for base in api_server(home, path, config):
        yield {"base": base, "path": path, "home": home, "old": [str(i) for i in ids], "fresh": [str(i) for i in fresh]}


def error_ids(path: Path) -> list[str]:
    with SqlQueueTransport.from_url(f"sqlite:///{path}") as transport:
        return sorted(str(m.id) for m in transport.browse("error", limit=100))


def audit_events(home: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(home / "airflow.db") as conn:
        return conn.execute("SELECT event, owner, extra FROM log WHERE event LIKE 'sqlqueue.%archive%' "
                            "ORDER BY id").fetchall()


def test_archive_browse_and_restore_in_both_themes(archive_setup: dict[str, Any], browser: Browser) -> None:  # noqa: F811
    base, path = archive_setup["base"], archive_setup["path"]
    for theme in ("light", "dark"):
        open_page(browser, base, theme)
        wait_for("the archive section", lambda: browser.js(frame(
            "doc.getElementById('archive-days').value === '30' && !doc.getElementById('archive-now').disabled")),
            timeout=30)
        if theme == "light":  # archive now: the 8 old failures; the 2 fresh ones stay
            assert re.match(r"^no archives of error yet", browser.js(frame(
                "doc.getElementById('archive-list-caption').textContent")))
            browser.js(frame("doc.defaultView.confirm = () => true"))
            browser.js(frame("doc.getElementById('archive-now').click()"))
            wait_for("the new archive in the list", lambda: browser.js(frame(
                "doc.querySelectorAll('#archive-list tbody tr').length")) == 1, timeout=60)
            assert error_ids(path) == sorted(archive_setup["fresh"])
            assert "archived 8 message(s)" in browser.js(frame("doc.getElementById('archive-status').textContent"))
        # the keyboard opens the archive; its title takes the focus
        browser.js(frame("doc.querySelector('#archive-list tbody button').focus()"))
        press(browser, "Enter", "Enter", 13, "\r")
        wait_for("the archived messages", lambda: browser.js(frame(f"{ROWS}.length")) == 8, timeout=30)
        assert browser.js(frame("doc.activeElement.id")) == "archive-view-title"
        assert browser.js(frame("doc.documentElement.dataset.theme")) == theme
        # hostile content is text: no element made from it, the title untouched
        assert browser.js(frame("doc.querySelectorAll('#archive-messages img').length")) == 0
        cells = browser.js(frame(f"[...{ROWS}].map(r => r.children[4].textContent)"))
        assert HOSTILE in cells and browser.js("document.title") != "pwned"
        times = browser.js(frame(f"[...{ROWS}].map(r => r.children[2].textContent)"))
        assert all(re.match(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC$", t) for t in times), times
        restore = "doc.getElementById('archive-restore-selected')"
        assert browser.js(frame(f"[{restore}.disabled, getComputedStyle({restore}).cursor]")) == [True, "not-allowed"]
        browser.js(frame(f"[...{ROWS}].forEach(r => r.querySelector('details').open = true)"))
        shoot(browser, f"dashboard-archive-{theme}.png")

    # restore a selection: those two back in the error queue, once; the rows say so
    chosen = archive_setup["old"][:2]
    for message_id in chosen:
        browser.js(frame(f"doc.querySelector('#archive-messages tr[data-id=\"{message_id}\"] input').click()"))
    browser.js(frame("doc.getElementById('archive-restore-selected').click()"))
    wait_for("the restore", lambda: "restored 2 message(s)" in browser.js(frame(
        "doc.getElementById('archive-result').textContent")), timeout=30)
    wait_for("the restored rows", lambda: browser.js(frame(
        f"[...{ROWS}].filter(r => r.children[5].textContent === 'restored').length")) == 2, timeout=30)
    assert error_ids(path) == sorted(archive_setup["fresh"] + chosen)
    events = audit_events(archive_setup["home"])
    assert [(e[0], e[1]) for e in events] == [("sqlqueue.archive_failed_messages", "admin"),
                                              ("sqlqueue.restore_archived_messages", "admin")]
    assert all(i in json.loads(events[1][2])["ids"] for i in chosen)
