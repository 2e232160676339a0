"""The PostgreSQL batch receive cannot take more rows than asked for.

``DELETE ... WHERE seq IN (SELECT ... LIMIT n FOR UPDATE SKIP LOCKED)`` leaves the planner free to run the locking
subquery more than once (as a semi-join it can be rescanned), and each run may lock other rows. The statement
uses ``seq = ANY(ARRAY(SELECT ...))`` instead: an InitPlan, run exactly once before the delete. These tests pin
that plan shape on the real server, with and without statistics, and count what concurrent receivers take.
"""

from __future__ import annotations

import json
import threading

import psycopg
import pytest

from airflow_sqlqueue.transport.dialects import get_dialect
from tests.conftest import PG_URL, make_db

LOCKING = ("receive_batch", "purge_expired")


@pytest.fixture
def pg(tmp_path):
    yield from make_db("postgres", tmp_path)


def _plan(pg, statement: str, rows: int, analyze: bool) -> dict:
    dialect = get_dialect("postgres")
    address = dialect.parse_address(pg.q("orders"))
    pg.transport.create_queue(pg.q("orders"))
    pg.transport.send_many(pg.q("orders"), [b"x"] * rows)
    if analyze:
        pg.sql(f'ANALYZE "{pg.schema}"."orders"')
    sql, params = dialect.prepare(statement, {"batch_size": 10}, dialect.identifiers(address))
    with psycopg.connect(PG_URL) as conn:  # rolled back on exit: EXPLAIN ANALYZE of a DELETE deletes nothing kept
        [[plan]] = conn.execute("EXPLAIN (FORMAT JSON) " + sql, params).fetchall()
        conn.rollback()
    return plan[0]["Plan"]


def _nodes(node: dict):
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)


@pytest.mark.parametrize("statement", LOCKING)
@pytest.mark.parametrize("rows,analyze", [(0, False), (50, True), (20000, True)])
def test_the_locking_subquery_is_an_initplan_run_once(pg, statement, rows, analyze):
    plan = _plan(pg, statement, rows, analyze)
    nodes = list(_nodes(plan))
    relations = [n.get("Parent Relationship") for n in nodes]
    # the LIMIT ... FOR UPDATE SKIP LOCKED runs as an InitPlan (once per statement), never as a SubPlan
    # (once per outer row) or inside a join that can rescan it
    assert "InitPlan" in relations, json.dumps(plan, indent=1)
    assert "SubPlan" not in relations, json.dumps(plan, indent=1)
    assert not [n for n in nodes if "Join" in n["Node Type"] or n["Node Type"] == "Nested Loop"], \
        json.dumps(plan, indent=1)
    [lock_rows] = [n for n in nodes if n["Node Type"] == "LockRows"]
    assert lock_rows.get("Parent Relationship") in (None, "Outer") and any(
        n["Node Type"] == "Limit" and lock_rows in list(_nodes(n)) for n in nodes)


def test_concurrent_receivers_never_take_more_than_the_batch(pg):
    pg.transport.create_queue(pg.q("orders"))
    sent = [str(i).encode() for i in range(6000)]
    pg.transport.send_many(pg.q("orders"), sent)
    taken: list[bytes] = []
    sizes: list[int] = []
    lock = threading.Lock()

    def receiver():
        while True:
            batch = pg.transport.receive(pg.q("orders"), max_messages=7)
            if not batch:
                return
            with lock:
                sizes.append(len(batch))
                taken.extend(m.body for m in batch)

    threads = [threading.Thread(target=receiver) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert max(sizes) <= 7
    assert sorted(taken) == sorted(sent) and len(set(taken)) == len(sent)
