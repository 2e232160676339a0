"""The error workbench at scale: a filtered or searched page reads a bounded number of rows (keyset by position,
``next_after`` where the next read starts), the error queue's depth is the database's estimate above a threshold,
and (``heavy``) a million failed messages on PostgreSQL: every list, count and action statement is measured and its
plan checked; the figures are printed (``-s``), never asserted as times."""

from __future__ import annotations

import time
from typing import Any

import pytest

from airflow_sqlqueue.dashboard import failed
from airflow_sqlqueue.transport import OutgoingMessage
from airflow_sqlqueue.transport.errorqueue.previews import FailedFilter, Position
from airflow_sqlqueue.transport.wire import headers as h
from tests.conftest import PG_URL, Db


def fill(db: Db, n: int, rare_every: int) -> list[str]:
    db.transport.create_queues([db.q("orders"), db.q("error")])
    ids = db.transport.send_many(db.q("error"), [OutgoingMessage(body=f"m{i}".encode(), headers={
        h.FAILED_Q: db.transport.name(db.q("orders")),
        h.EXCEPTION_TYPE: "Rare" if i % rare_every == rare_every - 1 else "Common"}) for i in range(n)])
    return [str(i) for i in ids]


def test_a_filtered_page_reads_a_bounded_number_of_rows_and_says_where_to_read_on(db: Db) -> None:
    ids = fill(db, 100, rare_every=40)  # "Rare" at the 40th and 80th message
    where = FailedFilter(exception_type="Rare")
    seen, after, reads = [], 0, 0
    while after is not None:
        page = failed.failed_messages(db.transport, db.q("error"), after_seq=after, limit=5, where=where,
                                      scan_rows=25)
        assert len(page["messages"]) <= 1  # at most 25 rows read per page: never both rare ones at once
        seen += [m["id"] for m in page["messages"]]
        after, reads = page["next_after"], reads + 1
    assert seen == [ids[39], ids[79]] and reads == 5  # every row looked at once: four reads of 25, one past the end
    unfiltered = failed.failed_messages(db.transport, db.q("error"), after_seq=0, limit=50, where=FailedFilter(),
                                        scan_rows=25)
    assert len(unfiltered["messages"]) == 50  # no filter: a full page, no bound needed


def test_the_error_queue_depth_is_an_estimate_only_above_the_threshold(db: Db) -> None:
    fill(db, 30, rare_every=10)
    errors = db.transport.errors(db.q("error"))
    assert errors.count_or_estimate() == (30, True)
    if db.kind == "postgres":
        table = db.transport.dialect.qualified(db.transport.address(db.q("error")))
        db.sql(f"ANALYZE {table}")
        estimate, exact = errors.count_or_estimate(threshold=10)
        assert (estimate, exact) == (30, False)  # reltuples after ANALYZE, no count


