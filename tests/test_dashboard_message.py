# ruff: noqa: F811  (pytest fixtures imported from tests.test_dashboard_api are parameters here)
"""The page of one failed message and the group cards and actions (issue 31), through the real Airflow API server
app as in :mod:`tests.test_dashboard_api` (same fixtures), on SQLite and PostgreSQL."""

from __future__ import annotations  # noqa: I001  (tests.airflow_env must be imported before airflow)

import tests.airflow_env  # noqa: F401
from tests.airflow_env import airflow_db  # noqa: F401  (fixture)

import json
import uuid
from typing import Any

import pytest

from airflow_sqlqueue.dashboard.message import indent_xml, layout
from airflow_sqlqueue.transport.wire import headers as h
from tests.test_dashboard_api import (  # noqa: F401  (fixtures)
    CONN_ID,
    PREFIX,
    app,
    as_user,
    client,
    filled,
    post,
    variable,
)
from tests.test_dashboard_hostile import insert_rows

FAILED = f"{PREFIX}/api/connections/{CONN_ID}/failed"
HOSTILE = "<script>alert(1)</script>\u202eevil\u001b[31m\u0007"


def message(client: Any, message_id: str, seq: int | None = None, role: str = "viewer") -> Any:
    params: dict[str, Any] = {"id": message_id}
    if seq is not None:
        params["seq"] = seq
    return client.get(f"{FAILED}/message", params=params, headers=as_user(role))


def test_a_message_shows_its_failure_headers_pretty_body_and_conversation(client: Any, filled: Any) -> None:
    db, made = filled
    first = made["failed"][0]
    response = message(client, str(first.id), first.seq)
    assert response.status_code == 200, response.text
    data = response.json()
    assert (data["id"], data["seq"]) == (str(first.id), first.seq)
    assert data["failed_q"] == db.transport.name(db.q("invoices")) and data["exception_type"] == "TimeoutError"
    assert data["exception_message"] == "the ledger did not answer" and "\n" in data["stack_trace"]
    assert data["processing_endpoint"] and data["processing_machine"]
    assert data["body_kind"] == "json" and data["body_text"] == json.dumps({"kind": "timeout", "n": 0}, indent=2)
    assert data["headers"][h.ENCLOSED_MESSAGE_TYPES] == "Billing.Invoice" and not data["body_truncated"]
    # never retried; found by Id alone too
    assert data["history"] == []
    assert message(client, str(first.id)).json()["seq"] == first.seq


def test_the_same_conversation_is_linked_and_hostile_rows_come_back_as_text(client: Any, filled: Any) -> None:
    db, _ = filled
    invoices = db.transport.name(db.q("invoices"))
    talk_id = str(uuid.uuid4())
    ids = [str(uuid.uuid4()) for _ in range(3)]
    headers = {h.FAILED_Q: invoices, h.EXCEPTION_TYPE: HOSTILE, h.EXCEPTION_MESSAGE: HOSTILE,
               h.CONVERSATION_ID: talk_id, h.CONTENT_TYPE: "text/xml", HOSTILE: HOSTILE}
    insert_rows(db, db.q("error"), [
        (ids[0], json.dumps(headers), b"<a><b x='1'>" + HOSTILE.encode() + b"</b><c/></a>"),
        (ids[1], json.dumps({**headers, h.CONTENT_TYPE: "application/octet-stream"}), bytes(range(256)) * 400),
        (ids[2], json.dumps({h.FAILED_Q: invoices, h.CONVERSATION_ID: str(uuid.uuid4())}), b"other talk")])
    data = message(client, ids[0]).json()
    assert data["headers"][HOSTILE] == HOSTILE and data["exception_message"] == HOSTILE  # text, as it is
    assert data["body_kind"] == "xml" and data["body_text"].splitlines()[0] == "<a>"
    talk = client.get(f"{FAILED}/conversation", params={"conversation_id": talk_id, "but": ids[0]},
                      headers=as_user("viewer"))
    assert talk.status_code == 200, talk.text
    assert [m["id"] for m in talk.json()["messages"]] == [ids[1]]  # not itself, not another conversation
    assert talk.json()["more"] is False
    for bad in ({"conversation_id": ""}, {"conversation_id": "x\u0000"}, {}, {"conversation_id": "x" * 201}):
        refused = client.get(f"{FAILED}/conversation", params=bad, headers=as_user("viewer"))
        assert refused.status_code == 422, refused.text
    big = message(client, ids[1]).json()
    assert big["body_kind"] == "binary" and big["body_truncated"] and big["body_length"] == 256 * 400
    download = client.get(f"{FAILED}/message/body", params={"id": ids[1], "seq": big["seq"]},
                          headers=as_user("viewer"))
    assert download.status_code == 200 and download.content == bytes(range(256)) * 400
    assert download.headers["content-type"] == "application/octet-stream"
    assert download.headers["content-disposition"].startswith("attachment") and "sandbox" in download.headers[
        "content-security-policy"]


