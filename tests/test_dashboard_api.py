"""The "SQL Queues" dashboard API, through the real Airflow API server app (the plugin mounted by its entry point).

Queues are real (SQLite file, and a schema on the PostgreSQL test server); users get JWTs from the Simple auth
manager, as the Airflow UI does.
"""

from __future__ import annotations  # noqa: I001  (tests.airflow_env must be imported before airflow)

import tests.airflow_env as airflow_env
from tests.airflow_env import airflow_db  # noqa: F401  (fixture)

import json
import os
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from airflow_sqlqueue.maintenance.health import record_samples
from airflow_sqlqueue.transport import OutgoingMessage, SqlQueueTransport
from airflow_sqlqueue.transport.wire import headers as h
from tests.conftest import Db, make_db

CONN_ID = "sqlqueue_dash"
SAMPLES = "dash_samples"
USERS = {"viewer": "viewer", "user": "user", "op": "op", "admin": "admin"}
PREFIX = "/sqlqueue"


class Boom(Exception):
    """A handler failure of one kind."""


def fill_queues(transport: SqlQueueTransport, q: Callable[[str], str]) -> dict[str, Any]:
    """orders: 3 messages sent 2 h ago; billing: 1 fresh; invoices: empty after its 3 messages failed into the
    error queue (2 TimeoutError, 1 Boom), every one with the NServiceBus failure headers."""
    transport.create_queues([q("orders"), q("billing"), q("invoices"), q("error")])
    old = h.format_wire_time(datetime.now(timezone.utc) - timedelta(hours=2))
    transport.send_many(q("orders"), [OutgoingMessage(body=f'{{"order": {i}}}', headers={
        h.ENCLOSED_MESSAGE_TYPES: "Sales.OrderPlaced", h.TIME_SENT: old}) for i in range(3)])
    transport.send(q("billing"), OutgoingMessage(body=b'{"bill": 1}', headers={
        h.ENCLOSED_MESSAGE_TYPES: "Billing.Bill", h.TIME_SENT: h.format_wire_time()}))
    transport.send_many(q("invoices"), [OutgoingMessage(body=json.dumps({"kind": kind, "n": n}), headers={
        h.ENCLOSED_MESSAGE_TYPES: "Billing.Invoice"}) for n, kind in enumerate(["timeout", "boom", "timeout"])])

    def handler(message: Any, context: Any) -> None:
        if json.loads(message.body)["kind"] == "timeout":
            raise TimeoutError("the ledger did not answer")
        raise Boom("bad invoice")

    transport.process(q("invoices"), handler, immediate_retries=0)
    failed = transport.browse(q("error"))
    assert len(failed) == 3 and transport.peek(q("invoices")) == 0
    return {"failed": failed}


def config_for(db: Db) -> dict[str, Any]:
    """The maintenance configuration of the test's connection (discovery limited to the test's schema)."""
    spec: dict[str, Any] = {"thresholds": {"max_depth": 2, "max_age_seconds": 3600}}
    if db.schema:
        spec["schemas"] = [db.schema]
        spec["error_queue"] = db.q("error")
    return {"connections": {CONN_ID: spec}, "health_samples_table": db.q(SAMPLES)}


@pytest.fixture(scope="module")
def app() -> Iterator[Any]:
    """The real API server app (every component: core API, UI, auth, plugins), with the Simple auth manager."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", ",".join(f"{u}:{r}" for u, r in USERS.items()))
        env.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "False")  # never all admins here
        if not os.environ.get("AIRFLOW__API_AUTH__JWT_SECRET"):
            env.setenv("AIRFLOW__API_AUTH__JWT_SECRET", "sqlqueue-dashboard-tests-" + "x" * 64)
        from airflow.api_fastapi.app import create_app

        yield create_app("all")


@pytest.fixture
def client(app: Any, airflow_db: None) -> Iterator[Any]:  # noqa: F811
    from fastapi.testclient import TestClient

    with TestClient(app, base_url="http://localhost") as test_client:
        yield test_client


def token(role: str) -> str:
    """A JWT for a user of that role, as the Simple auth manager issues at login."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    return get_auth_manager().generate_jwt(SimpleAuthManagerUser(username=role, role=USERS[role]))


