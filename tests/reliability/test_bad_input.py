"""Bad input gets a clear error or is stored verbatim, and nothing else in the database changes.

The catalog of the test (pg_class of the test schema, schemas, or sqlite_master) and the rows of every queue
table are snapshotted before and after each input. Unit-level rules of address parsing are in
tests/test_addresses.py; here every operation is run against a real database.
"""

from __future__ import annotations

import sqlite3
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_sqlqueue.transport import (
    InvalidAddressError,
    InvalidMessageError,
    OutgoingMessage,
    QueueNotFoundError,
    SqlQueueTransport,
    UnsupportedConnectionError,
    get_dialect,
)
from airflow_sqlqueue.transport.wire.headers import PoisonHeadersError, parse_headers, serialize_headers
from tests.conftest import own

from .helpers import catalog, summary

#: Names that break a naming rule (both dialects), with the words the error must contain.
ILLEGAL = [("", "empty"), ("   ", "whitespace"), ("ord\x00ers", "NUL"), ("x" * 300, "at most")]
ILLEGAL_POSTGRES = [('or"ders', "must be quoted"), ("a.b.c", "3 parts"), ('"unclosed', "unclosed"),
                    ("é" * 28, "56 bytes")]  # 28 characters, but over the 55-byte limit of table names
#: Legal names full of SQL syntax: created and used verbatim.
ODD = ["br]acket", 'dq"uote', "semi;colon", "dash--dash", "at@sign", "Robert'); DROP TABLE error;--",
       "]; DROP SCHEMA public CASCADE; --"]
SQL_TEXT = "'); DROP TABLE orders; --\"; DELETE FROM error; /* */ %s %(x)s {queue}"


def _operations(t: SqlQueueTransport, queue: str):
    """Every operation that takes a queue name, as (label, thunk)."""
    return [
        ("create", lambda: t.create_queue(queue)),
        ("create delayed", lambda: t.create_queue(queue, delayed=True)),
        ("send", lambda: t.send(queue, b"x")),
        ("send_many", lambda: t.send_many(queue, [b"x", b"y"])),
        ("receive", lambda: t.receive(queue)),
        ("receiving", lambda: t.receiving(queue).__enter__()),
        ("peek", lambda: t.peek(queue)),
        ("browse", lambda: t.browse(queue)),
        ("exists", lambda: t.exists(queue)),
        ("process", lambda: t.process(queue, lambda m, c: None)),
        ("drain", lambda: t.drain(queue, len)),
        ("purge", lambda: t.purge_expired(queue)),
        ("check", lambda: t.check(queue, repair=True)),
        ("move delayed", lambda: t.move_due_delayed(queue)),
        ("retry errors", lambda: t.retry_errors(error_queue=queue, allowed=["orders"])),
        ("ddl", lambda: t.ddl([queue])),
    ]


def test_illegal_names_refused_by_every_operation_and_nothing_changes(queues):
    t = queues.transport
    t.send(queues.q("orders"), b"keep")
    before = catalog(queues)
    cases = ILLEGAL + (ILLEGAL_POSTGRES if queues.kind == "postgres" else [])
    refused = 0
    for name, words in cases:
        for label, operation in _operations(t, name):
            with pytest.raises(InvalidAddressError) as info:
                operation()
            assert words in str(info.value), f"{label} {name!r}: {info.value}"
            refused += 1
        assert catalog(queues) == before, f"{name!r} changed the database"
    summary("illegal_names_refused", queues.kind, messages=1, faults=refused, lost=0, inputs=len(cases),
            catalog_changes=0)


@pytest.mark.parametrize("name", ODD)
def test_names_full_of_sql_are_used_verbatim_and_change_nothing_else(queues, name):
    t = queues.transport
    queue = queues.q(name)
    t.send(queues.q("orders"), b"keep")
    before = catalog(queues)
    t.create_queue(queue)
    after = catalog(queues)
    # the only change: the new queue's own objects, named exactly as asked
    assert after["rows"].pop(name) == []
    assert after["rows"] == before["rows"]
    new = [o for o in after["objects"] if o not in before["objects"]]
    assert all(o in after["objects"] for o in before["objects"]), "an object disappeared"
    if queues.kind == "sqlite":
        assert {o[2] for o in new} == {name}
        assert name in {o[1] for o in new}
    else:
        assert (name, "r", 5) in new and all(o[1] in ("r", "i", "S") for o in new)
        assert after["schemas"] == before["schemas"] and after["public"] == before["public"]
    sent = t.send(queue, OutgoingMessage(SQL_TEXT.encode(), {SQL_TEXT: SQL_TEXT}))
    [message] = t.receive(queue)
    assert (message.id, message.body, own(message.headers)) == (sent, SQL_TEXT.encode(), {SQL_TEXT: SQL_TEXT})
    assert t.name(queue) in t.discover()
    final = catalog(queues)
    final["rows"].pop(name)
    assert final["rows"] == before["rows"]


