"""The "SQL Queues" page in a real browser: the Airflow API server on a temp ``AIRFLOW_HOME``, served under a
base URL with a path prefix (``/airflow``), and headless Chromium driven through the Chrome DevTools Protocol (the
``websockets`` package Airflow's uvicorn already installs).

The tests log in (Simple auth manager, a real JWT in the ``_token`` cookie as after the login form), open the
Airflow UI at ``/airflow/plugin/sql-queues`` (the page in the UI's iframe) in the light and the dark theme, and
check each view and action as a user sees it: where a panel opens, which theme and contrast, one time format,
stack traces on several lines, a disabled button that looks disabled, the keyboard, the nav label; then return
and delete failed messages. Set ``SQLQUEUE_DASHBOARD_SCREENSHOTS=docs`` to save the screenshots there.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import datetime, timedelta, timezone
from itertools import count
from pathlib import Path
from typing import Any

import pytest

from airflow_sqlqueue.maintenance.health import record_samples
from airflow_sqlqueue.transport import SqlQueueTransport
from tests import test_dashboard_api as api_tests

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
BIN = Path(sys.executable).parent
PASSWORD = "dashboard-browser-test"
BASE_PATH = "/airflow"  # the API server behind a path prefix, as behind a reverse proxy
SHOTS = os.environ.get("SQLQUEUE_DASHBOARD_SCREENSHOTS")

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed "
                                "(scripts/install-system-packages.sh installs it: apt-get install chromium)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what: str, check: Callable[[], Any], timeout: float, interval: float = 0.25) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except Exception as exc:  # noqa: BLE001 - not ready yet
            last = exc
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")


def stop(process: subprocess.Popen | None) -> None:
    """End a process started in its own session, with everything it started."""
    if process is None or process.poll() is not None:
        return
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(grace)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="module")
def queues_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Any]]]:
    """A SQLite queue database filled as in the API tests, with depth samples of ``orders`` for the plot."""
    path = tmp_path_factory.mktemp("queues") / "queues.db"
    transport = SqlQueueTransport.from_url(f"sqlite:///{path}", error_queue="error")
    try:
        made = api_tests.fill_queues(transport, lambda name: name)
        now = datetime.now(timezone.utc)
        for minutes, depth in ((60, 0), (50, 2), (40, 5), (30, 4), (20, 6), (10, 3)):
            record_samples(transport, [{"conn_id": "sqlqueue_default", "queue": "orders", "depth": depth,
                                        "oldest_age_seconds": 30.0}], "sqlqueue_health_samples",
                           now=now - timedelta(minutes=minutes))
        for minutes, depth in ((20, 0), (10, 1)):  # the error queue grew since: 1 then, 3 now
            record_samples(transport, [{"conn_id": "sqlqueue_default", "queue": "error", "depth": depth,
                                        "oldest_age_seconds": 30.0}], "sqlqueue_health_samples",
                           now=now - timedelta(minutes=minutes))
        yield path, made
    finally:
        transport.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, queues_file: tuple[Path, dict[str, Any]]) -> Iterator[str]:
    """``airflow api-server`` on a free port and a fresh ``AIRFLOW_HOME``; its base URL."""
    home = tmp_path_factory.mktemp("airflow-home")
    yield from api_server(home, queues_file[0], {"connections": {"sqlqueue_default": {"thresholds": {"max_depth": 2}}}})


def api_server(home: Path, queues_path: Path, config: dict[str, Any]) -> Iterator[str]:
    """Run ``airflow api-server`` in ``home`` on the SQLite queue database ``queues_path`` with the maintenance
    configuration ``config``; yield its base URL (the server is stopped afterwards)."""
    port = free_port()
    base = f"http://127.0.0.1:{port}{BASE_PATH}"
    (home / "passwords.json").write_text(json.dumps({"admin": PASSWORD}))
    (home / "sqlqueue.json").write_text(json.dumps(config))
    env = {**os.environ, "AIRFLOW_HOME": str(home), "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
           "AIRFLOW__API__PORT": str(port), "AIRFLOW__API__BASE_URL": base, "AIRFLOW__API__HOST": "127.0.0.1",
           "AIRFLOW__API__WORKERS": "1", "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
           "AIRFLOW__API_AUTH__JWT_SECRET": "sqlqueue-browser-test-" + "y" * 64,
           "AIRFLOW_CONN_SQLQUEUE_DEFAULT": json.dumps({"conn_type": "sqlite", "host": str(queues_path)}),
           "SQLQUEUE_MAINTENANCE_CONFIG": str(home / "sqlqueue.json")}
    for key in ("AIRFLOW__CORE__DAGS_FOLDER_OVERRIDE", "AIRFLOW_CONN_SQLQUEUE_DASH", "PYTHONPATH"):
        env.pop(key, None)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)  # the server runs the code under test
    log = open(home / "api-server.log", "wb")  # noqa: SIM115 - closed below
    subprocess.run([str(BIN / "airflow"), "db", "migrate"], env=env, check=True, stdout=log, stderr=log,
                   timeout=120)
    process = subprocess.Popen([str(BIN / "airflow"), "api-server", "--port", str(port), "--host", "127.0.0.1"],
                               env=env, stdout=log, stderr=log, start_new_session=True, cwd=home)
    try:
        wait_for("the API server to be healthy", lambda: process.poll() is None and urllib.request.urlopen(
            f"{base}/api/v2/monitor/health", timeout=2).status == 200, timeout=180)  # a loaded 2-core machine
        yield base
    except AssertionError:
        log.flush()
        raise AssertionError((home / "api-server.log").read_text(errors="replace")[-3000:]) from None
    finally:
        stop(process)
        log.close()


def login(base: str) -> str:
    """A JWT from Airflow's login endpoint (what the login form gets)."""
    request = urllib.request.Request(f"{base}/auth/token", method="POST", headers={"Content-Type": "application/json"},
                                     data=json.dumps({"username": "admin", "password": PASSWORD}).encode())
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())["access_token"]