def test_groups_are_counted_per_range_and_only_changed_ranges_are_read_again(db: Db,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_sqlqueue.transport.errorqueue.error_queue import ErrorQueue

    ids = fill(db, 100, rare_every=10)
    reads: list[tuple[int, int | None]] = []
    real = ErrorQueue.groups

    def counted(self: ErrorQueue, limit: int = 1000, **kw: Any) -> list[dict[str, Any]]:
        reads.append((kw.get("after_seq", 0), kw.get("through_seq")))
        return real(self, limit, **kw)

    monkeypatch.setattr(ErrorQueue, "groups", counted)
    key = f"test-{db.kind}-{id(db)}"
    whole = {(g["exception_type"], g["count"]) for g in db.transport.failed_groups(db.q("error"))}
    groups, total = failed.ranged_groups(db.transport, db.q("error"), key, size=25)
    assert {(g["exception_type"], g["count"]) for g in groups} == whole == {("Common", 90), ("Rare", 10)}
    assert total == 100 and len(reads) == 1 + 5  # the whole queue once, then five ranges (positions 1 to 100)
    reads.clear()
    assert failed.ranged_groups(db.transport, db.q("error"), key, size=25)[1] == 100 and reads == []  # kept
    page = db.transport.failed_page(db.q("error"), after_seq=0, limit=100)
    rare = next(p for p in page if p.exception_type == "Rare")
    db.transport.delete_positions(db.q("error"), [Position(rare.seq, rare.id)])
    groups, total = failed.ranged_groups(db.transport, db.q("error"), key, size=25)
    assert {(g["exception_type"], g["count"]) for g in groups} == {("Common", 90), ("Rare", 9)} and total == 99
    assert len(reads) == 1  # only the range that lost a row was read again
    assert len(ids) == 100


# -- a million failed messages on PostgreSQL --------------------------------------------------------------------
N = 1_000_000
SCHEMA = "sq_scale_1m"


def timed(figures: dict[str, float], name: str, work: Any) -> Any:
    started = time.perf_counter()
    result = work()
    figures[name] = round((time.perf_counter() - started) * 1000, 1)
    return result


def explain(cur: Any, sql: str, params: dict[str, Any]) -> str:
    cur.execute("EXPLAIN " + sql, params)
    return "\n".join(r[0] for r in cur.fetchall())


@pytest.mark.heavy
@pytest.mark.timeout(3600)  # the seed and the one-time rebuild each read a 2 GB table
def test_a_million_failed_messages_on_postgresql() -> None:  # noqa: PLR0915
    psycopg = pytest.importorskip("psycopg")
    from airflow_sqlqueue.transport import SqlQueueTransport
    from tests.scale_seed import RARE, seed_failed

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE')
        conn.execute(f'CREATE SCHEMA "{SCHEMA}"')
    error = f'"{SCHEMA}"."error"'
    queues = [f'"{SCHEMA}"."{q}"' for q in ("orders", "billing", "shipping", "invoices", "payroll")]
    transport = SqlQueueTransport.from_url(PG_URL, error_queue=error)
    figures: dict[str, float] = {}
    try:
        transport.create_queues([*queues, error])
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            timed(figures, "seed 1M rows (generate_series)", lambda: seed_failed(conn.cursor(), SCHEMA, "error",
                                                                                queues, N))
            conn.execute(f"VACUUM ANALYZE {error}")
        errors = transport.errors(error, allowed=queues)
        # the count: the planner's estimate above the threshold, no scan
        depth, exact = timed(figures, "depth (estimate)", errors.count_or_estimate)
        assert not exact and 0.9 * N <= depth <= 1.1 * N
        timed(figures, "depth (exact count, not used by the page)", errors.count)
        # pages: keyset by position, the same cost at the start and at the end
        first = timed(figures, "page 1 (50)", lambda: failed.failed_messages(
            transport, error, after_seq=0, limit=50, where=FailedFilter()))
        assert len(first["messages"]) == 50 and first["next_after"] == first["messages"][-1]["seq"]
        timed(figures, "page at position 990,000", lambda: failed.failed_messages(
            transport, error, after_seq=990_000, limit=50, where=FailedFilter()))
        common = timed(figures, "page of one exception type", lambda: failed.failed_messages(
            transport, error, after_seq=0, limit=50, where=FailedFilter(exception_type="System.IO.IOException")))
        assert len(common["messages"]) == 50
        rare = timed(figures, "page of a rare group, past its rows (bounded)", lambda: failed.failed_messages(
            transport, error, after_seq=10, limit=50, where=FailedFilter(exception_type=RARE)))
        assert rare["messages"] == [] and rare["next_after"] == 10 + failed.SCAN_ROWS  # read on from there
        missed = timed(figures, "search that finds nothing (bounded)", lambda: failed.failed_messages(
            transport, error, after_seq=0, limit=50, where=FailedFilter(search="nothing-like-this")))
        assert missed["messages"] == [] and missed["next_after"] == failed.SCAN_ROWS
        hit = timed(figures, "search of body text", lambda: failed.failed_messages(
            transport, error, after_seq=0, limit=50, where=FailedFilter(search='"order": 77,')))
        assert len(hit["messages"]) == 1
        with psycopg.connect(PG_URL) as conn, conn.cursor() as cur:
            plan = explain(cur, f"SELECT seq FROM {error} WHERE seq > %(a)s ORDER BY seq OFFSET 9999 LIMIT 1",  # noqa: S608
                           {"a": 0})
            assert "Index Only Scan" in plan, plan  # the bound is an index walk, not a table scan
            plan = explain(cur, f"SELECT id FROM {error} WHERE seq > %(a)s AND seq <= %(b)s ORDER BY seq LIMIT 50",  # noqa: S608
                           {"a": 0, "b": 10_000})
            assert "Index Scan" in plan and "Seq Scan" not in plan, plan
        # actions: one index seek per message
        chosen = [Position(m["seq"], m["id"]) for m in first["messages"][:20]]
        timed(figures, "retry 10 selected", lambda: errors.retry(chosen[:10]))
        timed(figures, "delete 10 selected", lambda: transport.delete_positions(error, chosen[10:20]))
        timed(figures, "edit and retry 1", lambda: errors.edit_and_retry(Position(
            first["messages"][20]["seq"], first["messages"][20]["id"])))
        # the error groups summary: built once (the maintenance rebuild, or the first reads catching up), then
        # every read is a few rows plus an index-only count
        built = timed(figures, "groups summary, built (rebuild of 1M rows, one-time)", lambda: errors.summary.rebuild())
        assert built == transport.count(error)
        fresh = SqlQueueTransport.from_url(PG_URL, error_queue=error)  # as an API server that just started
        try:
            first_load = timed(figures, "groups, first load after an API server starts", lambda: failed.failed_groups(
                fresh, error, by="exception_type"))
        finally:
            fresh.close()
        assert first_load["summary"]["drift"] == 0 and first_load["summary"]["behind"] == 0
        assert first_load["total"] == first_load["grouped"] == transport.count(error)
        kept = timed(figures, "groups, again", lambda: failed.failed_groups(transport, error, by="all"))
        assert sum(g["count"] for g in kept["groups"]) == kept["total"]
        rows, drift = timed(figures, "drift check (exact count: in the background at most every 60 s, or on "
                                     "recount; never on a page's path)", errors.summary.check)
        assert drift == 0 and rows == kept["total"]
        again = failed.failed_messages(transport, error, after_seq=500_000, limit=5, where=FailedFilter())["messages"]
        timed(figures, "retry 1 (summary kept in its transaction)", lambda: errors.retry([Position(again[0]["seq"],
                                                                                                   again[0]["id"])]))
        after = timed(figures, "groups after a retry", lambda: failed.failed_groups(transport, error, by="all"))
        assert after["total"] == after["grouped"] == kept["total"] - 1
        with psycopg.connect(PG_URL, autocommit=True) as conn:  # 1,000 rows moved in by a .NET endpoint
            seed_failed(conn.cursor(), SCHEMA, "error", queues, 1_000)
        caught = timed(figures, "groups after 1,000 rows inserted by plain SQL (catch-up)",
                       lambda: failed.failed_groups(transport, error, by="all"))
        assert caught["total"] == caught["grouped"] == after["total"] + 1_000
        from airflow_sqlqueue.dashboard import group_actions
        rare_where = FailedFilter(exception_type=RARE)
        count = timed(figures, "group count (an action's confirmation check)", lambda: group_actions.group_count(
            transport, error, rare_where))
        assert count == 10  # the first fill's ten were retried and deleted above; the second fill's ten
        timed(figures, "retry group of 10 (rare)", lambda: group_actions.return_group(
            transport, error, queues, rare_where, 10))
        # side by side, same run: the previous version's first load (groups per range kept in memory; a fresh
        # process has none, so every row is read), which a login without rights on the summary tables still gets
        timed(figures, "groups, first load without the summary (previous version: ranges, every row read)",
              lambda: failed.failed_groups(transport, error, cache_key="scale-ranges", use_summary=False))
        final = failed.failed_groups(transport, error, by="all")
        assert final["total"] == final["grouped"] == transport.count(error)
        from airflow_sqlqueue.dashboard import message
        middle = failed.failed_messages(transport, error, after_seq=600_000, limit=1, where=FailedFilter())
        talk = message.read_message(transport, error, middle["messages"][0]["seq"], middle["messages"][0]["id"])
        near = timed(figures, "conversation of a message (bounded window)", lambda: message.conversation(
            transport, error, talk["conversation_id"], talk["id"], seq=talk["seq"]))
        assert near["next_after"] is not None and len(near["messages"]) >= 1
    finally:
        transport.close()
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE')
        print("\n1M failed messages on PostgreSQL, ms:", *(f"\n  {k}: {v}" for k, v in figures.items()))
