# ruff: noqa: F811  (pytest fixtures imported from tests.test_dashboard_api are parameters here)
"""The error-queue browser on a hostile error queue (issue 14): bad rows, huge rows, a million rows, foreign targets.

Through the real Airflow API server app as in :mod:`tests.test_dashboard_api` (same fixtures), on SQLite and
PostgreSQL. Rows are written straight into the tables, as another program would.
"""

from __future__ import annotations  # noqa: I001  (tests.airflow_env must be imported before airflow)

import tests.airflow_env  # noqa: F401
from tests.airflow_env import airflow_db  # noqa: F401  (fixture)

import base64
import gc
import json
import os
import tracemalloc
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from airflow_sqlqueue.transport.errorqueue.previews import FailedFilter

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
    queues_of,
    variable,
)

FAILED = f"{PREFIX}/api/connections/{CONN_ID}/failed"


def insert_rows(db: Any, queue: str, rows: list[tuple[Any, Any, Any]]) -> None:
    """Write (id, headers, body) rows as they are, with the dialect's ``insert_raw`` (no check, no conversion)."""
    transport = db.transport
    ids = transport.book.queue(queue).ids

    def work(cur: Any) -> None:
        for row_id, headers, body in rows:
            transport.dialect.execute(cur, "insert_raw", {"id": row_id, "headers": headers, "body": body}, **ids)

    transport.run(work, what="insert hostile rows")


def hostile_rows(db: Any) -> list[tuple[Any, Any, Any]]:
    """Rows a careless or hostile sender leaves in an error queue; SQLite adds the loose-type ones."""
    invoices = db.transport.name(db.q("invoices"))
    new = lambda: str(uuid.uuid4())  # noqa: E731
    rows = [
        (new(), '{"NServiceBus.FailedQ":"inv\\ud800","NServiceBus.ExceptionInfo.ExceptionType":"Lone\\udfff"}', b"s"),
        (new(), "this is not JSON {", b"not json"),
        (new(), "[" * 5000 + "]" * 5000, b"deep"),
        (new(), '{"a":' * 2000 + "1" + "}" * 2000, b"deep object"),
        (new(), '"a JSON string"', None),
        (new(), json.dumps({h.FAILED_Q: invoices, h.EXCEPTION_TYPE: "Html",
                            h.EXCEPTION_MESSAGE: "<script>alert(1)</script>\u0000\u001b[31m\u202e"}), os.urandom(300)),
    ]
    if db.kind == "sqlite":
        rows += [("not-a-uuid", json.dumps({h.FAILED_Q: invoices, h.EXCEPTION_TYPE: "LooseId"}), b"x"),
                 (42, json.dumps({h.FAILED_Q: invoices}), "a TEXT body"),
                 (new(), b"\xff\xfe{binary headers", 7),
                 (new(), 5, b"integer headers")]
    return rows


def test_bad_rows_show_as_bad_and_break_neither_the_page_nor_the_overview(client: Any, filled: Any) -> None:
    db, made = filled
    bad = hostile_rows(db)
    insert_rows(db, db.q("error"), bad)
    total = len(bad) + len(made["failed"])
    viewer = as_user("viewer")
    page = client.get(FAILED, params={"limit": 100}, headers=viewer)
    assert page.status_code == 200, page.text
    listed = page.json()["messages"]
    assert len(listed) == total
    by_seq = {m["seq"]: m for m in listed}
    good = {r.seq for r in made["failed"]}
    assert all(not by_seq[s]["bad"] for s in good)
    flagged = [m for m in listed if m["seq"] not in good and m["bad"]]
    # every hostile row is flagged but the one with a well-formed header and an HTML message (shown as text)
    assert len(flagged) == len(bad) - 1, [(m["seq"], m["bad"]) for m in listed]
    html = next(m for m in listed if m["exception_type"] == "Html")
    assert html["exception_message"].startswith("<script>") and html["body_binary"] is True
    groups = client.get(f"{FAILED}/groups", params={"by": "all"}, headers=viewer)
    assert groups.status_code == 200, groups.text
    assert groups.json()["total"] == groups.json()["grouped"] == total
    error = queues_of(client.get(f"{PREFIX}/api/overview", headers=viewer).json())[db.transport.name(db.q("error"))]
    assert error["depth"] == total and error["breaches"] != [] and "could not" not in " ".join(error["breaches"])

    # the good messages still go back; a hostile row is refused with its reason; nothing else moves
    assert post(client, "retry", "op", chosen(made["failed"][:1])).status_code == 200
    surrogate = next(m for m in listed if m["exception_type"] and m["exception_type"].startswith("Lone"))
    refused = post(client, "retry", "op", {"messages": [{"seq": surrogate["seq"], "id": surrogate["id"]}]})
    assert refused.status_code == 409 and "invalid Unicode" in refused.json()["detail"], refused.text
    for message in flagged:  # each bad row can be deleted, whatever its Id holds
        response = post(client, "delete", "op", {"messages": [{"seq": message["seq"], "id": message["id"]}]})
        assert response.status_code == 200 and response.json()["deleted"] == 1, (message, response.text)
    assert db.transport.count(db.q("error")) == total - 1 - len(flagged)
    assert db.transport.count(db.q("invoices")) == 1