def as_user(role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(role)}"}


@pytest.fixture
def variable() -> Iterator[Callable[[dict[str, Any]], None]]:
    """Set the ``sqlqueue_maintenance`` Variable in the metadata database (deleted afterwards)."""
    from airflow.models import Variable

    def put(config: dict[str, Any]) -> None:
        Variable.set("sqlqueue_maintenance", json.dumps(config))

    yield put
    Variable.delete("sqlqueue_maintenance")


@pytest.fixture(params=["sqlite", "postgres"])
def filled(request: pytest.FixtureRequest, tmp_path: Path, variable: Callable[[dict[str, Any]], None],
           airflow_db: None) -> Iterator[tuple[Db, dict[str, Any]]]:  # noqa: F811
    """Queues filled by :func:`fill_queues` behind the Airflow connection ``sqlqueue_dash``, configured by the
    Variable, with three health samples of ``orders`` (depth 1, 4, 3 at 30, 20 and 10 minutes ago)."""
    for db in make_db(request.param, tmp_path):
        if db.kind == "sqlite":
            airflow_env.sqlite_connection(CONN_ID, db.url[len("sqlite:///"):])
        else:
            airflow_env.postgres_connection(CONN_ID)
        made = fill_queues(db.transport, db.q)
        now = datetime.now(timezone.utc)
        for minutes, depth in ((30, 1), (20, 4), (10, 3)):
            record_samples(db.transport, [{"conn_id": CONN_ID, "queue": db.transport.name(db.q("orders")),
                                           "depth": depth, "oldest_age_seconds": 60.0}],
                           db.q(SAMPLES), now=now - timedelta(minutes=minutes))
        variable(config_for(db))
        yield db, made


def overview(client: Any, role: str = "viewer") -> dict[str, Any]:
    response = client.get(f"{PREFIX}/api/overview", headers=as_user(role))
    assert response.status_code == 200, response.text
    return response.json()


