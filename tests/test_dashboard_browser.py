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
PROJECT_DAGS = Path(__file__).resolve().parent.parent / "airflow_sqlqueue" / "example_dags"
#: The API server's environment (the batched-retry task runs with it, as a worker of that deployment would).
ENV: dict[str, str] = {}

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed "
                                 "(scripts/install-system-packages.sh installs it: apt-get install chromium)")]


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
        for minutes, depth, newest in ((60, 0, None), (50, 2, 1), (40, 5, 2), (30, 4, 2), (20, 6, 3), (10, 3, 3)):
            record_samples(transport, [{"conn_id": "sqlqueue_default", "queue": "orders", "depth": depth,
                                        "oldest_age_seconds": 30.0 + minutes, "newest_seq": newest}],
                           "sqlqueue_health_samples", now=now - timedelta(minutes=minutes))
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


def api_server(home: Path, queues_path: Path, config: dict[str, Any], extra_env: dict[str, str] | None = None,
               users: dict[str, str] | None = None) -> Iterator[str]:
    """Run ``airflow api-server`` in ``home`` on the SQLite queue database ``queues_path`` with the maintenance
    configuration ``config``; yield its base URL (the server is stopped afterwards). ``users``: more Simple auth
    manager users (name: role), each with the password ``PASSWORD``; ``extra_env`` last."""
    port = free_port()
    base = f"http://127.0.0.1:{port}{BASE_PATH}"
    (home / "passwords.json").write_text(json.dumps({"admin": PASSWORD} | dict.fromkeys(users or {}, PASSWORD)))
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
    for key in ("AIRFLOW__CORE__DAGS_FOLDER_OVERRIDE", "AIRFLOW_CONN_SQLQUEUE_DASH"):
        env.pop(key, None)
    env["PYTHONPATH"] = str(PROJECT_DAGS.parent)  # the checkout under test, whatever the editable install points at
    env["AIRFLOW__SQLQUEUE__DASHBOARD_EDIT_RETRY"] = "True"
    if users:
        env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] = ",".join(
            ["admin:admin", *(f"{name}:{role}" for name, role in users.items())])
    env.update(extra_env or {})
    (home / "dags").mkdir()
    shutil.copy(PROJECT_DAGS / "error_queue_batch_retry.py", home / "dags")  # the DAG the page starts
    ENV.update(env)
    log = open(home / "api-server.log", "wb")  # noqa: SIM115 - closed below
    subprocess.run([str(BIN / "airflow"), "db", "migrate"], env=env, check=True, stdout=log, stderr=log,
                   timeout=600)  # minutes on a loaded shared 2-core machine
    subprocess.run([str(BIN / "airflow"), "dags", "reserialize"], env=env, check=True, stdout=log, stderr=log,
                   timeout=300)
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


def login(base: str, username: str = "admin") -> str:
    """A JWT from Airflow's login endpoint (what the login form gets)."""
    request = urllib.request.Request(f"{base}/auth/token", method="POST", headers={"Content-Type": "application/json"},
                                     data=json.dumps({"username": username, "password": PASSWORD}).encode())
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
                connect(pages[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=10, ping_interval=None))
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


def open_page(browser: Browser, server: str, theme: str, username: str = "admin") -> dict[str, tuple[str, bool, str]]:
    """Log in (as ``username``), open the page in the Airflow UI in ``theme``; the queue table as shown."""
    browser.send("Network.enable")
    browser.send("Network.setCookie", name="_token", value=login(server, username), url=server, path="/")
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


