# ruff: noqa: F811  (pytest fixtures imported from tests.test_dashboard_browser are parameters here)
"""The page of one failed message and the group cards in a real browser (issue 31): the Airflow API server and
headless Chromium as in :mod:`tests.test_dashboard_browser` (same helpers), on a queue database of its own with
hostile rows (script tags, bidirectional overrides, control characters) and one conversation.

Set ``SQLQUEUE_DASHBOARD_SCREENSHOTS=docs`` to save the screenshots there.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_sqlqueue.transport import SqlQueueTransport
from airflow_sqlqueue.transport.wire import headers as h
from tests import test_dashboard_api as api_tests
from tests.test_dashboard_browser import (  # noqa: F401  (fixtures and helpers)
    CHROMIUM,
    CONTRAST,
    Browser,
    api_server,
    browser,
    frame,
    open_page,
    shoot,
    wait_for,
)
from tests.test_dashboard_hostile import insert_rows

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")]
#: Would run if any value were parsed as HTML; shown as text instead.
SCRIPT = "<img src=x onerror=\"window.top.__pwned=1\"><script>window.top.__pwned=1</script>"
HOSTILE = f"{SCRIPT}\u202eevil\u001b[31m\u0007"
TALK = str(uuid.uuid4())


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Any]]]:
    """The API tests' queues (3 failed messages in 2 groups) plus two hostile rows of one conversation."""
    path = tmp_path_factory.mktemp("queues") / "queues.db"
    transport = SqlQueueTransport.from_url(f"sqlite:///{path}", error_queue="error")
    try:
        filled = api_tests.fill_queues(transport, lambda name: name)
        ids = [str(uuid.uuid4()) for _ in range(2)]
        headers = {h.FAILED_Q: "invoices", h.EXCEPTION_TYPE: "Hostile", h.EXCEPTION_MESSAGE: HOSTILE,
                   h.CONVERSATION_ID: TALK, h.CONTENT_TYPE: "application/json", HOSTILE: HOSTILE,
                   h.TIME_OF_FAILURE: h.format_wire_time(), h.PROCESSING_ENDPOINT: "Billing",
                   h.PROCESSING_MACHINE: "host-7"}
        insert_rows(SimpleNamespace(transport=transport), "error", [
            (ids[0], json.dumps(headers), json.dumps({"note": HOSTILE, "n": [1, 2]}).encode()),
            (ids[1], json.dumps({**headers, h.CONTENT_TYPE: "application/octet-stream"}), bytes(range(256)) * 300)])
        yield path, {**filled, "hostile": ids}
    finally:
        transport.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, made: tuple[Path, dict[str, Any]]) -> Iterator[str]:
    home = tmp_path_factory.mktemp("airflow-home")
    yield from api_server(home, made[0], {"connections": {"sqlqueue_default": {}}})


