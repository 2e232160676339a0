# ruff: noqa: F811  (pytest fixtures imported from tests.test_dashboard_api are parameters here)
"""The error workbench of the "SQL Queues" page as an operator meets it (issue 31), through the real API server
app on SQLite and PostgreSQL: client mistakes answered 4xx with the reason, the "(none)" group, search as
displayed, one name per queue, no server path in any text, the overview's figures agreeing."""

from __future__ import annotations  # noqa: I001  (tests.airflow_env must be imported before airflow)

import tests.airflow_env  # noqa: F401
from tests.airflow_env import airflow_db  # noqa: F401  (fixture)

import json
import uuid
from pathlib import Path
from urllib.parse import quote
from typing import Any

import pytest
from sqlalchemy import select

from airflow_sqlqueue.transport.wire import headers as h
from tests.test_dashboard_api import (  # noqa: F401  (fixtures)
    CONN_ID,
    PREFIX,
    app,
    as_user,
    chosen,
    client,
    config_for,
    filled,
    post,
    variable,
)
from tests.test_dashboard_hostile import insert_rows

FAILED = f"{PREFIX}/api/connections/{CONN_ID}/failed"
ARCHIVES = f"{PREFIX}/api/connections/{CONN_ID}/archives"
BATCH = f"{PREFIX}/api/connections/{CONN_ID}/batch-retries"
DAG_ID = "sqlqueue_error_queue_batch_retry"


# -- client mistakes are 4xx with the reason, never 5xx; nothing changes -------------------------------------
@pytest.mark.parametrize("days", ["NaN", "Infinity", "1e400", "-1e400"])
def test_archive_older_than_days_that_is_not_a_number_of_days_is_refused(
        client: Any, filled: Any, variable: Any, tmp_path: Path, days: str) -> None:
    db, _ = filled
    variable({**config_for(db), "archive": {"location": str(tmp_path / "archive"), "older_than_days": 30}})
    response = client.post(ARCHIVES, headers={**as_user("op"), "Content-Type": "application/json"},
                           content=f'{{"older_than_days": {days}}}')
    assert response.status_code == 422, response.text
    assert "older_than_days" in response.text
    assert db.transport.count(db.q("error")) == 3


def test_a_nul_character_in_any_text_is_refused(client: Any, filled: Any) -> None:
    db, made = filled
    viewer = as_user("viewer")
    for params in ({"search": "a\x00b"}, {"exception_type": "Time\x00out"}, {"failed_q": "x\x00"},
                   {"message_type": "\x00"}):
        response = client.get(FAILED, params=params, headers=viewer)
        assert response.status_code == 422 and "NUL" in response.text, (params, response.text)
    row = made["failed"][0]
    for body in ({"messages": [{"seq": row.seq, "id": "a\x00b"}]},):
        for action in ("retry", "delete"):
            response = post(client, action, "op", body)
            assert response.status_code == 422 and "NUL" in response.text, response.text
    cancel = client.post(f"{PREFIX}/api/connections/{CONN_ID}/batch-retries/cancel", headers=as_user("op"),
                         json={"run_id": "run\x00"})
    assert cancel.status_code == 422 and "NUL" in cancel.text, cancel.text
    assert db.transport.count(db.q("error")) == 3


@pytest.mark.parametrize("after", [2**63, 2**64, 10**30])
def test_a_position_past_the_largest_is_refused(client: Any, filled: Any, after: int) -> None:
    response = client.get(FAILED, params={"after": after}, headers=as_user("viewer"))
    assert response.status_code == 422 and "after" in response.text, response.text
    db, made = filled
    for seq in (2**63, 2**64):
        refused = post(client, "retry", "op", {"messages": [{"seq": seq, "id": str(made["failed"][0].id)}]})
        assert refused.status_code == 422, refused.text
    assert db.transport.count(db.q("error")) == 3