@pytest.mark.smoke  # the default run keeps this one test of the suite
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
    labels = browser.js(frame("[...doc.querySelectorAll('#plot svg.depth-chart > text')].slice(2)"
                              ".map(t => t.textContent)"))
    assert labels and all(re.match(TIME, t) for t in labels), labels
    # throughput from the newest positions: 1, 2, 2, 3, 3 ten minutes apart -> 0.1, 0, 0.1, 0 sent per minute
    wait_for("the throughput chart", lambda: browser.js(frame(
        "!!doc.querySelector('#plot svg.throughput-chart polyline')")), timeout=10)
    rows = browser.js(frame("[...doc.querySelectorAll('#plot table.history-table tbody tr')]"
                            ".map(r => [...r.cells].map(c => c.textContent))"))
    assert [r[2] for r in rows] == ["-", "-", "0.10", "0.00", "0.10", "0.00"], rows
    assert [r[1] for r in rows] == ["0", "2", "5", "4", "6", "3"] and all(re.match(TIME, r[0]) for r in rows)
    assert rows[-1][3] == "40 s"  # critical time: the oldest message's age at the sample
    sent_now = browser.js(frame("doc.querySelector('tr[data-queue=\"orders\"] td.throughput').textContent"))
    assert sent_now == "0.00"  # nothing sent since the last sample (3 is still the newest position)
    for selector in ("#plot svg.throughput-chart text", "#plot h3", "#plot table.history-table td"):
        ratio = browser.js(frame(f"{CONTRAST}(doc.querySelector('{selector}'))"))
        assert ratio >= 4.5, (theme, selector, ratio)
    browser.js(frame("doc.querySelector('#plot details.history').open = true"))
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
    stack = browser.js(frame("[doc.querySelector('tr.message-detail pre.stack').innerText, "
                             "doc.querySelector('tr.message-detail pre.stack').getBoundingClientRect().height]"))
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


# -- batched retries, cancel, edit and retry (after the tests above: they count the three failed messages) ----------
def add_failed(path: Path, queue: str, exception: str, bodies: list[str], content_type: str | None = None) -> list[str]:
    """Failed messages in the error queue, as NServiceBus leaves them; their native Ids."""
    from airflow_sqlqueue.transport import OutgoingMessage
    from airflow_sqlqueue.transport.wire import headers as h

    extra = {h.CONTENT_TYPE: content_type} if content_type else {}
    with SqlQueueTransport.from_url(f"sqlite:///{path}") as transport:
        ids = transport.send_many("error", [OutgoingMessage(body=body, headers={
            h.FAILED_Q: queue, h.EXCEPTION_TYPE: exception, h.EXCEPTION_MESSAGE: f"{exception} happened",
            h.TIME_OF_FAILURE: h.format_wire_time(), h.ENCLOSED_MESSAGE_TYPES: "Billing.Bill",
            h.MESSAGE_ID: f"{exception}-{i}", **extra}) for i, body in enumerate(bodies)])
    return [str(i) for i in ids]


def open_group(browser: Browser, server: str, theme: str, exception: str, count: int) -> None:
    open_page(browser, server, theme)
    browser.js(frame("doc.querySelector('button.browse-errors').click()"))
    wait_for("the groups", lambda: browser.js(frame(
        f"!!doc.querySelector('button.group[data-key=\"{exception}\"]')")), timeout=30)
    browser.js(frame(f"doc.querySelector('button.group[data-key=\"{exception}\"]').click()"))
    wait_for(f"the {exception} group", lambda: browser.js(frame("doc.querySelectorAll('tr.message').length")) == count,
             timeout=30)


def start_from_form(browser: Browser, batch_size: int, ramp: int | None, rate: float,
                    redirect: tuple[str, str] | None = None) -> str:
    """Fill the batched-retry form for the group shown, start it; the new run's id as the page lists it."""
    before = set(browser.js(frame("[...doc.querySelectorAll('#runs tr.run')].map(r => r.dataset.run)")) or [])
    browser.js(frame("doc.getElementById('batch').open = true"))
    assert browser.js(frame("doc.getElementById('scope-group-label').textContent")).startswith("every message with")
    for field, value in (("batch-size", batch_size), ("ramp-start", ramp), ("rate", rate)):
        browser.js(frame(f"doc.getElementById('{field}').value = {json.dumps('' if value is None else str(value))}"))
    if redirect:
        browser.js(frame("doc.getElementById('add-redirect').click()"))
        browser.js(frame(f"(() => {{ const [a, b] = doc.querySelectorAll('#redirects select'); "
                         f"a.value = {json.dumps(redirect[0])}; b.value = {json.dumps(redirect[1])}; }})()"))
    browser.js(frame("doc.getElementById('batch-start').click()"))
    return wait_for("the new run in the page", lambda: [r for r in browser.js(frame(
        "[...doc.querySelectorAll('#runs tr.run')].map(r => r.dataset.run)")) if r not in before] or None,
        timeout=30)[0]