@pytest.mark.parametrize("params, code", [
    ({"id": str(uuid.uuid4())}, 404), ({"id": "not a uuid"}, 404), ({"id": "x\u0000"}, 422), ({"id": ""}, 422),
    ({"id": "a" * 101}, 422), ({"id": "x", "seq": 0}, 422), ({"id": "x", "seq": 2**63}, 422), ({}, 422),
    ({"id": "x", "seq": "NaN"}, 422)])
def test_bad_message_requests_are_4xx(client: Any, filled: Any, params: dict[str, Any], code: int) -> None:
    response = client.get(f"{FAILED}/message", params=params, headers=as_user("viewer"))
    assert response.status_code == code, response.text
    body = client.get(f"{FAILED}/message/body", params={"seq": 1, **params}, headers=as_user("viewer"))
    assert 400 <= body.status_code < 500, body.text
    assert client.get(f"{FAILED}/message", params={"id": "x"}).status_code == 401
    unknown = client.get(f"{PREFIX}/api/connections/nope/failed/message", params={"id": "x"},
                         headers=as_user("viewer"))
    assert unknown.status_code == 404


def test_a_returned_message_that_failed_again_shows_its_history(client: Any, filled: Any) -> None:
    db, made = filled
    first = made["failed"][0]
    assert post(client, "retry", "op", {"messages": [{"seq": first.seq, "id": str(first.id)}]}).status_code == 200
    assert message(client, str(first.id)).status_code == 404  # gone from the error queue

    def fail(message_: Any, context: Any) -> None:
        raise TimeoutError("still no ledger")

    db.transport.process(db.q("invoices"), fail, immediate_retries=0)  # it fails again: same Id, new position
    data = message(client, str(first.id)).json()
    assert data["seq"] != first.seq and data["exception_message"] == "still no ledger"
    (entry,) = data["history"]
    assert entry["by"] == "op" and entry["how"] == "returned" and entry["failed_again"] is True
    retried = client.get(f"{FAILED}/retried", params={"id": [str(first.id), str(made["failed"][1].id)]},
                         headers=as_user("viewer")).json()["retried"]
    assert list(retried) == [str(first.id)] and retried[str(first.id)]["retries"] == 1
    cards = client.get(f"{FAILED}/group-cards", params={"by": "exception_type"}, headers=as_user("viewer"))
    assert cards.status_code == 200, cards.text
    timeout = next(g for g in cards.json()["groups"] if g["exception_type"] == "TimeoutError")
    assert timeout["count"] == 2 and timeout["failed_again"] == 1 and timeout["last_retried_by"] == "op"


def test_a_group_is_returned_or_deleted_only_with_its_confirmed_count(client: Any, filled: Any) -> None:
    db, made = filled
    group = {"exception_type": "TimeoutError"}
    assert post(client, "group/retry", "viewer", {**group, "expected": 2}).status_code == 403
    changed = post(client, "group/retry", "op", {**group, "expected": 3})
    assert changed.status_code == 409 and "holds 2 messages now" in changed.json()["detail"]
    assert len(db.transport.browse(db.q("error"))) == 3  # nothing changed
    assert post(client, "group/retry", "op", {"expected": 3}).status_code == 400  # never "every message"
    returned = post(client, "group/retry", "op", {**group, "expected": 2})
    assert returned.status_code == 200, returned.text
    assert returned.json()["total_returned"] == 2 and returned.json()["left"] == []
    assert len(db.transport.browse(db.q("invoices"))) == 2
    (left,) = client.get(f"{FAILED}/group-cards", headers=as_user("viewer")).json()["groups"]
    boom = {k: v for k, v in left["filter"].items() if k != "missing"}
    assert boom["exception_type"].endswith(".Boom") and left["count"] == 1
    deleted = post(client, "group/delete", "op", {**boom, "expected": 1})
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["deleted"] == 1 and db.transport.browse(db.q("error")) == []
    cards = client.get(f"{FAILED}/group-cards", headers=as_user("viewer")).json()
    assert cards["total"] == 0 and cards["groups"] == []