def test_return_selected_writes_only_to_queues_of_the_configuration(
        client: Any, filled: Any, variable: Callable[[dict[str, Any]], None]) -> None:
    db, made = filled
    name = db.transport.name
    config = config_for(db)
    config["connections"][CONN_ID]["queues"] = {db.q("invoices"): {}, db.q("error"): {}}  # billing is not one
    variable(config)
    elsewhere = [(str(uuid.uuid4()), json.dumps({h.FAILED_Q: name(db.q(target)), h.EXCEPTION_TYPE: "X"}), b"b")
                 for target in ("billing", "error", "nowhere")]
    insert_rows(db, db.q("error"), elsewhere)
    rows = {json.loads(r.headers)[h.FAILED_Q]: r for r in db.transport.browse(db.q("error"))[3:]}
    for target, reason in (("billing", "not one of the queues"), ("error", "the error queue itself"),
                           ("nowhere", "not one of the queues")):
        response = post(client, "retry", "op", chosen([made["failed"][0], rows[name(db.q(target))]]))
        assert response.status_code == 409 and reason in response.json()["detail"], response.text
    assert db.transport.count(db.q("billing")) == 1 and db.transport.count(db.q("error")) == 6
    assert db.transport.count(db.q("invoices")) == 0  # all or none: the good one stayed too
    assert post(client, "retry", "op", chosen(made["failed"][:1])).status_code == 200


def test_listing_twenty_messages_of_twenty_mb_costs_a_few_mb(client: Any, filled: Any) -> None:
    """10 bodies and 10 header sets of 20 MB each (incompressible): the page, the groups and the overview are
    served with a traced peak of a few MB (Python allocations; SQLite's own reads are not traced)."""
    db, _ = filled
    size = 20 * 1024 * 1024
    invoices = db.transport.name(db.q("invoices"))
    for i in range(20):
        blob = os.urandom(size * 3 // 4)
        if i % 2:
            headers, body = json.dumps({h.FAILED_Q: invoices, "Padding": base64.b64encode(blob).decode()}), b"x"
        else:
            headers, body = json.dumps({h.FAILED_Q: invoices, h.EXCEPTION_TYPE: "Big"}), blob + blob[: size // 4]
        insert_rows(db, db.q("error"), [(str(uuid.uuid4()), headers, body)])
        del blob, headers, body
    gc.collect()
    viewer = as_user("viewer")
    tracemalloc.start()
    try:
        page = client.get(FAILED, params={"limit": 50}, headers=viewer)
        groups = client.get(f"{FAILED}/groups", headers=viewer)
        overview = client.get(f"{PREFIX}/api/overview", headers=viewer)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert page.status_code == groups.status_code == overview.status_code == 200
    messages = page.json()["messages"]
    assert len(messages) == 23 and sum(m["body_truncated"] or m["headers_truncated"] for m in messages) == 20
    assert max(m["body_length"] for m in messages) == size
    assert peak < 6 * 1024 * 1024, f"traced peak {peak / 1e6:.1f} MB"


@pytest.mark.heavy
def test_a_million_failed_rows_list_retry_and_delete_one_by_index_seeks(client: Any, filled: Any) -> None:
    """PostgreSQL's plans for a page, a retry and a delete on 1,000,000 failed rows use the seq index (no scan of
    the error queue); the API lists the last page, returns one message and deletes one."""
    db, made = filled
    if db.kind != "postgres":
        pytest.skip("the plans are PostgreSQL's")
    transport, table = db.transport, db.transport.book.queue(db.q("error"))
    invoices = transport.name(db.q("invoices"))
    headers = json.dumps({h.FAILED_Q: invoices, h.EXCEPTION_TYPE: "System.TimeoutException",
                          h.TIME_OF_FAILURE: h.format_wire_time()}, separators=(",", ":"))
    with transport.session.connection() as conn:
        with conn.cursor() as cur:
            cur.execute(f"INSERT INTO {table.ids['queue']} (id, headers, body) "  # noqa: S608 - quoted test table
                        "SELECT gen_random_uuid(), %s, '\\x00'::bytea FROM generate_series(1, 1000000)", (headers,))
            cur.execute(f"ANALYZE {table.ids['queue']}")
        conn.commit()
    last = transport.browse(db.q("error"), after_seq=1_000_000, limit=10)[-1]
    plans = {}
    with transport.session.connection() as conn:
        with conn.cursor() as cur:
            for name, params in (
                    ("failed_page", {**FailedFilter().params(), "after_seq": 0, "through_seq": 2**63 - 1,
                                     "batch_size": 50, "headers_chars": 100, "body_bytes": 10}),
                    ("failed_page", {**FailedFilter(exception_type="System.TimeoutException").params(),
                                     "after_seq": 999_000, "through_seq": 2**63 - 1, "batch_size": 50,
                                     "headers_chars": 100, "body_bytes": 10}),
                    ("lock_position", {"seq": last.seq, "id": str(last.id)}),
                    ("delete_position", {"seq": last.seq, "id": str(last.id)})):
                sql, args = transport.dialect.prepare(name, params, table.ids)
                cur.execute("EXPLAIN (FORMAT JSON) " + sql, args)
                plans[f"{name} {params}"] = json.dumps(cur.fetchone()[0])
        conn.rollback()
    for name, plan in plans.items():
        assert "Index Scan" in plan and "Seq Scan" not in plan, (name, plan)

    viewer = as_user("viewer")
    page = client.get(FAILED, params={"after": last.seq - 3, "limit": 50}, headers=viewer).json()
    assert [m["seq"] for m in page["messages"]] == [last.seq - 2, last.seq - 1, last.seq]
    assert post(client, "retry", "op", chosen([last])).json()["total_returned"] == 1
    assert post(client, "delete", "op", chosen(made["failed"][:1])).json()["deleted"] == 1
    assert transport.count(db.q("invoices")) == 1 and transport.count(db.q("error")) == 1_000_001