def run_task(run_id: str, log: Path) -> subprocess.Popen:
    """The run's task, as a worker of the deployment would run it (the same environment and metadata database)."""
    with open(log, "wb") as out:
        return subprocess.Popen([str(BIN / "airflow"), "tasks", "test", "sqlqueue_error_queue_batch_retry", "retry",
                                 run_id], env=ENV, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                cwd=ENV["AIRFLOW_HOME"])


def task_ended(browser: Browser, task: subprocess.Popen, log: Path, timeout: float) -> str:
    """Wait for the task while the page goes on polling (the DevTools events it sends are read meanwhile)."""
    try:
        wait_for("the batched-retry task to end", lambda: browser.js("1") and task.poll() is not None,
                 timeout=timeout)
    finally:
        stop(task)
    return log.read_text(errors="replace")


def run_shown(browser: Browser, run_id: str) -> dict[str, str]:
    return browser.js(frame(f"""(() => {{ const r = doc.querySelector('#runs tr.run[data-run="{run_id}"]');
      return r && {{state: r.dataset.state, by: r.cells[1].textContent, started: r.cells[2].textContent,
        batches: r.querySelector('.batches').textContent, returned: r.querySelector('.returned').textContent,
        left: r.querySelector('.left').textContent, remaining: r.querySelector('.remaining').textContent,
        cancel: !!r.querySelector('button.cancel-run')}}; }})()"""))