@pytest.mark.parametrize("body", [{"exception_type": "X", "expected": 0}, {"exception_type": "X"},
                                  {"exception_type": "X\u0000", "expected": 1}, {"missing": ["nope"], "expected": 1},
                                  {"exception_type": "", "expected": 1}, {"exception_type": "X", "expected": 1e400},
                                  {"exception_type": "X", "missing": ["exception_type"], "expected": 1}])
def test_bad_group_actions_are_4xx(client: Any, filled: Any, body: dict[str, Any]) -> None:
    response = client.post(f"{FAILED}/group/delete", headers={**as_user("op"), "Content-Type": "application/json"},
                           content=json.dumps(body).replace("Infinity", "1e400"))
    assert 400 <= response.status_code < 500, response.text


def test_body_layout_by_content_type() -> None:
    assert layout('{"a":[1,2]}', False, False, "application/json") == ("json", '{\n  "a": [\n    1,\n    2\n  ]\n}')
    assert layout("[" * 100_000, False, False, "application/json")[0] == "text"
    assert layout("a <b>", False, False, "text/plain") == ("text", "a <b>")
    assert layout("00 ff", True, False, "application/json") == ("binary", "00 ff")
    assert layout('{"cut', False, True, "application/json") == ("text", '{"cut')
    assert indent_xml('<?xml version="1.0"?><a><b>t</b><c/></a>') == (
        '<?xml version="1.0"?>\n<a>\n  <b>t</b>\n  <c/>\n</a>')
    # entities are never expanded: the text stays as it was sent
    assert "&lol9;" in indent_xml('<!DOCTYPE l [<!ENTITY lol "lol">]><l>&lol9;</l>')


def test_a_group_card_names_the_batched_retry_of_exactly_that_group(client: Any, filled: Any) -> None:
    from airflow_sqlqueue.dashboard import audit

    audit.audit("sqlqueue.batch_retry_started", "op", {"conn_id": CONN_ID, "run_id": "manual__r1", "request": {
        "exception_type": "TimeoutError", "missing": [], "positions": 0}})
    audit.audit("sqlqueue.batch_retry_started", "admin", {"conn_id": CONN_ID, "run_id": "manual__r2", "request": {
        "positions": 2}})  # chosen messages, not a group: no card's retry
    audit.audit("sqlqueue.batch_retry_started", "admin", {"conn_id": "another", "run_id": "manual__r3", "request": {
        "missing": []}})  # another connection
    groups = client.get(f"{FAILED}/group-cards", headers=as_user("viewer")).json()["groups"]
    retried = {g["exception_type"].rsplit(".", 1)[-1]: (g["last_run_id"], g["last_retried_by"]) for g in groups}
    assert retried == {"TimeoutError": ("manual__r1", "op"), "Boom": (None, None)}
    by_queue = client.get(f"{FAILED}/group-cards", params={"by": "failed_q"}, headers=as_user("viewer")).json()
    assert [g["last_run_id"] for g in by_queue["groups"]] == [None]  # a part of that group only


def test_retry_history_lookups_take_ids_literally(client: Any, filled: Any) -> None:
    _, made = filled
    first = made["failed"][0]
    assert post(client, "retry", "op", {"messages": [{"seq": first.seq, "id": str(first.id)}]}).status_code == 200
    for pattern in ("%", "_", str(first.id)[:8] + "%"):
        answer = client.get(f"{FAILED}/retried", params={"id": pattern}, headers=as_user("viewer"))
        assert answer.status_code == 200 and answer.json()["retried"] == {}, (pattern, answer.text)
    assert client.get(f"{FAILED}/retried", headers=as_user("viewer")).status_code == 422
    assert client.get(f"{FAILED}/retried", params={"id": ["x"] * 101}, headers=as_user("viewer")).status_code == 422
