"""The "SQL Queues" page in a real browser: the Airflow API server on a temp ``AIRFLOW_HOME``, headless Chromium
driven through the Chrome DevTools Protocol (the ``websockets`` package Airflow's uvicorn already installs).

The test logs in (Simple auth manager, a real JWT in the ``_token`` cookie as after the login form), opens the
Airflow UI at ``/plugin/sql-queues`` (the page in the UI's iframe), reads queue names and depths from the DOM,
selects one failed message, clicks "Return selected to their queue" and waits until it leaves the error queue.
Set ``SQLQUEUE_DASHBOARD_SCREENSHOT=docs/dashboard.png`` to also save a screenshot.
"""

from __future__ import annotations

import base64
import json
import os
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
        yield path, made
    finally:
        transport.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, queues_file: tuple[Path, dict[str, Any]]) -> Iterator[str]:
    """``airflow api-server`` on a free port and a fresh ``AIRFLOW_HOME``; its base URL."""
    home = tmp_path_factory.mktemp("airflow-home")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    (home / "passwords.json").write_text(json.dumps({"admin": PASSWORD}))
    (home / "sqlqueue.json").write_text(json.dumps({
        "connections": {"sqlqueue_default": {"thresholds": {"max_depth": 2}}}}))
    env = {**os.environ, "AIRFLOW_HOME": str(home), "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
           "AIRFLOW__API__PORT": str(port), "AIRFLOW__API__BASE_URL": base, "AIRFLOW__API__HOST": "127.0.0.1",
           "AIRFLOW__API__WORKERS": "1", "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
           "AIRFLOW__API_AUTH__JWT_SECRET": "sqlqueue-browser-test-" + "y" * 64,
           "AIRFLOW_CONN_SQLQUEUE_DEFAULT": json.dumps({"conn_type": "sqlite", "host": str(queues_file[0])}),
           "SQLQUEUE_MAINTENANCE_CONFIG": str(home / "sqlqueue.json")}
    for key in ("AIRFLOW__CORE__DAGS_FOLDER_OVERRIDE", "AIRFLOW_CONN_SQLQUEUE_DASH", "PYTHONPATH"):
        env.pop(key, None)
    log = open(home / "api-server.log", "wb")  # noqa: SIM115 - closed below
    subprocess.run([str(BIN / "airflow"), "db", "migrate"], env=env, check=True, stdout=log, stderr=log,
                   timeout=120)
    process = subprocess.Popen([str(BIN / "airflow"), "api-server", "--port", str(port), "--host", "127.0.0.1"],
                               env=env, stdout=log, stderr=log, start_new_session=True, cwd=home)
    try:
        wait_for("the API server to be healthy", lambda: process.poll() is None and urllib.request.urlopen(
            f"{base}/api/v2/monitor/health", timeout=2).status == 200, timeout=60)
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
FRAME = "(document.querySelector('iframe[title=\"SQL Queues\"]')?.contentDocument)"
READ_QUEUES = f"""(() => {{
  const doc = {FRAME};
  if (!doc) return null;
  return [...doc.querySelectorAll('tr[data-queue]')].map(r => ({{
    queue: r.dataset.queue, depth: r.querySelector('td.depth').textContent, breach: r.classList.contains('breach')}}));
}})()"""


def test_the_page_shows_queues_and_returns_a_failed_message(server: str, browser: Browser,
                                                            queues_file: tuple[Path, dict[str, Any]]) -> None:
    path, made = queues_file
    browser.send("Network.enable")
    browser.send("Network.setCookie", name="_token", value=login(server), url=server, path="/")
    browser.send("Emulation.setDeviceMetricsOverride", width=1400, height=1000, deviceScaleFactor=1, mobile=False)
    browser.send("Page.navigate", url=f"{server}/plugin/sql-queues")

    def queues_shown() -> dict[str, tuple[str, bool]] | None:
        rows = browser.js(READ_QUEUES)
        return {r["queue"]: (r["depth"], r["breach"]) for r in rows} if rows else None

    shown = wait_for("the queue table in the SQL Queues page", queues_shown, timeout=45)
    assert shown == {"orders": ("3", True), "billing": ("1", False), "invoices": ("0", False), "error": ("3", True)}

    browser.js(f"{FRAME}.querySelector('section.connection > button').click()")
    wait_for("the failed messages", lambda: browser.js(f"{FRAME}.querySelectorAll('div.message').length") == 3,
             timeout=20)
    groups = browser.js(f"[...{FRAME}.querySelectorAll('details.group')].map(g => g.dataset.exceptionType)")
    assert sorted(groups) == sorted(["TimeoutError", "tests.test_dashboard_api.Boom"])
    chosen = str(made["failed"][0].id)
    browser.js(f"{FRAME}.querySelector('div.message[data-id=\"{chosen}\"] input[type=checkbox]').click()")
    shot = os.environ.get("SQLQUEUE_DASHBOARD_SCREENSHOT")
    if shot:  # the picture in docs/: an orders plot and the error-queue browser with a message selected
        browser.js(f"{FRAME}.querySelector('tr[data-queue=\"orders\"] td.queue button').click()")
        wait_for("the plot", lambda: browser.js(f"!!{FRAME}.querySelector('#plot polyline')"), timeout=20)
        Path(shot).write_bytes(base64.b64decode(browser.send("Page.captureScreenshot")["data"]))
    assert browser.js(f"{FRAME}.getElementById('retry').disabled") is False
    browser.js(f"{FRAME}.getElementById('retry').click()")

    wait_for("the message to leave the error queue in the page", lambda: browser.js(
        f"{FRAME}.querySelectorAll('div.message').length === 2 && "
        f"!{FRAME}.querySelector('div.message[data-id=\"{chosen}\"]')"), timeout=20)
    after = wait_for("the new depths in the queue table",
                     lambda: (s := queues_shown()) and s["error"][0] == "2" and s, timeout=20)
    assert after["invoices"] == ("1", False) and after["error"] == ("2", False)
    assert "returned 1" in browser.js(f"{FRAME}.getElementById('action-result').textContent")
    with SqlQueueTransport.from_url(f"sqlite:///{path}") as transport:
        assert [str(r.id) for r in transport.browse("invoices")] == [chosen]
        assert chosen not in {str(r.id) for r in transport.browse("error")}
