"""Retry redirects through the "SQL Queues" page's API (real API server app, SQLite and PostgreSQL): made, listed
and removed with audit rows in canonical names; a destination outside the connection's queues is refused; the
page's retry, edit and retry, and the batched-retry DAG follow a stored redirect."""

from __future__ import annotations  # noqa: I001  (tests.airflow_env must be imported before airflow)

import tests.airflow_env as airflow_env  # noqa: F401
from tests.airflow_env import airflow_db  # noqa: F401  (fixture)

from typing import Any

import pytest

from airflow_sqlqueue.transport.errorqueue.redirects import canonical_name
from tests.test_dashboard_api import (  # noqa: F401  (fixtures)
    CONN_ID,
    PREFIX,
    app,
    as_user,
    client,
    filled,
    last_audit,
    post,
    variable,
)
from tests.test_batch_retry_dag import fail, queues, run  # noqa: F401  (fixture)

URL = f"{PREFIX}/api/connections/{CONN_ID}/redirects"


def name(db: Any, queue: str) -> str:
    return canonical_name(db.transport.dialect, db.transport.address(db.q(queue)))


def test_redirects_are_made_listed_and_removed_with_audit_rows(client: Any, filled: Any) -> None:  # noqa: F811
    db, _ = filled
    empty = client.get(URL, headers=as_user("viewer")).json()
    assert empty["redirects"] == [] and empty["can_manage"] is False
    assert name(db, "billing") in empty["queues"] and name(db, "error") not in empty["queues"]
    spelled = db.transport.wire_address(db.q("invoices"))  # any spelling names the queue
    made = client.post(URL, headers=as_user("op"), json={"source": spelled, "target": db.q("billing")})
    assert made.status_code == 200, made.text
    assert made.json()["redirect"]["source"] == name(db, "invoices")
    assert made.json()["redirect"]["target"] == name(db, "billing")
    entry = last_audit("sqlqueue.redirect_created")
    assert entry.owner == "op" and name(db, "invoices") in entry.extra and name(db, "billing") in entry.extra
    listed = client.get(URL, headers=as_user("op")).json()
    assert listed["can_manage"] is True
    assert [(r["source"], r["target"], r["created_by"]) for r in listed["redirects"]] == [
        (name(db, "invoices"), name(db, "billing"), "op")]
    again = client.post(URL, headers=as_user("op"), json={"source": db.q("invoices"), "target": db.q("orders")})
    assert again.status_code == 409 and "already has a redirect" in again.json()["detail"]
    gone = client.post(f"{URL}/remove", headers=as_user("op"), json={"source": db.q("invoices")})
    assert gone.status_code == 200 and gone.json()["redirect"]["target"] == name(db, "billing")
    assert last_audit("sqlqueue.redirect_removed").owner == "op"
    assert client.get(URL, headers=as_user("op")).json()["redirects"] == []
    missing = client.post(f"{URL}/remove", headers=as_user("op"), json={"source": db.q("invoices")})
    assert missing.status_code == 404


@pytest.mark.parametrize("target, match", [("error", "not a queue a retry may write to"),
                                           ("nowhere", "not a queue a retry may write to"),
                                           ('"', "target")])
def test_a_destination_outside_the_connections_queues_is_refused(client: Any, filled: Any, target: str,  # noqa: F811
                                                                 match: str) -> None:
    db, _ = filled
    response = client.post(URL, headers=as_user("op"), json={"source": db.q("invoices"),
                                                              "target": db.q(target) if target != '"' else target})
    assert response.status_code in (400, 409) and match in response.json()["detail"], response.text
    assert client.get(URL, headers=as_user("op")).json()["redirects"] == []


def test_the_pages_retry_and_edit_and_retry_follow_a_stored_redirect(client: Any, filled: Any,  # noqa: F811
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    db, made = filled
    assert client.post(URL, headers=as_user("op"), json={"source": db.q("invoices"),
                                                          "target": db.q("billing")}).status_code == 200
    first, second = made["failed"][:2]
    response = post(client, "retry", "op", {"messages": [{"seq": first.seq, "id": str(first.id)}]})
    assert response.status_code == 200 and response.json()["returned"] == {db.transport.name(db.q("billing")): 1}
    monkeypatch.setenv("AIRFLOW__SQLQUEUE__DASHBOARD_EDIT_RETRY", "True")
    edited = post(client, "edit-retry", "op", {"seq": second.seq, "id": str(second.id)})
    assert edited.status_code == 200 and edited.json()["queue"] == db.transport.name(db.q("billing"))
    assert db.transport.peek(db.q("invoices")) == 0 and len(db.transport.browse(db.q("billing"))) == 3


def test_the_batched_retry_dag_follows_a_stored_redirect(airflow_db: None, queues: Any) -> None:  # noqa: F811
    made = fail(queues, "orders", 20)
    queues.errors("error").retry_redirects.create("orders", "orders_v2", created_by="op")
    dag_run = run(batch_size=7)
    assert str(dag_run.state) == "success", airflow_env.task_states(dag_run)
    assert queues.count("orders") == 0 and queues.count("error") == 0
    assert sorted(str(r.id) for r in queues.browse("orders_v2", limit=100)) == sorted(made)


def test_the_page_has_a_retry_redirects_section(client: Any) -> None:  # noqa: F811
    page = client.get(f"{PREFIX}/", headers=as_user("viewer"))
    assert 'id="retry-redirects"' in page.text and "assets/redirects.js" in page.text
    script = client.get(f"{PREFIX}/assets/redirects.js", headers=as_user("viewer"))
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    assert "/redirects" in script.text and "textContent" in script.text