def audit_events(server: str, event: str) -> list[dict[str, Any]]:
    """Airflow's audit log (Browse -> Audit Log) through its REST API."""
    request = urllib.request.Request(f"{server}/api/v2/eventLogs?event={event}&limit=100",
                                     headers={"Authorization": f"Bearer {login(server)}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())["event_logs"]


def test_batched_retry_from_the_page_runs_as_a_task_with_progress_redirect_and_audit(
        server: str, browser: Browser, queues_file: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    path, _ = queues_file
    made = add_failed(path, "billing", "Throttled", [f'{{"bill": {i}}}' for i in range(12)])
    open_group(browser, server, "light", "Throttled", 12)
    # a message's details open in a full-width row under it: headers in a table, values on readable lines
    browser.js(frame("doc.querySelector('tr.message details').open = true"))
    detail = wait_for("the details row", lambda: browser.js(frame("""(() => {
      const row = doc.querySelector('tr.message-detail:not([hidden])');
      const value = row && row.querySelector('table.headers-table td.value');
      return value && [row.getBoundingClientRect().width, doc.getElementById('messages').getBoundingClientRect().width,
                       value.getBoundingClientRect().width, value.getBoundingClientRect().height,
                       row.querySelectorAll('table.headers-table tbody tr').length]; })()""")), timeout=10)
    assert detail[0] >= detail[1] - 2 and detail[2] > 300 and detail[3] < 40 and detail[4] >= 5, detail
    browser.js(frame("doc.querySelector('tr.message-detail input.header-filter').value = 'FailedQ'"))
    browser.js(frame("doc.querySelector('tr.message-detail input.header-filter').dispatchEvent(new Event('input'))"))
    assert browser.js(frame("[...doc.querySelectorAll('tr.message-detail:not([hidden]) table.headers-table tbody tr')]"
                            ".filter(r => !r.hidden).map(r => r.dataset.header)")) == ["NServiceBus.FailedQ"]
    run_id = start_from_form(browser, batch_size=5, ramp=2, rate=50, redirect=("billing", "invoices"))
    assert run_shown(browser, run_id)["state"] == "queued" and run_shown(browser, run_id)["by"] == "admin"
    task = run_task(run_id, tmp_path / "task.log")
    output = task_ended(browser, task, tmp_path / "task.log", timeout=300)
    assert task.returncode == 0 and "new_state=success" in output, output[-3000:]
    shown = wait_for("the run to show done", lambda: (r := run_shown(browser, run_id)) and r["state"] == "done" and r,
                     timeout=30)  # the page polls while a run is not finished
    assert shown["returned"] == "12 to invoices" and shown["batches"] == "4" and shown["remaining"] == "0"
    assert shown["left"] == "0" and re.match(TIME, shown["started"]) and not shown["cancel"]  # 2 + 4 + 5 + 1
    # the run's end refreshed the list, the groups and the overview: no returned row is left to act on
    wait_for("the list without the returned messages", lambda: browser.js(frame(
        "doc.querySelectorAll('tr.message').length === 0 && "
        "!doc.querySelector('button.group[data-key=\"Throttled\"]')")), timeout=30)
    with SqlQueueTransport.from_url(f"sqlite:///{path}") as transport:
        back = [str(r.id) for r in transport.browse("invoices", limit=100)]
        assert all(back.count(i) == 1 for i in made) and not set(made) & {str(r.id) for r in transport.browse("error")}
    events = audit_events(server, "sqlqueue.batch_retry_started")
    assert any(run_id in (e.get("extra") or "") and e["owner"] == "admin" for e in events), events


def test_cancel_stops_a_running_batched_retry_between_batches(
        server: str, browser: Browser, queues_file: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    path, _ = queues_file
    made = add_failed(path, "billing", "Slow", [f'{{"slow": {i}}}' for i in range(10)])
    open_group(browser, server, "light", "Slow", 10)
    run_id = start_from_form(browser, batch_size=1, ramp=None, rate=1)  # one message a second: time to cancel
    task = run_task(run_id, tmp_path / "task.log")
    try:
        wait_for("a batch done", lambda: (r := run_shown(browser, run_id)) and r["state"] == "running"
                 and int(r["batches"]) >= 1, timeout=120)
        browser.js(frame(f"doc.querySelector('#runs tr.run[data-run=\"{run_id}\"] button.cancel-run').click()"))
    finally:
        output = task_ended(browser, task, tmp_path / "task.log", timeout=120)
    assert "cancelled from the SQL Queues page" in output and "new_state=failed" in output, output[-3000:]
    shown = wait_for("the run to show cancelled", lambda: (r := run_shown(browser, run_id)) and
                     r["state"] == "cancelled" and r, timeout=30)
    returned = int(shown["batches"])
    assert 1 <= returned < 10 and shown["returned"] == f"{returned} to billing" and not shown["cancel"]
    assert shown["remaining"] == str(10 - returned)
    with SqlQueueTransport.from_url(f"sqlite:///{path}") as transport:
        still = {str(r.id) for r in transport.browse("error", limit=100)} & set(made)
        back = {str(r.id) for r in transport.browse("billing", limit=100)} & set(made)
    assert len(still) == 10 - returned and len(back) == returned and not still & back  # nothing half done
    events = audit_events(server, "sqlqueue.batch_retry_cancelled")
    assert any(run_id in (e.get("extra") or "") and e["owner"] == "admin" for e in events), events


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_batched_retry_panel_in_both_themes(server: str, browser: Browser, theme: str) -> None:
    open_page(browser, server, theme)
    browser.js(frame("doc.querySelector('button.browse-errors').click()"))
    wait_for("the runs", lambda: browser.js(frame("doc.querySelectorAll('#runs tr.run').length")) >= 1, timeout=30)
    browser.js(frame("doc.getElementById('batch').open = true"))
    browser.js(frame("doc.getElementById('add-redirect').click()"))
    options = browser.js(frame("[...doc.querySelectorAll('#redirects select')[1].options].map(o => o.value)"))
    assert sorted(options) == ["billing", "invoices", "orders"]  # only the configured queues, never the error queue
    for selector in ("#runs td", "#batch-form legend", "#runs caption", "tr.state-done td.state",
                     "tr.state-cancelled td.state", "#batch-form label"):
        ratio = browser.js(frame(f"{CONTRAST}(doc.querySelector('{selector}'))"))
        assert ratio >= 4.5, (theme, selector, ratio)
    browser.js(frame("doc.getElementById('batch').scrollIntoView()"))
    shoot(browser, f"dashboard-batch-retry-{theme}.png")


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_edit_and_retry_in_the_page(server: str, browser: Browser, theme: str,
                                    queues_file: tuple[Path, dict[str, Any]]) -> None:
    path, _ = queues_file
    exception = f"Invalid{theme.title()}"
    [original] = add_failed(path, "orders", exception, ['{"amount": 1}'], "application/json")
    open_group(browser, server, theme, exception, 1)
    browser.js(frame("doc.querySelector('tr.message details').open = true"))
    browser.js(frame("doc.querySelector('tr.message-detail button.edit-retry').click()"))
    assert browser.js(frame("doc.getElementById('editor').open")) is True
    headers = json.loads(browser.js(frame("doc.getElementById('editor-headers').value")))
    assert headers["NServiceBus.MessageId"] == f"{exception}-0" and "NServiceBus.FailedQ" not in headers
    for selector in ("#editor-headers", "#editor label", "#editor-note"):
        ratio = browser.js(frame(f"{CONTRAST}(doc.querySelector('{selector}'))"))
        assert ratio >= 4.5, (theme, selector, ratio)
    shoot(browser, f"dashboard-edit-{theme}.png")

    def submit(headers: dict[str, Any], body: str) -> None:
        browser.js(frame(f"doc.getElementById('editor-headers').value = {json.dumps(json.dumps(headers))}"))
        browser.js(frame(f"doc.getElementById('editor-body').value = {json.dumps(body)}"))
        browser.js(frame("doc.getElementById('editor-form').requestSubmit()"))

    error = "doc.getElementById('editor-error')"
    submit(headers, '{"amount": ')  # a JSON content type: the page says the body is not JSON, sends nothing
    assert "not valid JSON" in browser.js(frame(f"{error}.textContent"))
    submit({**headers, "NServiceBus.MessageId": "forged"}, '{"amount": 2}')  # the server's reason, shown
    wait_for("the server's refusal", lambda: "NServiceBus.MessageId" in browser.js(frame(f"{error}.textContent")),
             timeout=20)
    assert browser.js(frame(f"{error}.textContent")).startswith("refused: 400: these headers may not be edited")
    submit({**headers, "Billing.Note": "fixed by hand"}, '{"amount": 2}')
    wait_for("the editor to close", lambda: browser.js(frame("doc.getElementById('editor').open")) is False, timeout=20)
    assert browser.js(frame("doc.getElementById('action-result').textContent")).startswith("sent an edited copy")
    with SqlQueueTransport.from_url(f"sqlite:///{path}") as transport:
        copies = [r for r in transport.browse("orders", limit=100)
                  if json.loads(r.headers).get("airflow_sqlqueue.EditOf") == f"{exception}-0"]
        assert len(copies) == 1 and json.loads(copies[0].body) == {"amount": 2}
        assert json.loads(copies[0].headers)["Billing.Note"] == "fixed by hand" and str(copies[0].id) != original
        assert original not in {str(r.id) for r in transport.browse("error", limit=100)}


def test_edit_and_retry_is_hidden_when_the_deployment_has_it_off(server: str, browser: Browser) -> None:
    open_page(browser, server, "light")
    browser.js(frame("doc.querySelector('button.browse-errors').click()"))
    wait_for("the failed messages", lambda: browser.js(frame("doc.querySelectorAll('tr.message').length")) > 0,
             timeout=30)
    # a message's actions are in its details row (opened from the row)
    browser.js(frame("doc.querySelector('tr.message details').open = true"))
    wait_for("the details row", lambda: browser.js(frame(
        "doc.querySelectorAll('tr.message-detail:not([hidden])').length")) > 0, timeout=30)
    assert browser.js(frame("doc.querySelectorAll('tr.message-detail button.edit-retry').length")) > 0  # on here
    # the same page when the server answers as a deployment without [sqlqueue] dashboard_edit_retry would
    browser.js(frame("""(() => { const w = doc.defaultView, real = w.fetch.bind(w);
      w.fetch = async (url, options) => { const r = await real(url, options);
        if (!String(url).includes('/failed?')) return r;
        const body = await r.json(); body.edit_retry = false;
        return new w.Response(JSON.stringify(body), {status: r.status, headers: r.headers}); }; })()"""))
    browser.js(frame("doc.getElementById('refresh').click()"))
    wait_for("the list again", lambda: browser.js(frame(
        "doc.querySelectorAll('tr.message').length > 0 && "
        "doc.querySelectorAll('tr.message-detail:not([hidden])').length === 0")), timeout=30)
    browser.js(frame("doc.querySelector('tr.message details').open = true"))
    wait_for("the details row without Edit and retry", lambda: browser.js(frame(
        "doc.querySelectorAll('tr.message-detail:not([hidden])').length > 0 && "
        "doc.querySelectorAll('tr.message-detail button.edit-retry').length === 0")), timeout=30)
