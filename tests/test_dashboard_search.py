# ruff: noqa: F811  (pytest fixtures imported from tests.test_dashboard_api are parameters here)
"""Search what the user sees (real API server app, SQLite and PostgreSQL): the native message Id (any case), the
conversation Id and other headers as displayed, and text in the body (bytes found in a bytea or BLOB body, whatever
else it holds: binary or invalid UTF-8 bodies do not fail the search)."""

from __future__ import annotations  # noqa: I001  (tests.airflow_env must be imported before airflow)

import tests.airflow_env  # noqa: F401
from tests.airflow_env import airflow_db  # noqa: F401  (fixture)

import uuid
from typing import Any

from airflow_sqlqueue.transport.errorqueue.previews import FailedFilter
from airflow_sqlqueue.transport.wire import headers as h
from tests.test_dashboard_api import CONN_ID, PREFIX, app, as_user, client, filled, variable  # noqa: F401
from tests.test_dashboard_hostile import insert_rows

FAILED = f"{PREFIX}/api/connections/{CONN_ID}/failed"


def found(client: Any, text: str) -> list[str]:
    response = client.get(FAILED, params={"search": text}, headers=as_user("viewer"))
    assert response.status_code == 200, response.text
    return sorted(m["id"] for m in response.json()["messages"])


def test_search_finds_the_message_id_conversation_id_and_body_text(client: Any, filled: Any) -> None:
    db, _ = filled
    invoices = db.transport.name(db.q("invoices"))
    ids = [str(uuid.uuid4()) for _ in range(4)]
    conversation = str(uuid.uuid4())
    headers = {h.FAILED_Q: invoices, h.CONVERSATION_ID: conversation, h.CONTENT_TYPE: "application/json"}
    insert_rows(db, db.q("error"), [
        (ids[0], h.serialize_headers({**headers, h.MESSAGE_ID: ids[0]}), '{"city": "Zürich", "url": "a\\/b"}'.encode()),
        (ids[1], h.serialize_headers({h.FAILED_Q: invoices}), b"\xff\xfe binary then ORDER-4711 \x00\x81"),
        (ids[2], h.serialize_headers({h.FAILED_Q: invoices}), b"\xc3\x28 invalid UTF-8 only"),
        (ids[3], h.serialize_headers({h.FAILED_Q: invoices, h.CONVERSATION_ID: conversation}), b"plain"),
    ])
    assert found(client, ids[2]) == [ids[2]]  # the native Id
    assert found(client, ids[2].upper()) == [ids[2]]  # as .NET prints it
    assert found(client, ids[1][:8]) == [ids[1]]  # part of it
    assert found(client, conversation) == sorted([ids[0], ids[3]])  # the conversation
    assert found(client, "Zürich") == [ids[0]]  # body text, non-ASCII
    assert found(client, "a/b") == [ids[0]]  # as NServiceBus writes JSON ('/' as '\/')
    assert found(client, "ORDER-4711") == [ids[1]]  # text inside a binary body
    assert found(client, "no such text anywhere") == []


def test_search_forms_are_bytes_for_the_body_and_nothing_without_a_search() -> None:
    assert FailedFilter(search="a/b").body_forms() == {"search_body": b"a/b", "search_body_wire": b"a\\/b"}
    assert FailedFilter().body_forms() == {"search_body": None, "search_body_wire": None}
