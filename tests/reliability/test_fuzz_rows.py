"""Property: whatever values the columns of a queue table hold, the queue drains completely and nothing is lost.

Hypothesis writes random rows straight into the table, as any other program with INSERT could: any text, any
bytes, NULLs, JSON of any nesting (and deeper than any parser allows), ids of any kind and Expires of any form
(SQLite's loose types take them all; PostgreSQL only what its column types accept). Then one receive path runs,
and every row must be delivered once, moved to the error queue intact with failure headers, or dropped because
its Expires is a past date. Runtime is bounded: a few dozen examples of up to 8 rows each per database.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections import Counter
from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_sqlqueue.transport.wire import headers as h
from airflow_sqlqueue.transport.wire.messages import as_body, as_text

from .helpers import count, table

FAILURE_NAMES = {h.FAILED_Q, h.TIME_OF_FAILURE, h.EXCEPTION_TYPE, h.EXCEPTION_MESSAGE, h.EXCEPTION_STACK_TRACE}
#: Examples per database (CI: 30, derandomized; explore with SQLQUEUE_FUZZ_EXAMPLES=1000, then random each run).
EXAMPLES = int(os.environ.get("SQLQUEUE_FUZZ_EXAMPLES", "30"))


def _text(kind: str) -> st.SearchStrategy[str]:
    # PostgreSQL text cannot hold NUL; no driver can send a lone surrogate (stored text is always valid)
    return st.text(st.characters(blacklist_categories=("Cs",),
                                 blacklist_characters="\x00" if kind == "postgres" else ""), max_size=40)


def _json(kind: str) -> st.SearchStrategy[str]:
    """JSON text of any shape: objects of strings (messages), any nesting, and nesting past any parser's limit."""
    text = _text(kind)
    scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | text
    anything = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                            | st.dictionaries(text, inner, max_size=3), max_leaves=12)
    messages = st.dictionaries(text, st.none() | text, max_size=5)
    deep = st.integers(1, 4000).map(lambda n: "[" * n + "]" * n) | st.integers(1, 2000).map(lambda n: '{"a":' * n)
    return st.one_of(messages.map(json.dumps), anything.map(json.dumps),
                     st.builds(lambda v, a: json.dumps(v, ensure_ascii=a), messages, st.booleans()), deep)


def _row(kind: str) -> st.SearchStrategy[dict]:
    text = _text(kind)
    moment = st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1))
    if kind == "postgres":
        return st.fixed_dictionaries({
            "id": st.uuids().map(str),
            "expires": st.none() | moment,
            "headers": _json(kind) | text,
            "body": st.none() | st.binary(max_size=64),
        })
    integers = st.integers(-(2**63), 2**63 - 1)  # what SQLite's INTEGER holds
    loose = st.none() | text | st.binary(max_size=32) | integers | st.floats(allow_nan=False)
    return st.fixed_dictionaries({
        "id": st.uuids().map(str) | text.filter(bool) | st.binary(min_size=1, max_size=16) | integers,
        "expires": loose | moment.map(str) | moment.map(lambda d: d.isoformat() + "Z"),
        "headers": _json(kind) | text | st.binary(max_size=32) | integers,
        "body": loose,
    })


def _id_key(row: dict) -> object:
    value = row["id"]
    return ("blob", value) if isinstance(value, bytes) else ("text", str(value))


def _insert(db, rows: list[dict]) -> list[int]:
    tbl = table(db, "orders")
    if db.kind == "sqlite":
        conn = sqlite3.connect(db.url[len("sqlite:///"):])
        try:
            seqs = [conn.execute(f"INSERT INTO {tbl} (id, expires, headers, body) VALUES (?, ?, ?, ?)",  # noqa: S608
                                 (r["id"], r["expires"], r["headers"], r["body"])).lastrowid for r in rows]
            conn.commit()
            return seqs
        finally:
            conn.close()
    return [db.sql(f"INSERT INTO {tbl} (id, expires, headers, body) VALUES (%s, %s, %s, %s) RETURNING seq",  # noqa: S608
                   (r["id"], r["expires"], r["headers"], r["body"]))[0][0] for r in rows]