def queues_of(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    (conn,) = [c for c in data["connections"] if c["conn_id"] == CONN_ID]
    assert conn["error"] is None, conn["error"]
    return {q["queue"]: q for q in conn["queues"]}


def chosen(rows: Any) -> dict[str, Any]:
    """The request body selecting these error-queue rows (by position and Id, as the page sends it)."""
    return {"messages": [{"seq": r.seq, "id": str(r.id)} for r in rows]}


def post(client: Any, path: str, role: str, body: Any) -> Any:
    return client.post(f"{PREFIX}/api/connections/{CONN_ID}/failed/{path}", headers=as_user(role), json=body)


# -- listings -------------------------------------------------------------------------------------------------
def test_overview_lists_every_queue_with_depth_age_net_flow_and_breaches(client: Any, filled: Any) -> None:
    db, _ = filled
    name = db.transport.name
    queues = queues_of(overview(client))
    assert set(queues) == {name(db.q(t)) for t in ("orders", "billing", "invoices", "error")}
    orders, billing = queues[name(db.q("orders"))], queues[name(db.q("billing"))]
    assert orders["depth"] == 3 and 7000 < orders["oldest_age_seconds"] < 7400
    assert orders["breaches"] == ["depth 3 > 2", f"oldest message {orders['oldest_age_seconds']:.0f}s old > 3600s"]
    assert orders["thresholds"] == {"max_depth": 2, "max_age_seconds": 3600}
    assert orders["net_flow_per_minute"] == 0.0  # latest sample 3, 10 minutes ago; 3 now
    assert billing["depth"] == 1 and billing["breaches"] == [] and billing["net_flow_per_minute"] is None
    error = queues[name(db.q("error"))]
    assert error["is_error_queue"] and error["depth"] == 3 and error["depth_exact"]
    assert queues[name(db.q("invoices"))]["depth"] == 0


def test_history_gives_the_recorded_depths_oldest_first(client: Any, filled: Any) -> None:
    db, _ = filled
    response = client.get(f"{PREFIX}/api/connections/{CONN_ID}/history", params={"queue": db.q("orders")},
                          headers=as_user("viewer"))
    assert response.status_code == 200, response.text
    data = response.json()
    assert [s["depth"] for s in data["samples"]] == [1, 4, 3]
    times = [datetime.fromisoformat(s["sampled_at"]) for s in data["samples"]]
    assert times == sorted(times) and times[-1] > datetime.now(timezone.utc) - timedelta(minutes=11)
    assert data["net_flow_per_minute"] == -0.1
    short = client.get(f"{PREFIX}/api/connections/{CONN_ID}/history", headers=as_user("viewer"),
                       params={"queue": db.q("orders"), "hours": 0.25}).json()
    assert [s["depth"] for s in short["samples"]] == [3]
    none = client.get(f"{PREFIX}/api/connections/{CONN_ID}/history", params={"queue": db.q("billing")},
                      headers=as_user("viewer")).json()
    assert none["samples"] == [] and none["net_flow_per_minute"] is None


def test_failed_messages_are_grouped_by_source_queue_and_exception_with_headers_and_body(
        client: Any, filled: Any) -> None:
    db, made = filled
    base = f"{PREFIX}/api/connections/{CONN_ID}/failed"
    response = client.get(f"{base}/groups", params={"by": "all"}, headers=as_user("viewer"))
    assert response.status_code == 200, response.text
    data = response.json()
    assert data["total"] == data["grouped"] == 3 and data["error_queue"] == db.transport.name(db.q("error"))
    assert data["can_edit"] is False  # a viewer
    invoices = db.transport.name(db.q("invoices"))  # the page's one name, whatever spelling FailedQ has
    assert [(g["failed_q"], g["exception_type"], g["message_type"], g["count"]) for g in data["groups"]] == [
        (invoices, "TimeoutError", "Billing.Invoice", 2), (invoices, f"{__name__}.Boom", "Billing.Invoice", 1)]
    by_type = client.get(f"{base}/groups", params={"by": "message_type"}, headers=as_user("viewer")).json()
    assert [(g["message_type"], g["count"]) for g in by_type["groups"]] == [("Billing.Invoice", 3)]
    page = client.get(base, params={"exception_type": "TimeoutError"}, headers=as_user("viewer")).json()
    assert len(page["messages"]) == 2 and page["next_after"] is None
    message = page["messages"][0]
    assert message["headers"][h.ENCLOSED_MESSAGE_TYPES] == "Billing.Invoice"
    assert message["exception_message"] == "the ledger did not answer" and message["bad"] == []
    assert "\\n" not in message["stack_trace"] and message["stack_trace"].count("\n") >= 1  # real line breaks
    assert json.loads(message["body_preview"])["kind"] == "timeout" and not message["body_binary"]
    everything = client.get(base, headers=as_user("viewer")).json()["messages"]
    assert [(m["seq"], m["id"]) for m in everything] == [(r.seq, str(r.id)) for r in made["failed"]]
    first = client.get(base, params={"limit": 2}, headers=as_user("viewer")).json()
    second = client.get(base, params={"limit": 2, "after": first["next_after"]}, headers=as_user("viewer")).json()
    assert [m["id"] for m in first["messages"] + second["messages"]] == [str(r.id) for r in made["failed"]]
    found = client.get(base, params={"search": "bad invoice"}, headers=as_user("viewer")).json()["messages"]
    assert [m["exception_type"] for m in found] == [f"{__name__}.Boom"]


def test_a_configured_queue_without_a_table_is_shown_as_missing(client: Any, filled: Any,
                                                                variable: Callable[[dict[str, Any]], None]) -> None:
    db, _ = filled
    config = config_for(db)
    config["connections"][CONN_ID]["queues"] = {db.q("orders"): {"max_depth": 10}, db.q("ghost"): {}}
    variable(config)
    queues = queues_of(overview(client))
    orders, ghost = queues[db.transport.name(db.q("orders"))], queues[db.transport.name(db.q("ghost"))]
    assert list(queues) == [db.transport.name(db.q("orders")), db.transport.name(db.q("ghost"))]
    assert orders["thresholds"]["max_depth"] == 10 and orders["breaches"] == [
        f"oldest message {orders['oldest_age_seconds']:.0f}s old > 3600s"]
    assert ghost["exists"] is False and ghost["depth"] is None and ghost["breaches"] == ["queue table does not exist"]

# -- actions --------------------------------------------------------------------------------------------------
def test_retry_returns_the_selected_message_to_its_queue_and_is_audited(client: Any, filled: Any) -> None:
    db, made = filled
    chosen = made["failed"][0]
    response = post(client, "retry", "op", {"messages": [{"seq": chosen.seq, "id": str(chosen.id)}]})
    assert response.status_code == 200, response.text
    assert response.json()["total_returned"] == 1
    assert response.json()["returned"] == {db.transport.name(db.q("invoices")): 1}
    back = db.transport.browse(db.q("invoices"))
    assert [(r.id, r.body) for r in back] == [(chosen.id, chosen.body)]
    assert h.FAILED_Q not in h.parse_headers(back[0].headers)
    assert str(chosen.id) not in {str(r.id) for r in db.transport.browse(db.q("error"))}
    assert len(db.transport.browse(db.q("error"))) == 2
    entry = last_audit("sqlqueue.retry_failed_messages")
    again = post(client, "retry", "op", {"messages": [{"seq": chosen.seq, "id": str(chosen.id)}]})
    assert again.status_code == 404 and "already retried or deleted" in again.json()["detail"]
    assert entry.owner == "op" and str(chosen.id) in entry.extra and CONN_ID in entry.extra


def test_a_retry_onto_an_id_its_queue_holds_is_refused_and_loses_nothing(client: Any, filled: Any) -> None:
    """A row with the failed message's Id arrived in its queue: the retry (all or none) is a 409 naming it, and
    both rows stay where they are."""
    db, made = filled
    chosen = made["failed"][0]
    db.transport.run(lambda cur: db.transport.book.queue(db.q("invoices")).put(cur, chosen.id, "{}", b"waiting"))
    before = {q: sorted((str(r.id), r.body) for r in db.transport.browse(db.q(q))) for q in ("invoices", "error")}
    response = post(client, "retry", "op", {"messages": [{"seq": chosen.seq, "id": str(chosen.id)}]})
    assert response.status_code == 409 and "already in" in response.json()["detail"], response.text
    assert {q: sorted((str(r.id), r.body) for r in db.transport.browse(db.q(q)))
            for q in ("invoices", "error")} == before


def test_a_retry_to_a_queue_outside_the_configuration_is_refused(client: Any, filled: Any) -> None:
    """FailedQ names the error queue itself, or (PostgreSQL) the same table name in a schema the configuration
    does not cover: each retry is a 409 with the reason, and nothing moves."""
    db, _ = filled
    t = db.transport
    hostile = {t.wire_address(db.q("error")): "is the error queue itself"}
    if db.kind == "postgres":
        hostile['"public"."invoices"'] = "not one of the queues a retry may write to"
    ids = t.send_many(db.q("error"), [OutgoingMessage(b"x", {h.FAILED_Q: target}) for target in hostile])
    before = sorted(str(r.id) for r in t.browse(db.q("error")))
    for native_id, reason in zip(ids, hostile.values(), strict=True):
        [row] = [r for r in t.browse(db.q("error")) if r.id == native_id]
        response = post(client, "retry", "op", {"messages": [{"seq": row.seq, "id": str(row.id)}]})
        assert response.status_code == 409 and reason in response.json()["detail"], response.text
    assert sorted(str(r.id) for r in t.browse(db.q("error"))) == before


def test_delete_removes_exactly_the_selected_messages_and_is_audited(client: Any, filled: Any) -> None:
    db, made = filled
    picked = [str(r.id) for r in made["failed"][:2]]
    response = post(client, "delete", "admin", chosen(made["failed"][:2]))
    assert response.status_code == 200, response.text
    assert response.json()["deleted"] == 2
    left = db.transport.browse(db.q("error"))
    assert [str(r.id) for r in left] == [str(made["failed"][2].id)]
    assert db.transport.peek(db.q("invoices")) == 0
    entry = last_audit("sqlqueue.delete_failed_messages")
    assert entry.owner == "admin" and all(i in entry.extra for i in picked)


def last_audit(event: str) -> Any:
    from airflow.models.log import Log
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        entry = session.scalars(select(Log).where(Log.event == event).order_by(Log.id.desc()).limit(1)).first()
        assert entry is not None, f"no audit log entry {event!r}"
        session.expunge(entry)
        return entry


# -- bad input changes nothing --------------------------------------------------------------------------------
@pytest.mark.parametrize("extra, status", [
    (None, 422), ({"seq": "x", "id": "a"}, 422), ({"seq": 0, "id": "a"}, 422), ({"id": "a"}, 422),
    ({"seq": 1, "id": ""}, 422), ({"seq": 999999, "id": "00000000-0000-0000-0000-000000000001"}, 404),
    ({"seq": 1, "id": "00000000-0000-0000-0000-000000000001"}, 404)])
def test_bad_selections_are_refused_and_change_nothing(client: Any, filled: Any, extra: Any, status: int) -> None:
    db, made = filled
    real = {"seq": made["failed"][0].seq, "id": str(made["failed"][0].id)}
    for action in ("retry", "delete"):
        body = {"messages": []} if extra is None else {"messages": [real, extra]}
        response = post(client, action, "op", body)
        assert response.status_code == status, response.text
        if status == 404:
            assert "00000000-0000-0000-0000-000000000001" in response.json()["detail"]
    assert post(client, "retry", "op", {"ids": [real["id"]]}).status_code == 422  # the old shape: refused
    assert len(db.transport.browse(db.q("error"))) == 3 and db.transport.peek(db.q("invoices")) == 0


def test_unknown_connection_and_queue_get_clear_errors(client: Any, filled: Any) -> None:
    db, _ = filled
    viewer = as_user("viewer")
    response = client.get(f"{PREFIX}/api/connections/nope/failed", headers=viewer)
    assert response.status_code == 404 and "'nope' is not in the SQL queue configuration" in response.json()["detail"]
    response = client.get(f"{PREFIX}/api/connections/{CONN_ID}/history", params={"queue": db.q("ghost")},
                          headers=viewer)
    assert response.status_code == 404 and "is not among the queues" in response.json()["detail"]
    response = client.get(f"{PREFIX}/api/connections/{CONN_ID}/history", params={"queue": "a;b]]@@x"},
                          headers=viewer)
    assert response.status_code in (400, 404), response.text
    response = client.post(f"{PREFIX}/api/connections/nope/failed/retry", headers=as_user("op"),
                           json=chosen(db.transport.browse(db.q("error"))[:1]))
    assert response.status_code == 404
    assert len(db.transport.browse(db.q("error"))) == 3


# -- security -------------------------------------------------------------------------------------------------
def test_nothing_is_reachable_without_login(client: Any, filled: Any) -> None:
    db, _ = filled
    ids = chosen(db.transport.browse(db.q("error")))
    for path in ("/api/overview", f"/api/connections/{CONN_ID}/failed", f"/api/connections/{CONN_ID}/failed/groups",
                 f"/api/connections/{CONN_ID}/history?queue=orders"):
        assert client.get(PREFIX + path).status_code == 401, path
        bad = client.get(PREFIX + path, headers={"Authorization": "Bearer not.a.token"})
        assert bad.status_code in (401, 403), path
    for path in ("/", "/assets/dashboard.js"):  # pages send the browser to Airflow's login; other clients: 401
        page = client.get(PREFIX + path, follow_redirects=False, headers={"Accept": "text/html"})
        assert page.status_code == 303 and "login" in page.headers["location"], path
        assert client.get(PREFIX + path, follow_redirects=False).status_code == 401, path
    for action in ("retry", "delete"):
        assert client.post(f"{PREFIX}/api/connections/{CONN_ID}/failed/{action}", json=ids).status_code == 401
    assert len(db.transport.browse(db.q("error"))) == 3


@pytest.mark.parametrize("role", ["viewer", "user"])
def test_readers_may_look_but_not_retry_or_delete(client: Any, filled: Any, role: str) -> None:
    db, _ = filled
    ids = chosen(db.transport.browse(db.q("error")))
    assert overview(client, role)["connections"][0]["can_edit"] is False
    page = client.get(f"{PREFIX}/", headers=as_user(role))
    assert page.status_code == 200 and "SQL Queues" in page.text
    for action in ("retry", "delete"):
        response = post(client, action, role, ids)
        assert response.status_code == 403 and f"the '{action}' permission" in response.json()["detail"]
    assert len(db.transport.browse(db.q("error"))) == 3 and db.transport.peek(db.q("invoices")) == 0
    assert overview(client, "op")["connections"][0]["can_edit"] is True


def test_the_session_cookie_of_the_airflow_ui_is_accepted_and_form_posts_are_refused(
        client: Any, filled: Any) -> None:
    db, _ = filled
    client.cookies.set("_token", token("op"))
    try:
        assert client.get(f"{PREFIX}/api/overview").status_code == 200
        row = db.transport.browse(db.q("error"))[0]
        form = client.post(f"{PREFIX}/api/connections/{CONN_ID}/failed/delete",
                           data={"seq": row.seq, "id": str(row.id)})
        assert form.status_code in (415, 422), form.text
        assert len(db.transport.browse(db.q("error"))) == 3
    finally:
        client.cookies.clear()


def test_no_connection_field_reaches_the_browser(client: Any, airflow_db: None,  # noqa: F811
                                                 variable: Callable[[dict[str, Any]], None]) -> None:
    secret = "Sup3r-S3cret-pw"
    airflow_env.set_connection("sqlqueue_dash_secret", {
        **airflow_env.PG_CONNECTION, "login": "dash_no_such_role", "password": secret,
        "extra": {"sslmode": "disable", "application_name": "extra-secret"}})
    variable({"connections": {"sqlqueue_dash_secret": {}}})
    responses = [client.get(f"{PREFIX}/api/overview", headers=as_user("admin")),
                 client.get(f"{PREFIX}/api/connections/sqlqueue_dash_secret/failed", headers=as_user("admin")),
                 post_secret(client)]
    (conn,) = responses[0].json()["connections"]
    assert conn["conn_id"] == "sqlqueue_dash_secret" and "could not be used" in conn["error"]
    assert responses[1].status_code == 502
    for response in responses:
        for field in (secret, "dash_no_such_role", str(airflow_env.PG_CONNECTION["host"]),
                      str(airflow_env.PG_CONNECTION["port"]), "extra-secret", "sslmode"):
            assert field not in response.text, (field, response.text)


def post_secret(client: Any) -> Any:
    return client.post(f"{PREFIX}/api/connections/sqlqueue_dash_secret/failed/delete", headers=as_user("admin"),
                       json={"messages": [{"seq": 1, "id": "00000000-0000-0000-0000-000000000001"}]})


def test_the_plugin_adds_a_nav_view_and_mounts_its_app(client: Any) -> None:
    response = client.get("/api/v2/plugins", headers=as_user("admin"))
    assert response.status_code == 200, response.text
    (plugin,) = [p for p in response.json()["plugins"] if p["name"] == "sqlqueue_dashboard"]
    assert plugin["fastapi_apps"][0]["url_prefix"] == PREFIX
    (view,) = plugin["external_views"]
    assert view["href"] == "sqlqueue/" and view["url_route"] == "sql-queues" and view["destination"] == "nav"
    assert view["name"] == "Queues"  # short enough for the nav (it cut "SQL Queues" to "SQL Que...")
    icon = client.get(f"{PREFIX}/assets/icon.svg", headers=as_user("viewer"))
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")
    script = client.get(f"{PREFIX}/assets/dashboard.js", headers=as_user("viewer"))
    assert script.status_code == 200 and "loadOverview" in script.text


# -- the transport's delete -----------------------------------------------------------------------------------
def test_transport_deletes_messages_by_id_all_or_nothing(db: Db) -> None:
    db.transport.create_queues([db.q("error")])
    ids = db.transport.send_many(db.q("error"), [b"a", b"b", b"c"])
    unknown = "00000000-0000-0000-0000-000000000002"
    with pytest.raises(LookupError, match=unknown):
        db.transport.delete_messages(db.q("error"), [ids[0], unknown])
    with pytest.raises(ValueError):
        db.transport.delete_messages(db.q("error"), ["1; DROP TABLE error"])
    assert [r.id for r in db.transport.browse(db.q("error"))] == ids
    assert db.transport.delete_messages(db.q("error"), [ids[0], str(ids[2])]) == 2
    assert [r.id for r in db.transport.browse(db.q("error"))] == [ids[1]]


# -- edit and retry -------------------------------------------------------------------------------------------
def edit(client: Any, role: str, body: dict[str, Any]) -> Any:
    return client.post(f"{PREFIX}/api/connections/{CONN_ID}/failed/edit-retry", headers=as_user(role), json=body)


def test_edit_and_retry_is_off_unless_enabled_and_refuses_protected_headers(
        client: Any, filled: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    db, made = filled
    original = made["failed"][0]
    where = {"seq": original.seq, "id": str(original.id)}
    off = edit(client, "op", {**where, "body": '{"kind": "fixed"}'})
    assert off.status_code == 403 and "dashboard_edit_retry" in off.json()["detail"]
    monkeypatch.setenv("AIRFLOW__SQLQUEUE__DASHBOARD_EDIT_RETRY", "True")
    assert edit(client, "viewer", {**where, "body": "{}"}).status_code == 403  # still needs edit rights
    stored = h.parse_headers(original.headers)
    kept = {k: v for k, v in stored.items() if k not in h.FAILURE_HEADERS}
    for changed in ({**kept, h.MESSAGE_ID: "mine"}, {**kept, h.FORWARD_DESTINATION: "elsewhere"},
                    {**kept, h.FAILED_Q: "elsewhere"}):
        refused = edit(client, "op", {**where, "headers": changed})
        assert refused.status_code == 400 and "may not be edited" in refused.json()["detail"], refused.text
    bad_json = edit(client, "op", {**where, "headers": {**kept, h.CONTENT_TYPE: "application/json"}, "body": "{x"})
    assert bad_json.status_code == 400 and "not valid JSON" in bad_json.json()["detail"]
    assert len(db.transport.browse(db.q("error"))) == 3 and db.transport.peek(db.q("invoices")) == 0

    done = edit(client, "op", {**where, "headers": {**kept, "Tenant": "acme"}, "body": '{"kind": "fixed", "n": 0}'})
    assert done.status_code == 200, done.text
    (copy,) = db.transport.browse(db.q("invoices"))
    headers = h.parse_headers(copy.headers)
    assert copy.body == b'{"kind": "fixed", "n": 0}' and headers["Tenant"] == "acme"
    assert str(copy.id) == done.json()["id"] != str(original.id) and headers[h.MESSAGE_ID] == str(copy.id)
    assert headers["airflow_sqlqueue.EditOf"] == (stored.get(h.MESSAGE_ID) or str(original.id))
    assert h.FAILED_Q not in headers
    assert str(original.id) not in {str(r.id) for r in db.transport.browse(db.q("error"))}
    entry = last_audit("sqlqueue.edit_retry_failed_message")
    assert entry.owner == "op" and str(original.id) in entry.extra