def open_errors(browser: Browser, server: str, theme: str, rows: int) -> None:
    open_page(browser, server, theme)
    browser.js(frame("doc.querySelector('button.browse-errors').click()"))
    wait_for("the failed messages", lambda: browser.js(frame("doc.querySelectorAll('tr.message').length")) == rows,
             timeout=30)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_the_message_page_shows_a_hostile_message_as_text_in_the_airflow_theme(
        server: str, browser: Browser, made: tuple[Path, dict[str, Any]], theme: str) -> None:
    _, data = made
    first = data["hostile"][0]
    open_errors(browser, server, theme, 5)
    link = f"doc.querySelector('tr.message[data-id=\"{first}\"] a.message-link')"
    wait_for("the link to the message's page", lambda: browser.js(frame(f"!!{link}")), timeout=20)
    assert f"id={first}" in browser.js(frame(f"{link}.href"))
    browser.js(frame(f"{link}.click()"))
    wait_for("the message page", lambda: browser.js(frame(
        "doc.body.classList.contains('message-page') && doc.querySelectorAll('#headers tbody tr').length > 3")),
        timeout=30)
    assert browser.js("window.__pwned") is None  # nothing ran
    assert browser.js(frame("doc.querySelectorAll('#message script, #message img').length")) == 0
    shown = browser.js(frame("doc.getElementById('exception-message').textContent"))
    assert shown.startswith(SCRIPT) and "⟨U+202E⟩evil⟨U+001B⟩[31m⟨U+0007⟩" in shown  # visible, not obeyed
    body = browser.js(frame("doc.getElementById('body').textContent"))
    assert body.startswith('{\n  "note": ') and browser.js(frame("doc.getElementById('body').dataset.kind")) == "json"
    facts = browser.js(frame("[...doc.querySelectorAll('#facts dd')].map(d => d.textContent)"))
    assert "Billing" in facts and "host-7" in facts and "invoices" in facts
    # the same conversation: the other hostile message, with a link to its page
    talk = wait_for("the conversation (loaded after the message)", lambda: browser.js(frame(
        "[...doc.querySelectorAll('#conversation tbody a')].map(a => a.href)")), timeout=20)
    assert len(talk) == 1 and f"id={data['hostile'][1]}" in talk[0]
    # the header filter
    browser.js(frame("(() => { const f = doc.getElementById('header-filter'); f.value = 'processingmachine'; "
                     "f.dispatchEvent(new Event('input')); })()"))
    assert browser.js(frame("[...doc.querySelectorAll('#headers tbody tr')].filter(r => !r.hidden)"
                            ".map(r => r.dataset.header)")) == [h.PROCESSING_MACHINE]
    # Airflow's palette: the page's background is the Airflow UI's own (its Chakra token), text readable
    assert browser.js(frame("doc.documentElement.dataset.theme")) == theme
    ours = browser.js(frame("getComputedStyle(doc.body).backgroundColor"))
    airflow = browser.js("getComputedStyle(document.documentElement).getPropertyValue('--chakra-colors-bg').trim()")
    assert airflow and ours == browser.js(f"""(() => {{ const c = document.createElement('canvas').getContext('2d');
        c.fillStyle = {json.dumps(airflow)}; c.fillRect(0, 0, 1, 1); const [r, g, b] = c.getImageData(0, 0, 1, 1).data;
        return `rgb(${{r}}, ${{g}}, ${{b}})`; }})()""")
    assert ours == ("rgb(255, 255, 255)" if theme == "light" else "rgb(22, 29, 45)")  # white; Airflow's navy
    for selector in ("body", "#facts dt", "#headers th", "#m-retry", "#m-delete", "#body", ".hint", "#back"):
        ratio = browser.js(frame(f"{CONTRAST}(doc.querySelector('{selector}'))"))
        assert ratio >= 4.5, (theme, selector, ratio)
    shoot(browser, f"dashboard-message-{theme}.png")
    # a large binary body: hex, cut, with a download of the whole
    browser.js(frame("doc.querySelector('#conversation tbody a').click()"))
    wait_for("the binary message", lambda: browser.js(frame("doc.getElementById('body').dataset.kind")) == "binary",
             timeout=30)
    assert browser.js(frame("doc.getElementById('body').textContent")).startswith("00 01 02 03")
    assert not browser.js(frame("doc.getElementById('download').hidden"))
    assert "only the first" in browser.js(frame("doc.getElementById('body-note').textContent"))


def test_group_cards_act_on_a_whole_group_after_a_confirmation_naming_its_count(
        server: str, browser: Browser, made: tuple[Path, dict[str, Any]]) -> None:
    path, data = made
    open_errors(browser, server, "light", 5)
    card = "doc.querySelector('article.group-card[data-key=\"Hostile\"]')"
    wait_for("the group cards with their history", lambda: browser.js(frame(
        f"!!{card} && {card}.querySelector('.failed-again').textContent === '0'")), timeout=30)
    facts = browser.js(frame(f"{card}.querySelector('.group-facts').textContent"))
    assert "not in the last 30 days" in facts and " UTC" in facts
    browser.js(frame("(doc.defaultView.__asked = [], doc.defaultView.confirm = (q) => "
                     "{ doc.defaultView.__asked.push(q); return q.includes('TimeoutError'); }, true)"))
    browser.js(frame(f"{card}.querySelector('button.group-delete').click()"))  # asked, answered no
    wait_for("the question", lambda: browser.js(frame("doc.defaultView.__asked.length")) == 1, timeout=10)
    assert "Delete all 2 message(s) of the group \"Hostile\"" in browser.js(frame("doc.defaultView.__asked[0]"))
    timeout = "doc.querySelector('article.group-card[data-key=\"TimeoutError\"]')"
    browser.js(frame(f"{timeout}.querySelector('button.group-retry').click()"))
    wait_for("the group to be returned", lambda: browser.js(frame(
        "doc.getElementById('action-result').textContent")) == "returned 2 of 2", timeout=30)
    assert "Return all 2 message(s) of the group \"TimeoutError\"" in browser.js(frame("doc.defaultView.__asked[1]"))
    wait_for("the list without them", lambda: browser.js(frame("doc.querySelectorAll('tr.message').length")) == 3,
             timeout=30)
    with SqlQueueTransport.from_url(f"sqlite:///{path}") as transport:
        assert len(transport.browse("invoices")) == 2 and len(transport.browse("error")) == 3