def _might_expire(db, row: dict) -> bool:
    """Whether the row's Expires can be a past date (a NULL Expires never expires)."""
    if row["expires"] is None:
        return False
    if db.kind == "postgres":
        return row["expires"] <= datetime.utcnow() + timedelta(seconds=5)  # noqa: DTZ003 - the column is UTC
    return True  # SQLite reads many forms as dates (julianday): any non-NULL value may be one in the past


def _check(db, rows: list[dict], seqs: list[int], delivered: list[int], expired: int) -> None:
    by_seq = dict(zip(seqs, rows, strict=True))
    assert not [s for s, n in Counter(delivered).items() if n > 1], "a row was handed over twice"
    assert set(delivered) <= set(seqs)
    assert count(db, "orders") == 0, "the queue did not drain"
    rest = [by_seq[s] for s in seqs if s not in set(delivered)]
    errors = db.sql(f"SELECT id, headers, body FROM {table(db, 'error')}")  # noqa: S608
    assert len(errors) + expired == len(rest), "a row was lost"
    expected_bodies = Counter(b"" if as_body(r["body"]) is None else as_body(r["body"]) for r in rest)
    found_bodies = Counter(as_body(b) for _, _, b in errors)
    assert not found_bodies - expected_bodies, "an error-queue body is not the row's body"
    for _, text, _ in errors:
        parsed = h.parse_headers(as_text(text))
        assert FAILURE_NAMES <= set(parsed)
    dropped = Counter(b"" if as_body(r["body"]) is None else as_body(r["body"]) for r in rest) - found_bodies
    assert sum(dropped.values()) == expired
    assert expired <= sum(_might_expire(db, r) for r in rest), "a row without a past Expires was dropped"


def _clear(db) -> None:
    for name in ("orders", "error"):
        db.sql(f"DELETE FROM {table(db, name)}")  # noqa: S608


def _property(db, data) -> None:
    # ids are unique in a queue (PostgreSQL's primary key, SQLite's UNIQUE column, which compares an integer id
    # by its text)
    rows = data.draw(st.lists(_row(db.kind), min_size=1, max_size=8, unique_by=_id_key), label="rows")
    path = data.draw(st.sampled_from(["receive", "drain", "process-refusing-odd"]), label="path")
    _clear(db)
    seqs = _insert(db, rows)
    t, q = db.transport, db.q("orders")
    delivered: list[int] = []
    if path == "receive":
        expired = 0
        while t.peek(q):
            with t.claim(q, 3, take=True) as claim:
                delivered += [m.seq for m in claim.messages]
            expired += claim.stats.expired
    elif path == "drain":
        expired = t.drain(q, lambda ms: delivered.extend(m.seq for m in ms) or len(ms), batch_size=3).expired
    else:
        def handler(message, context) -> None:
            json.dumps(message.headers, ensure_ascii=True)  # whatever the headers, a handler can read them
            if message.seq % 2:
                raise ValueError("refused")
            delivered.append(message.seq)

        expired = t.process(q, handler, batch_size=3, immediate_retries=0).expired
    _check(db, rows, seqs, delivered, expired)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_any_column_values_drain_completely(kind, tmp_path_factory):
    from tests.conftest import make_db

    holder = make_db(kind, tmp_path_factory.mktemp("fuzz"))
    db = next(holder)
    try:
        db.transport.create_queues([db.q("orders"), db.q("error")])

        @settings(max_examples=EXAMPLES, deadline=None, derandomize="SQLQUEUE_FUZZ_EXAMPLES" not in os.environ,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
        @given(st.data())
        def run(data) -> None:
            _property(db, data)

        run()
    finally:
        holder.close()