def test_sql_in_header_values_and_bodies_is_stored_verbatim(queues):
    t, q = queues.transport, queues.q("orders")
    before = catalog(queues)
    values = [SQL_TEXT, "' OR 1=1 --", "\\'; SELECT pg_sleep(10); --", "]]]; DROP TABLE [error]; --", "\u202e"]
    ids = t.send_many(q, [OutgoingMessage(v.encode(), {v: v, "k": v}) for v in values])
    got = t.receive(q, 10)
    expected = [(i, v.encode(), {v: v, "k": v}) for i, v in zip(ids, values, strict=True)]
    assert [(m.id, m.body, own(m.headers)) for m in got] == expected
    assert catalog(queues) == before


def test_bad_messages_refused_before_anything_is_written(queues):
    t, q = queues.transport, queues.q("orders")
    before = catalog(queues)
    bad = [
        OutgoingMessage(b"x", {"k": 1}),
        OutgoingMessage(b"x", {"k": "x" * 1_000_001}),
        OutgoingMessage(b"x", ["not", "a", "map"]),
        OutgoingMessage("\ud800"),
        OutgoingMessage(b"x", {"k": "\udfff"}),
    ]
    for message in bad:
        with pytest.raises(InvalidMessageError):
            t.send_many(q, [OutgoingMessage(b"good"), message])  # the good one before it is not written either
    assert catalog(queues) == before


def test_missing_queue_and_missing_schema_change_nothing(queues):
    t = queues.transport
    before = catalog(queues)
    missing = [queues.q("missing")]
    if queues.kind == "postgres":
        missing.append(f'"no_schema_{uuid.uuid4().hex[:8]}"."orders"')
    for queue in missing:
        for label, operation in _operations(t, queue):
            if label in ("create", "create delayed", "exists", "ddl", "check"):
                continue
            with pytest.raises(QueueNotFoundError, match="(?i)create"):
                operation()
        assert not t.exists(queue)
        assert t.check(queue)[0].code == "missing_queue"
    if queues.kind == "postgres":
        with pytest.raises(QueueNotFoundError, match="CREATE SCHEMA"):
            t.create_queue(missing[1])
    assert catalog(queues) == before


# -- wrong connection types ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("url", "words"), [
    ("mysql://user:pw@127.0.0.1/db", "unsupported URL scheme 'mysql'"),
    ("postgresql+asyncpg://user:pw@127.0.0.1/db", "unsupported URL scheme"),
    ("oracle://127.0.0.1/db", "unsupported URL scheme"),
    ("sqlite:///:memory:", "use a file path"),
    ("sqlite://", "needs a file path"),
    ("127.0.0.1:5432/test", "not a connection URL"),
    (42, "not a connection URL"),
    (None, "not a connection URL"),
])
def test_wrong_connection_urls_refused_clearly(url, words):
    with pytest.raises(UnsupportedConnectionError) as info:
        SqlQueueTransport.from_url(url)
    assert words in str(info.value)


def test_unknown_dialect_refused_clearly():
    with pytest.raises(ValueError, match="unknown dialect 'oracle'; choose one of"):
        SqlQueueTransport(lambda: None, "oracle")


def test_connection_of_the_wrong_database_refused_clearly(tmp_path):
    transport = SqlQueueTransport(lambda: sqlite3.connect(tmp_path / "x.db"), "postgres")
    with pytest.raises(UnsupportedConnectionError, match="sqlite3 connection was given to the postgres dialect"):
        transport.send("orders", b"x")
    assert not (tmp_path / "x.db").stat().st_size, "something was written to the SQLite file"