class Browser:
    """Headless Chromium and one page, spoken to over the DevTools Protocol."""

    def __init__(self, profile: Path) -> None:
        port = free_port()
        self.process = subprocess.Popen(
            [CHROMIUM, *CHROMIUM_FLAGS, f"--remote-debugging-port={port}", "--remote-debugging-address=127.0.0.1",
             f"--user-data-dir={profile}", "--window-size=1400,1000", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self.ids = count(1)
        self.stack = ExitStack()
        try:
            pages = wait_for("Chromium's DevTools endpoint", lambda: [t for t in json.loads(urllib.request.urlopen(
                f"http://127.0.0.1:{port}/json/list", timeout=2).read()) if t["type"] == "page"], timeout=30)
            from websockets.sync.client import connect

            self.socket = self.stack.enter_context(
                connect(pages[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=10))
        except BaseException:
            stop(self.process)
            raise

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """Call a DevTools method and return its result (events in between are skipped)."""
        message_id = next(self.ids)
        self.socket.send(json.dumps({"id": message_id, "method": method, "params": params}))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            reply = json.loads(self.socket.recv(timeout=30))
            if reply.get("id") == message_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
        raise AssertionError(f"no answer to {method}")

    def js(self, expression: str) -> Any:
        """Evaluate JavaScript in the page and return its value (JSON-able)."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(result["exceptionDetails"].get("exception", {}).get("description", result))
        return result["result"].get("value")

    def close(self) -> None:
        try:
            self.stack.close()
        finally:
            stop(self.process)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    chrome = Browser(tmp_path / "chromium-profile")
    try:
        yield chrome
    finally:
        chrome.close()


# The dashboard's document inside the Airflow UI's iframe (same origin, so the top page can read it).
FRAME = "(document.querySelector('iframe[title=\"Queues\"]')?.contentDocument)"
READ_QUEUES = f"""(() => {{
  const doc = {FRAME};
  if (!doc) return null;
  return [...doc.querySelectorAll('tr[data-queue]')].map(r => ({{
    queue: r.dataset.queue, depth: r.querySelector('td.depth').textContent, breach: r.classList.contains('breach'),
    flow: r.querySelector('td.flow').textContent}}));
}})()"""
#: WCAG contrast ratio of an element's text on the background it sits on, computed in the page.
CONTRAST = """((node) => {
  const rgb = (c) => c.match(/[\\d.]+/g).slice(0, 3).map(Number);
  const lin = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
  const lum = (c) => { const [r, g, b] = rgb(c).map(lin); return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  let back = node, bg = 'rgba(0, 0, 0, 0)';
  while (back && (bg = getComputedStyle(back).backgroundColor) && /rgba\\(.*, 0\\)$/.test(bg)) {
    back = back.parentElement;
  }
  const [a, b] = [lum(getComputedStyle(node).color), lum(bg)].sort((x, y) => y - x);
  return (a + 0.05) / (b + 0.05);
})"""
TIME = r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC$"


def open_page(browser: Browser, server: str, theme: str) -> dict[str, tuple[str, bool, str]]:
    """Log in, open the page in the Airflow UI in ``theme``; the queue table as shown."""
    browser.send("Network.enable")
    browser.send("Network.setCookie", name="_token", value=login(server), url=server, path="/")
    browser.send("Emulation.setDeviceMetricsOverride", width=1400, height=900, deviceScaleFactor=1, mobile=False)
    browser.send("Emulation.setEmulatedMedia", features=[{"name": "prefers-color-scheme", "value": theme}])
    browser.send("Page.navigate", url=f"{server}/plugin/sql-queues")

    def queues_shown() -> dict[str, tuple[str, bool, str]] | None:
        rows = browser.js(READ_QUEUES)
        return {r["queue"]: (r["depth"], r["breach"], r["flow"]) for r in rows} if rows else None

    return wait_for("the queue table in the SQL Queues page", queues_shown, timeout=60)


def frame(expression: str) -> str:
    return f"(() => {{ const doc = {FRAME}; return {expression}; }})()"


def shoot(browser: Browser, name: str) -> None:
    if SHOTS:
        Path(SHOTS, name).write_bytes(base64.b64decode(browser.send("Page.captureScreenshot")["data"]))


def press(browser: Browser, key: str, code: str, key_code: int, text: str = "") -> None:
    """A key pressed and released, as the keyboard sends it to the focused element."""
    browser.send("Input.dispatchKeyEvent", type="keyDown", key=key, code=code, windowsVirtualKeyCode=key_code,
                 text=text)
    browser.send("Input.dispatchKeyEvent", type="keyUp", key=key, code=code, windowsVirtualKeyCode=key_code)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_overview_and_depth_history_in_the_airflow_theme(server: str, browser: Browser, theme: str) -> None:
    shown = open_page(browser, server, theme)
    assert {q: v[:2] for q, v in shown.items()} == {
        "orders": ("3", True), "billing": ("1", False), "invoices": ("0", False), "error": ("3", True)}
    assert shown["error"][2].startswith("+0.") and float(shown["error"][2]) > 0  # 1 ten minutes ago, 3 now: growing
    assert browser.js("document.documentElement.classList.contains('dark')") is (theme == "dark")
    assert browser.js(frame("doc.documentElement.dataset.theme")) == theme  # follows the Airflow UI
    for selector in ("body", ".note", ".grid th", "tr.breach td", "#status", "button.browse-errors"):
        ratio = browser.js(frame(f"{CONTRAST}(doc.querySelector('{selector}'))"))
        assert ratio >= 4.5, (theme, selector, ratio)
    nav = browser.js("""[...document.querySelectorAll('a, button')].filter(e => e.textContent.trim() === 'Queues')
        .map(e => [...e.querySelectorAll('*')].concat([e]).every(n => n.scrollWidth <= n.clientWidth + 1))""")
    assert nav and all(nav), nav  # the nav label is shown whole
    assert re.match(r"^configuration: .*; updated \d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC$",
                    browser.js(frame("doc.getElementById('status').textContent")))

    browser.js(frame("doc.querySelector('tr[data-queue=\"orders\"] td.queue button').click()"))
    wait_for("the plot", lambda: browser.js(frame("!!doc.querySelector('#plot polyline')")), timeout=20)
    top, height, focused = browser.js(frame(
        "[doc.getElementById('panel').getBoundingClientRect().top, doc.defaultView.innerHeight, doc.activeElement.id]"))
    assert 0 <= top < height / 2 and focused == "panel-title"  # opened where the user looks, focus moved to it
    labels = browser.js(frame("[...doc.querySelectorAll('#plot svg > text')].slice(2).map(t => t.textContent)"))
    assert labels and all(re.match(TIME, t) for t in labels), labels
    shoot(browser, f"dashboard-history-{theme}.png")


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_error_browser_groups_pages_and_keyboard(server: str, browser: Browser, theme: str) -> None:
    open_page(browser, server, theme)
    browser.js(frame("doc.querySelector('button.browse-errors').focus()"))
    press(browser, "Enter", "Enter", 13, "\r")  # the keyboard opens the error browser
    wait_for("the failed messages", lambda: browser.js(frame("doc.querySelectorAll('tr.message').length")) == 3,
             timeout=30)
    wait_for("the groups", lambda: browser.js(frame("doc.querySelectorAll('button.group').length")) == 2, timeout=20)
    assert browser.js(frame("doc.activeElement.id")) == "panel-title"
    caption = browser.js(frame("doc.getElementById('messages-caption').textContent"))
    depth = browser.js(frame("doc.querySelector('tr[data-queue=\"error\"] td.depth').textContent"))
    counts = browser.js(frame("[...doc.querySelectorAll('button.group .count')].map(c => Number(c.textContent))"))
    assert caption.startswith(f"{depth} failed messages") and sum(counts) == int(depth) == 3  # one count everywhere
    groups = browser.js(frame("[...doc.querySelectorAll('button.group')].map(g => g.dataset.key)"))
    assert sorted(groups) == sorted(["TimeoutError", "tests.test_dashboard_api.Boom"])
    times = browser.js(frame("[...doc.querySelectorAll('tr.message td:nth-child(3)')].map(t => t.textContent)"))
    assert all(re.match(TIME, t) for t in times), times

    delete = "doc.getElementById('delete')"
    off = browser.js(frame(f"[{delete}.disabled, getComputedStyle({delete}).backgroundColor, "
                           f"getComputedStyle({delete}).cursor]"))
    browser.js(frame("doc.querySelector('tr.message input[type=checkbox]').click()"))
    on = browser.js(frame(f"[{delete}.disabled, getComputedStyle({delete}).backgroundColor, "
                          f"getComputedStyle({delete}).cursor]"))
    assert off[0] is True and off[2] == "not-allowed" and on[0] is False and on[1] != off[1]  # looks disabled

    browser.js(frame("doc.querySelector('tr.message details').open = true"))
    stack = browser.js(frame("[doc.querySelector('tr.message pre.stack').innerText, "
                             "doc.querySelector('tr.message pre.stack').getBoundingClientRect().height]"))
    assert stack[0].count("\n") >= 2 and "\\n" not in stack[0] and stack[1] > 40  # on several lines
    shoot(browser, f"dashboard-errors-{theme}.png")

    # a group narrows the list; the search too; Escape closes the panel and gives the focus back
    browser.js(frame("[...doc.querySelectorAll('button.group')].find(g => g.dataset.key === 'TimeoutError').click()"))
    wait_for("the TimeoutError group", lambda: browser.js(frame("doc.querySelectorAll('tr.message').length")) == 2,
             timeout=20)
    browser.js(frame("doc.getElementById('search').value = 'bad invoice'"))
    browser.js(frame("doc.getElementById('filters').requestSubmit()"))
    wait_for("the search", lambda: browser.js(frame("doc.querySelectorAll('tr.message').length")) == 0, timeout=20)
    browser.js(frame("doc.getElementById('clear-filters').click()"))
    wait_for("every message again", lambda: browser.js(frame("doc.querySelectorAll('tr.message').length")) == 3,
             timeout=20)
    browser.js(frame("doc.getElementById('panel-title').focus()"))
    press(browser, "Escape", "Escape", 27)
    wait_for("the panel to close", lambda: browser.js(frame("doc.getElementById('panel').hidden")), timeout=10)


def test_return_and_delete_selected_messages(server: str, browser: Browser,
                                             queues_file: tuple[Path, dict[str, Any]]) -> None:
    path, made = queues_file
    open_page(browser, server, "light")
    browser.js(frame("doc.querySelector('button.browse-errors').click()"))
    wait_for("the failed messages", lambda: browser.js(frame("doc.querySelectorAll('tr.message').length")) == 3,
             timeout=30)
    returned, deleted = str(made["failed"][0].id), str(made["failed"][1].id)
    browser.js(frame(f"doc.querySelector('tr.message[data-id=\"{returned}\"] input[type=checkbox]').click()"))
    browser.js(frame("doc.getElementById('retry').click()"))
    wait_for("the message to leave the error queue in the page", lambda: browser.js(frame(
        f"doc.querySelectorAll('tr.message').length === 2 && "
        f"!doc.querySelector('tr.message[data-id=\"{returned}\"]')")),
        timeout=30)
    assert "returned 1: 1 to invoices" in browser.js(frame("doc.getElementById('action-result').textContent"))
    browser.js(frame("doc.defaultView.confirm = () => true"))  # the "cannot be undone" question, answered yes
    browser.js(frame(f"doc.querySelector('tr.message[data-id=\"{deleted}\"] input[type=checkbox]').click()"))
    browser.js(frame("doc.getElementById('delete').click()"))
    wait_for("the deleted message to go", lambda: browser.js(frame("doc.querySelectorAll('tr.message').length")) == 1,
             timeout=30)
    assert browser.js(frame("doc.getElementById('action-result').textContent")) == "deleted 1"
    after = wait_for("the new depths", lambda: (rows := browser.js(READ_QUEUES)) and
                     {r["queue"]: r["depth"] for r in rows}.get("error") == "1" and rows, timeout=30)
    assert {r["queue"]: r["depth"] for r in after}["invoices"] == "1"
    with SqlQueueTransport.from_url(f"sqlite:///{path}") as transport:
        assert [str(r.id) for r in transport.browse("invoices")] == [returned]
        assert [str(r.id) for r in transport.browse("error")] == [str(made["failed"][2].id)]