def test_edit_and_retry_of_json_nested_too_deep_is_refused_with_the_bound(
        client: Any, filled: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__SQLQUEUE__DASHBOARD_EDIT_RETRY", "True")
    db, made = filled
    row = made["failed"][0]
    headers = {k: v for k, v in json.loads(row.headers).items() if k not in h.FAILURE_HEADERS}
    headers[h.CONTENT_TYPE] = "application/json"
    for depth in (1900, 100_000):
        body = "[" * depth + "]" * depth
        response = client.post(f"{FAILED}/edit-retry", headers=as_user("op"),
                               json={"seq": row.seq, "id": str(row.id), "headers": headers, "body": body})
        assert response.status_code == 400, response.text
        assert "more than 200 levels deep" in response.json()["detail"], response.text
    assert db.transport.count(db.q("error")) == 3 and db.transport.count(db.q("invoices")) == 0
    fine = client.post(f"{FAILED}/edit-retry", headers=as_user("op"),
                       json={"seq": row.seq, "id": str(row.id), "headers": headers, "body": "[" * 50 + "]" * 50})
    assert fine.status_code == 200, fine.text
    assert db.transport.count(db.q("invoices")) == 1


# -- batched retries: bounds, a paused DAG ------------------------------------------------------------------
@pytest.mark.parametrize("rate", [1e-9, 0.001, 1e300])
def test_an_absurd_rate_is_refused_with_the_bounds(client: Any, filled: Any, rate: float) -> None:
    refused = client.post(BATCH, json={"rate_per_second": rate}, headers=as_user("op"))
    assert refused.status_code == 400, refused.text
    assert "from 0.01 (one every 100 s) to 1,000,000" in refused.json()["detail"]


def test_a_batched_retry_on_a_paused_dag_unpauses_it_or_says_why_it_waits(client: Any, filled: Any) -> None:
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session
    from sqlalchemy import update

    from tests.test_dashboard_batch_api import audit_rows, deploy_batch_retry_dag

    deploy_batch_retry_dag()
    with create_session() as session:  # as Airflow leaves a DAG it has just found
        session.execute(update(DagModel).where(DagModel.dag_id == DAG_ID).values(is_paused=True))
    started = client.post(BATCH, json={"exception_type": "TimeoutError"}, headers=as_user("op"))
    assert started.status_code == 200, started.text
    run_id = started.json()["run_id"]
    assert started.json()["unpaused_dag"] is True and started.json()["hint"] is None
    assert started.json()["run_path"] == f"dags/{DAG_ID}/runs/{quote(run_id, safe='')}"
    with create_session() as session:
        assert session.scalars(select(DagModel.is_paused).where(DagModel.dag_id == DAG_ID)).one() is False
    assert any(extra["run_id"] == run_id and extra["unpaused_dag"] for _, extra in
               audit_rows("sqlqueue.batch_retry_started"))

    with create_session() as session:  # paused again by someone: the queued run says why it waits
        session.execute(update(DagModel).where(DagModel.dag_id == DAG_ID).values(is_paused=True))
    (run,) = [r for r in client.get(BATCH, headers=as_user("viewer")).json()["runs"] if r["run_id"] == run_id]
    assert run["state"] == "queued" and "is paused" in run["hint"] and "unpause" in run["hint"]
    assert run["run_path"] == started.json()["run_path"]


# -- the "(none)" group ------------------------------------------------------------------------------------
def test_the_none_group_lists_only_messages_without_that_field_and_never_widens(client: Any, filled: Any) -> None:
    db, made = filled
    invoices = db.transport.name(db.q("invoices"))
    insert_rows(db, db.q("error"), [
        (str(uuid.uuid4()), json.dumps({h.FAILED_Q: invoices, h.ENCLOSED_MESSAGE_TYPES: "Billing.Invoice"}), b"1"),
        (str(uuid.uuid4()), json.dumps({h.FAILED_Q: invoices, h.EXCEPTION_TYPE: ""}), b"2")])
    viewer = as_user("viewer")
    groups = client.get(f"{FAILED}/groups", params={"by": "exception_type"}, headers=viewer).json()["groups"]
    (none,) = [g for g in groups if g["exception_type"] is None]  # absent and empty: one group
    assert none["count"] == 2 and none["filter"] == {"missing": ["exception_type"]}
    for group in groups:  # each group's filter lists exactly its messages
        params = {k: v for k, v in group["filter"].items() if k != "missing"} | {"missing": group["filter"]["missing"]}
        listed = client.get(FAILED, params=params, headers=viewer)
        assert listed.status_code == 200, listed.text
        assert len(listed.json()["messages"]) == group["count"], (group, listed.json()["messages"])
    listed = client.get(FAILED, params={"missing": "exception_type"}, headers=viewer).json()["messages"]
    assert sorted(m["body_preview"] for m in listed) == ["1", "2"]
    bad = client.get(FAILED, params={"missing": "body"}, headers=viewer)
    assert bad.status_code == 422, bad.text
    both = client.get(FAILED, params={"missing": "exception_type", "exception_type": "X"}, headers=viewer)
    assert both.status_code == 400 and "match nothing" in both.json()["detail"], both.text

    # the batched retry of that group is that group's, not the whole error queue
    from tests.test_dashboard_batch_api import deploy_batch_retry_dag

    deploy_batch_retry_dag()
    started = client.post(BATCH, json={"missing": ["exception_type"]}, headers=as_user("op"))
    assert started.status_code == 200, started.text
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        conf = session.scalars(select(DagRun.conf).where(DagRun.run_id == started.json()["run_id"])).one()
    assert conf["missing"] == ["exception_type"] and conf["exception_type"] is None
    assert db.transport.count(db.q("error")) == len(made["failed"]) + 2


# -- search what is displayed -------------------------------------------------------------------------------
def test_search_finds_header_text_as_the_page_displays_it(client: Any, filled: Any) -> None:
    db, made = filled
    invoices = db.transport.name(db.q("invoices"))
    shown = {h.FAILED_Q: invoices, h.CONTENT_TYPE: "application/json", "Note": 'say "hi" in Zürich \u2028 ok',
             "Path": "C:\\jobs\\run"}
    insert_rows(db, db.q("error"), [(str(uuid.uuid4()), h.serialize_headers(shown), b"wire"),
                                    (str(uuid.uuid4()), json.dumps(shown), b"python")])
    stored = [r.headers for r in db.transport.browse(db.q("error"))[-2:]]
    assert "application\\/json" in stored[0] and "\\u00fc" in stored[1]  # as JSON writers store them
    viewer = as_user("viewer")
    for text in ("application/json", 'say "hi"', "Zürich", "C:\\jobs\\run", "\u2028"):
        listed = client.get(FAILED, params={"search": text}, headers=viewer)
        assert listed.status_code == 200, listed.text
        assert sorted(m["body_preview"] for m in listed.json()["messages"]) == ["python", "wire"], text
    assert client.get(FAILED, params={"search": "application/xml"}, headers=viewer).json()["messages"] == []
    assert len(made["failed"]) == 3


# -- one name per queue -------------------------------------------------------------------------------------
def test_one_queue_in_three_spellings_is_one_group_one_name_and_one_redirect(client: Any, filled: Any) -> None:
    db, made = filled
    if db.kind != "postgres":
        pytest.skip("a SQLite table has one spelling")
    schema = db.schema
    spellings = [f'"{schema}"."invoices"', f"{schema}.invoices", f'"{schema}".invoices']
    insert_rows(db, db.q("error"), [(str(uuid.uuid4()), json.dumps({h.FAILED_Q: s, h.EXCEPTION_TYPE: "Boom"}),
                                     s.encode()) for s in spellings])
    viewer = as_user("viewer")
    one = f"{schema}.invoices"
    groups = client.get(f"{FAILED}/groups", params={"by": "failed_q"}, headers=viewer).json()["groups"]
    assert [(g["failed_q"], g["count"]) for g in groups] == [(one, 6)]
    listed = client.get(FAILED, params={"failed_q": groups[0]["filter"]["failed_q"]}, headers=viewer).json()
    assert len(listed["messages"]) == 6 and {m["failed_q"] for m in listed["messages"]} == {one}
    for spelling in spellings:  # any spelling filters to the same six
        same = client.get(FAILED, params={"failed_q": spelling}, headers=viewer).json()["messages"]
        assert len(same) == 6, spelling
    paged = client.get(FAILED, params={"failed_q": one, "limit": 4}, headers=viewer).json()
    rest = client.get(FAILED, params={"failed_q": one, "after": paged["next_after"]}, headers=viewer).json()
    assert [m["seq"] for m in paged["messages"] + rest["messages"]] == sorted(m["seq"] for m in listed["messages"])

    overview = client.get(f"{PREFIX}/api/overview", headers=viewer).json()
    (conn,) = [c for c in overview["connections"] if c["conn_id"] == CONN_ID]
    assert one in [q["queue"] for q in conn["queues"]] and conn["error_queue"] == f"{schema}.error"
    history = client.get(f"{PREFIX}/api/connections/{CONN_ID}/history", params={"queue": f'"{schema}"."orders"'},
                         headers=viewer)
    assert history.status_code == 200 and history.json()["queue"] == f"{schema}.orders", history.text
    assert [s["depth"] for s in history.json()["samples"]] == [1, 4, 3]

    targets = client.get(BATCH, headers=viewer).json()
    assert one in targets["queues"] and targets["error_queue"] == f"{schema}.error"
    from tests.test_dashboard_batch_api import deploy_batch_retry_dag

    deploy_batch_retry_dag()
    started = client.post(BATCH, json={"failed_q": one, "redirects": {f'"{schema}".invoices': f'"{schema}"."billing"'}},
                          headers=as_user("op"))
    assert started.status_code == 200, started.text
    assert db.transport.count(db.q("error")) == len(made["failed"]) + 3


# -- no server path in any text -----------------------------------------------------------------------------
def test_no_status_line_or_error_shows_a_server_path(client: Any, filled: Any, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.models import Variable

    db, _ = filled
    location = tmp_path / "secret-archive-dir"
    config_file = tmp_path / "secret-config-dir" / "maintenance.json"
    config_file.parent.mkdir()
    config_file.write_text(json.dumps({**config_for(db), "archive": {"location": str(location)}}))
    Variable.delete("sqlqueue_maintenance")  # the file is the configuration
    monkeypatch.setenv("SQLQUEUE_MAINTENANCE_CONFIG", str(config_file))
    viewer, op = as_user("viewer"), as_user("op")
    texts = []
    overview = client.get(f"{PREFIX}/api/overview", headers=viewer)
    assert overview.status_code == 200, overview.text
    assert "configuration file" in overview.json()["source"]
    texts.append(overview.text)
    unknown = client.get(f"{PREFIX}/api/connections/nope/failed", headers=viewer)
    assert unknown.status_code == 404 and "configuration file" in unknown.json()["detail"], unknown.text
    texts.append(unknown.text)
    missing = client.get(f"{ARCHIVES}/no-such-archive", headers=viewer)
    assert 400 <= missing.status_code < 500, missing.text
    texts.append(missing.text)
    restore = client.post(f"{ARCHIVES}/no-such-archive/restore", headers=op, json={"ids": None})
    assert 400 <= restore.status_code < 500, restore.text
    texts.append(restore.text)
    config_file.write_text("{ not JSON")
    broken = client.get(f"{PREFIX}/api/overview", headers=viewer)
    assert broken.status_code == 500 and "configuration file" in broken.json()["detail"], broken.text
    texts.append(broken.text)
    for text in texts:
        assert str(tmp_path) not in text and "secret-" not in text, text


# -- the overview agrees with itself ------------------------------------------------------------------------
def test_the_overviews_sent_per_minute_and_net_flow_are_measured_over_one_window(client: Any, filled: Any) -> None:
    """A queue that grew by 200 in the two minutes before its latest sample (10 s ago), nothing since: net flow
    +100/min, and sent /min over the same two minutes, 100 (it was 0.00 beside +100, from the last 10 s)."""
    from datetime import datetime, timedelta, timezone

    from airflow_sqlqueue.maintenance.health import record_samples, sample

    db, _ = filled
    billing = db.transport.name(db.q("billing"))
    measured = sample(db.transport, db.q("billing"))
    now = datetime.now(timezone.utc)
    for seconds, depth, seq in ((130, measured["depth"] - 200, measured["newest_seq"] - 200),
                                (10, measured["depth"], measured["newest_seq"])):
        record_samples(db.transport, [{"conn_id": CONN_ID, "queue": billing, "depth": depth,
                                       "oldest_age_seconds": 1.0, "newest_seq": seq}],
                       db.q("dash_samples"), now=now - timedelta(seconds=seconds))
    overview = client.get(f"{PREFIX}/api/overview", headers=as_user("viewer")).json()
    (conn,) = [c for c in overview["connections"] if c["conn_id"] == CONN_ID]
    (row,) = [q for q in conn["queues"] if q["queue"] == billing]
    assert row["net_flow_per_minute"] == 100.0
    assert row["throughput_per_minute"] == 100.0 >= row["net_flow_per_minute"]


# -- what the list flags is what a retry refuses ------------------------------------------------------------
def test_sqlite_rows_with_binary_headers_are_flagged_as_retry_refuses_them(client: Any, filled: Any) -> None:
    db, _ = filled
    if db.kind != "sqlite":
        pytest.skip("only SQLite stores headers with a type of their own")
    invoices = db.transport.name(db.q("invoices"))
    headers = json.dumps({h.FAILED_Q: invoices, h.EXCEPTION_TYPE: "BlobHeaders"})
    insert_rows(db, db.q("error"), [(str(uuid.uuid4()), headers.encode(), b"blob")])  # valid JSON, stored as a BLOB
    listed = client.get(FAILED, headers=as_user("viewer")).json()
    (message,) = [m for m in listed["messages"] if m["body_preview"] == "blob"]
    assert any("stored as binary" in reason and "refuses" in reason for reason in message["bad"]), message["bad"]
    refused = post(client, "retry", "op", {"messages": [{"seq": message["seq"], "id": message["id"]}]})
    assert refused.status_code == 409 and "not text" in refused.json()["detail"], refused.text
    good = client.get(FAILED, params={"exception_type": "TimeoutError"}, headers=as_user("viewer")).json()
    assert all(m["bad"] == [] for m in good["messages"])


def test_an_archive_of_the_none_group_records_the_filter_as_asked(client: Any, filled: Any, variable: Any,
                                                                   tmp_path: Path) -> None:
    db, _ = filled
    variable({**config_for(db), "archive": {"location": str(tmp_path / "archive"), "older_than_days": 30}})
    invoices = db.transport.name(db.q("invoices"))
    insert_rows(db, db.q("error"), [(str(uuid.uuid4()), h.serialize_headers({h.FAILED_Q: invoices,
                                                                             h.CONTENT_TYPE: "application/json"}),
                                     b"untyped")])
    done = client.post(ARCHIVES, headers=as_user("op"), json={"missing": ["exception_type"],
                                                              "search": "application/json"})
    assert done.status_code == 200 and done.json()["deleted"] == 1, done.text
    assert done.json()["selection"]["filter"] == {"search": "application/json", "missing": ["exception_type"]}
    assert db.transport.count(db.q("error")) == 3  # the three typed failures stay