def test_postgres_connection_given_to_the_sqlite_dialect_refused_before_any_sql(db):
    if db.kind != "postgres":
        pytest.skip("a PostgreSQL connection")
    import psycopg

    before = catalog(db)
    transport = SqlQueueTransport(lambda: psycopg.connect(db.url), "sqlite")
    with pytest.raises(UnsupportedConnectionError, match="psycopg connection was given to the sqlite dialect"):
        transport.create_queue(db.q("orders"))
    transport.close()
    assert catalog(db) == before


# -- fuzz: what tests/test_addresses.py and tests/test_headers.py do not cover ------------------------------
FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _identifiers(qualified: str, opening: str, closing: str) -> list[str]:
    """Split quoted SQL text such as ``[a]]b].[c]`` or ``"a""b"."c"`` back into names; fail on anything else
    (text outside the quotes would be SQL the name smuggled in)."""
    names, i = [], 0
    while True:
        assert qualified[i] == opening, f"{qualified!r}: text outside the quoted identifiers at {i}"
        i += 1
        name = []
        while True:
            end = qualified.index(closing, i)
            name.append(qualified[i:end])
            if qualified.startswith(closing * 2, end):
                name.append(closing)
                i = end + 2
                continue
            i = end + 1
            break
        names.append("".join(name))
        if i == len(qualified):
            return names
        assert qualified[i] == ".", f"{qualified!r}: text outside the quoted identifiers at {i}"
        i += 1


def _expected_parts(name: str, address) -> list[str]:
    if name == "mssql":
        return ([address.catalog] if address.catalog is not None else []) + [address.schema or "dbo", address.table]
    if name == "postgres":
        return [address.schema or "public", address.table]
    return [address.table]


ADDRESS_TEXT = (st.text(max_size=80) | st.text(alphabet='"[]@.;- \x00ab', max_size=30)
                | st.text(alphabet="[]@ab", max_size=30))


@FUZZ
@given(text=ADDRESS_TEXT)
def test_fuzz_any_text_is_an_address_or_a_clear_error(text):
    """Arbitrary text, under the address rules of all three dialects: either InvalidAddressError, or an address
    whose canonical text parses back to it and whose quoted SQL form is exactly its names, each inside its own
    quoted identifier (nothing escapes into the SQL)."""
    for name, (opening, closing) in (("mssql", "[]"), ("postgres", '""'), ("sqlite", '""')):
        dialect = get_dialect(name)
        try:
            address = dialect.parse_address(text)
        except InvalidAddressError as exc:
            assert str(exc) and "\n" not in str(exc)  # one line, naming the rule
            continue
        assert dialect.parse_address(dialect.format_address(address)) == address
        assert _identifiers(dialect.qualified(address), opening, closing) == _expected_parts(name, address)


@FUZZ
@given(text=st.text(max_size=120) | st.from_regex(r'\{("[a-z]{0,3}":(null|"[^"]{0,5}"|1|\[\]|\{\}),?){0,3}\}?'))
def test_fuzz_stored_headers_parse_or_are_poison(text):
    """Any stored Headers text gives a string map or PoisonHeadersError (never another exception); a map
    re-serialized parses to itself."""
    try:
        headers = parse_headers(text)
    except PoisonHeadersError:
        return
    assert all(isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in headers.items())
    try:
        again = serialize_headers(headers)
    except InvalidMessageError:  # e.g. lone surrogates from \\ud800 escapes: refused clearly, never written
        return
    assert parse_headers(again) == headers


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(headers=st.dictionaries(st.text(max_size=20), st.none() | st.text(max_size=40), max_size=6),
       body=st.binary(max_size=200))
def test_fuzz_headers_and_body_round_trip_through_the_database(queues, headers, body):
    """Sent and received on a real database (SQLite and PostgreSQL): the stored Headers text is exactly the
    upstream serialization, and headers and body come back exactly (where serialize accepts them)."""
    try:
        text = serialize_headers(headers)
    except InvalidMessageError:  # lone surrogates: refused clearly, never written
        return
    t, q = queues.transport, queues.q("orders")
    sent = t.send(q, OutgoingMessage(body, headers))
    [row] = t.browse(q)
    # the standard headers are filled in before the sender's own: the stored text is the upstream serialization
    stored = parse_headers(row.headers)
    assert row.id == sent and row.headers == serialize_headers(stored) and text[1:-1] in row.headers
    [message] = t.receive(q)
    assert (message.id, own(message.headers, headers), message.body) == (sent, headers, body)
