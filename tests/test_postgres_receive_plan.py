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

from airflow_sqlqueue.transport import OutgoingMessage
from airflow_sqlqueue.transport.dialects import get_dialect
from tests.conftest import PG_URL

LOCKING = ("receive_batch", "purge_expired")


def _plan(pg, statement: str, rows: int, analyze: bool, params: dict | None = None) -> dict:
    dialect = get_dialect("postgres")
    address = dialect.parse_address(pg.q("orders"))
    pg.transport.create_queue(pg.q("orders"), delayed=True)
    pg.transport.send_many(pg.q("orders"), [b"x"] * rows)
    pg.transport.send_many(pg.q("orders"), [OutgoingMessage(b"later", delay=3600)] * rows)
    if statement.endswith("_legacy"):  # a delayed table of 0.1 keys its rows by seq
        pg.sql(f'ALTER TABLE "{pg.schema}"."orders.Delayed" ADD COLUMN seq bigint GENERATED ALWAYS AS IDENTITY')
    if analyze:
        pg.sql(f'ANALYZE "{pg.schema}"."orders"')
        pg.sql(f'ANALYZE "{pg.schema}"."orders.Delayed"')
    sql, params = dialect.prepare(statement, {"batch_size": 10, **(params or {})}, dialect.identifiers(address))
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


def _path_to(node: dict, wanted: dict) -> list[dict] | None:
    """The nodes from ``node`` down to ``wanted`` (both included), or None."""
    if node is wanted:
        return [node]
    for child in node.get("Plans", []):
        below = _path_to(child, wanted)
        if below is not None:
            return [node, *below]
    return None


# the partitioned drain's receive and the delayed movers: the locking subquery is run once, wherever the rest of
# the statement (a CTE feeding an INSERT, an EXISTS per moved row) puts it
@pytest.mark.parametrize("statement,params", [
    ("receive_range", {"first_seq": 1, "last_seq": 10_000_000}),
    ("receive_after", {"after_seq": 1}),
    ("move_due_delayed", None),
    ("move_due_delayed_legacy", None),
])
@pytest.mark.parametrize("rows,analyze", [(0, False), (20000, True)])
def test_every_other_locking_subquery_is_an_initplan_run_once(pg, statement, params, rows, analyze):
    plan = _plan(pg, statement, rows, analyze, params)
    [lock_rows] = [n for n in _nodes(plan) if n["Node Type"] == "LockRows"]
    path = _path_to(plan, lock_rows)
    relations = [n.get("Parent Relationship") for n in path]
    assert "InitPlan" in relations, json.dumps(plan, indent=1)
    above_lock = path[relations.index("InitPlan"):]  # from the InitPlan down to the locking scan
    assert "SubPlan" not in relations[relations.index("InitPlan"):], json.dumps(plan, indent=1)
    assert not [n for n in above_lock if "Join" in n["Node Type"] or n["Node Type"] == "Nested Loop"], \
        json.dumps(plan, indent=1)
    assert not [n for n in path[:relations.index("InitPlan")] if n.get("Parent Relationship") == "SubPlan"]


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
