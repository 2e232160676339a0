"""Queue addresses: parse/format round trips per dialect, every naming rule refused with a clear error, and
odd but legal names really used on SQLite and PostgreSQL (create, send, receive)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from airflow_sqlqueue.transport import InvalidAddressError, OutgoingMessage, QueueAddress, get_dialect
from airflow_sqlqueue.transport.wire.address import (
    MSSQL_MAX_IDENTIFIER,
    POSTGRES_MAX_IDENTIFIER_BYTES,
    POSTGRES_MAX_TABLE_BYTES,
    SQLITE_MAX_TABLE,
    format_mssql,
    format_postgres,
    format_sqlite,
    parse_mssql,
    parse_postgres,
    parse_sqlite,
)
from tests.conftest import own


def mssql_dialect():
    """The SQL Server dialect object, or skip when its module is not in the tree yet."""
    try:
        return get_dialect("mssql")
    except ModuleNotFoundError as exc:  # dialects/mssql.py not written yet
        pytest.skip(f"SQL Server dialect not available: {exc}")


# Names that are legal but awkward: spaces, dots, brackets, quotes, percent and brace signs (which must
# survive the driver's parameter substitution and the statement templates), non-ASCII.
ODD_NAMES = [
    "my queue",
    "dots.in.name",
    "br]ack[et",
    'dq"uote',
    "sq'uote",
    "ünïcødé-名前",
    "pct%s%(id)s%%",
    "{queue}{seq_index}",
    "semi;colon -- comment",
    "Robert'); DROP TABLE error;--",
]


# -- SQL Server ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "expected", "canonical"), [
    ("orders", QueueAddress("orders"), "orders"),
    ("orders@dbo", QueueAddress("orders", "dbo"), "orders@[dbo]"),
    ("orders@[dbo]", QueueAddress("orders", "dbo"), "orders@[dbo]"),
    ("orders@[sales]@[shop]", QueueAddress("orders", "sales", "shop"), "orders@[sales]@[shop]"),
    ("orders@sales@shop", QueueAddress("orders", "sales", "shop"), "orders@[sales]@[shop]"),
    ("[orders]@[dbo]", QueueAddress("orders", "dbo"), "orders@[dbo]"),
    ("my queue@[my schema]@[my db]", QueueAddress("my queue", "my schema", "my db"),
     "my queue@[my schema]@[my db]"),
    ("q@[a]]b]", QueueAddress("q", "a]b"), "q@[a]]b]"),
    ("q@[at@sign]@[dot.ted]", QueueAddress("q", "at@sign", "dot.ted"), "q@[at@sign]@[dot.ted]"),
    ("dots.in.name@[s'q]@[d\"q]", QueueAddress("dots.in.name", "s'q", 'd"q'), "dots.in.name@[s'q]@[d\"q]"),
    ("名前@[スキーマ]", QueueAddress("名前", "スキーマ"), "名前@[スキーマ]"),
    ("a]b", QueueAddress("a]b"), "a]b"),
])
def test_mssql_parse_and_format(text, expected, canonical):
    assert parse_mssql(text) == expected
    assert format_mssql(expected) == canonical
    assert parse_mssql(canonical) == expected


def test_mssql_format_fills_default_schema_when_only_catalog_is_given():
    assert format_mssql(QueueAddress("q", None, "shop")) == "q@[dbo]@[shop]"


@pytest.mark.parametrize("name", [n for n in ODD_NAMES if "@" not in n])
def test_mssql_odd_names_round_trip(name):
    for address in (QueueAddress(name), QueueAddress(name, name), QueueAddress(name, name, name)):
        assert parse_mssql(format_mssql(address)) == address


@pytest.mark.parametrize(("text", "rule"), [
    ("", "empty"),
    ("@dbo", "table name in address '@dbo' is empty"),
    ("orders@", "schema in address 'orders@' is empty"),
    ("orders@[]", "schema in address 'orders@[]' is empty"),
    ("orders@@[shop]", "schema in address 'orders@@[shop]' is empty"),
    ("orders@[dbo]@", "catalog in address 'orders@[dbo]@' is empty"),
    ("ord\x00ers", "NUL"),
    ("orders@[d\x00bo]", "NUL"),
    ("   ", "only whitespace"),
    ("q@[  ]", "only whitespace"),
    ("x" * (MSSQL_MAX_IDENTIFIER + 1), "at most 128"),
    ("q@[" + "s" * (MSSQL_MAX_IDENTIFIER + 1) + "]", "at most 128"),
    ("q@[dbo]@[" + "c" * (MSSQL_MAX_IDENTIFIER + 1) + "]", "at most 128"),
    ("a@b@c@d", "'@' is not allowed in a table name"),
    ("a@[b]@[c]@[d]", "4 parts"),
    ("orders@[dbo", "unclosed '['"),
    ("orders@[dbo]@[shop", "unclosed '['"),
    ("orders@[dbo]x", "expected '@' after ']'"),
    ("orders@db]o", "must be written as [name]"),
    ("[a]b]", "unexpected text after ']'"),
])
def test_mssql_broken_rules_refused_naming_the_rule(text, rule):
    with pytest.raises(InvalidAddressError) as info:
        parse_mssql(text)
    assert rule in str(info.value)


def test_mssql_longest_legal_names_accepted():
    name = "x" * MSSQL_MAX_IDENTIFIER
    assert parse_mssql(f"{name}@[{name}]@[{name}]") == QueueAddress(name, name, name)


@pytest.mark.parametrize("value", [None, 5, b"orders", QueueAddress("x")])
def test_non_text_address_refused(value):
    for parse in (parse_mssql, parse_postgres, parse_sqlite):
        with pytest.raises(InvalidAddressError, match="must be text"):
            parse(value)


@pytest.mark.parametrize("table", ["[x]", "[", "[x", "[a]]b]", "[[x]]"])
def test_mssql_table_starting_with_bracket_round_trips(table):
    address = QueueAddress(table, "dbo")
    text = format_mssql(address)
    assert text.startswith("[")  # written bracketed, so that it parses back with its brackets
    assert parse_mssql(text) == address
    assert parse_mssql(format_mssql(QueueAddress(table))) == QueueAddress(table)


def test_mssql_dialect_refuses_at_sign_in_an_address_object():
    dialect = mssql_dialect()
    with pytest.raises(InvalidAddressError, match="'@'"):
        dialect.parse_address(QueueAddress("a@b"))
    with pytest.raises(InvalidAddressError, match="at most 128"):
        dialect.parse_address(QueueAddress("x" * 129))
    with pytest.raises(InvalidAddressError, match="empty"):
        dialect.parse_address(QueueAddress("q", ""))


@pytest.mark.parametrize(("text", "rule"), [
    ("[orders", "unclosed '['"),
    ("[orders@[dbo]", "contains '@'"),
    ("[orders]x@[dbo]", "unexpected text after ']'"),
    ("[a@b]@[dbo]", "contains '@'"),
])
def test_mssql_bracketed_table_rules(text, rule):
    with pytest.raises(InvalidAddressError) as info:
        parse_mssql(text)
    assert rule in str(info.value)


# -- PostgreSQL ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "expected", "canonical"), [
    ("orders", QueueAddress("orders"), "orders"),
    ("sales.orders", QueueAddress("orders", "sales"), "sales.orders"),
    ('"sales"."orders"', QueueAddress("orders", "sales"), "sales.orders"),
    ('"Sales"."Orders"', QueueAddress("Orders", "Sales"), "Sales.Orders"),
    ('"my schema"."my queue"', QueueAddress("my queue", "my schema"), '"my schema"."my queue"'),
    ('"dots.in.name"', QueueAddress("dots.in.name"), '"dots.in.name"'),
    ('"a""b"', QueueAddress('a"b'), '"a""b"'),
    ('"s"."a""b"', QueueAddress('a"b', "s"), 's."a""b"'),
    ("s.\"it's\"", QueueAddress("it's", "s"), "s.\"it's\""),
    ("ünïcødé", QueueAddress("ünïcødé"), "ünïcødé"),
    ('"名前 1"', QueueAddress("名前 1"), '"名前 1"'),
    ('"br]ack[et"', QueueAddress("br]ack[et"), '"br]ack[et"'),
])
def test_postgres_parse_and_format(text, expected, canonical):
    assert parse_postgres(text) == expected
    assert format_postgres(expected) == canonical
    assert parse_postgres(canonical) == expected


@pytest.mark.parametrize("name", ODD_NAMES)
def test_postgres_odd_names_round_trip(name):
    for address in (QueueAddress(name), QueueAddress(name, name)):
        assert parse_postgres(format_postgres(address)) == address


@pytest.mark.parametrize(("text", "rule"), [
    ("", "empty"),
    ('""', "table name in address '\"\"' is empty"),
    ("s.", "table name in address 's.' is empty"),
    (".t", "schema in address '.t' is empty"),
    ('"".t', "schema in address '\"\".t' is empty"),
    ("ord\x00ers", "NUL"),
    ('"s\x00"."t"', "NUL"),
    ("  ", "only whitespace"),
    ("x" * (POSTGRES_MAX_TABLE_BYTES + 1), "at most 55"),
    ("é" * 28, "56 bytes"),  # 28 characters, 56 bytes
    ("s" * (POSTGRES_MAX_IDENTIFIER_BYTES + 1) + ".t", "at most 63"),
    ("a.b.c", "3 parts"),
    ('"a"."b"."c"', "3 parts"),
    ('"orders', "unclosed '\"'"),
    ('"s"."orders', "unclosed '\"'"),
    ('or"ders', "must be quoted"),
    ('"s"x.t', "expected '.'"),
])
def test_postgres_broken_rules_refused_naming_the_rule(text, rule):
    with pytest.raises(InvalidAddressError) as info:
        parse_postgres(text)
    assert rule in str(info.value)


def test_postgres_longest_legal_names_accepted():
    assert parse_postgres("x" * POSTGRES_MAX_TABLE_BYTES) == QueueAddress("x" * POSTGRES_MAX_TABLE_BYTES)
    assert parse_postgres("é" * 27).table == "é" * 27  # 54 bytes
    schema = "s" * POSTGRES_MAX_IDENTIFIER_BYTES
    assert parse_postgres(f"{schema}.t") == QueueAddress("t", schema)


# -- SQLite ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ODD_NAMES + ['"quoted"', "a.b.c", "x@[y]"])
def test_sqlite_whole_text_is_the_table_name(name):
    assert parse_sqlite(name) == QueueAddress(name)
    assert format_sqlite(QueueAddress(name)) == name


@pytest.mark.parametrize(("text", "rule"), [
    ("", "empty"),
    ("a\x00b", "NUL"),
    (" \t", "only whitespace"),
    ("x" * (SQLITE_MAX_TABLE + 1), "at most 128"),
    ("sqlite_queue", "reserves"),
    ("SQLite_Queue", "reserves"),
])
def test_sqlite_broken_rules_refused_naming_the_rule(text, rule):
    with pytest.raises(InvalidAddressError) as info:
        parse_sqlite(text)
    assert rule in str(info.value)


# -- through the dialect objects -------------------------------------------------------------------
@pytest.mark.parametrize(("dialect_name", "text", "qualified"), [
    ("postgres", "orders", '"public"."orders"'),
    ("postgres", '"my schema"."a""b"', '"my schema"."a""b"'),
    ("postgres", "s.\"it's\"", '"s"."it\'s"'),
    ("sqlite", "orders", '"orders"'),
    ("sqlite", 'a"b c', '"a""b c"'),
    ("sqlite", "x.y", '"x.y"'),
])
def test_dialect_parse_format_qualified(dialect_name, text, qualified):
    dialect = get_dialect(dialect_name)
    address = dialect.parse_address(text)
    assert dialect.qualified(address) == qualified
    assert dialect.parse_address(dialect.format_address(address)) == address
    assert dialect.parse_address(address) == address  # an address object is validated again


@pytest.mark.parametrize(("text", "qualified"), [
    ("orders", "[dbo].[orders]"),
    ("orders@[sales]", "[sales].[orders]"),
    ("orders@[sales]@[shop]", "[shop].[sales].[orders]"),
    ("q@[a]]b]", "[a]]b].[q]"),
    ("a]b@[x y]@[c.d]", "[c.d].[x y].[a]]b]"),
])
def test_mssql_dialect_parse_format_qualified(text, qualified):
    dialect = mssql_dialect()
    address = dialect.parse_address(text)
    assert dialect.parse_address(dialect.format_address(address)) == address
    # without a catalog the connection's database is meant: it may be left out of the SQL text
    assert dialect.qualified(address).endswith(qualified)


@pytest.mark.parametrize("dialect_name", ["postgres", "sqlite"])
def test_dialect_refuses_broken_addresses(dialect_name):
    dialect = get_dialect(dialect_name)
    for text in ("", "a\x00b", "x" * 200):
        with pytest.raises(InvalidAddressError):
            dialect.parse_address(text)


def test_mssql_dialect_refuses_broken_addresses():
    dialect = mssql_dialect()
    for text in ("", "a\x00b", "x" * 200, "a@b@c@d", "q@[dbo"):
        with pytest.raises(InvalidAddressError):
            dialect.parse_address(text)


def test_quote_never_lets_a_name_escape_its_identifier():
    for dialect_name in ("postgres", "sqlite"):
        dialect = get_dialect(dialect_name)
        quoted = dialect.quote('x"; DROP TABLE y; --')
        assert quoted == '"x""; DROP TABLE y; --"'


# -- round-trip properties -------------------------------------------------------------------------
def _legal(text: str) -> bool:
    return text != "" and "\x00" not in text and text.strip() != ""


names = st.text(min_size=1, max_size=40).filter(_legal)
PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])


@PROPERTY
@given(table=names.filter(lambda t: "@" not in t), schema=st.none() | names, catalog=st.none() | names)
@example(table="a]b", schema="x]]y", catalog="@[z]@")
@example(table="[x]", schema=None, catalog=None)
@example(table="[", schema="]", catalog="[")
@example(table="名前", schema="スキーマ", catalog=None)
def test_mssql_round_trip_property(table, schema, catalog):
    # a catalog needs a schema in the text form (format writes the default, dbo): generate both
    if catalog is not None and schema is None:
        schema = "dbo"
    address = QueueAddress(table, schema, catalog)
    assert parse_mssql(format_mssql(address)) == address


@PROPERTY
@given(table=names.filter(lambda t: len(t.encode()) <= POSTGRES_MAX_TABLE_BYTES),
       schema=st.none() | names.filter(lambda s: len(s.encode()) <= POSTGRES_MAX_IDENTIFIER_BYTES))
@example(table='"', schema=".")
@example(table="a.b", schema='""')
def test_postgres_round_trip_property(table, schema):
    address = QueueAddress(table, schema)
    assert parse_postgres(format_postgres(address)) == address
    dialect = get_dialect("postgres")
    assert dialect.parse_address(dialect.format_address(address)) == address


@PROPERTY
@given(table=st.text(min_size=1, max_size=SQLITE_MAX_TABLE).filter(_legal)
       .filter(lambda t: not t.lower().startswith("sqlite_")))
def test_sqlite_round_trip_property(table):
    address = QueueAddress(table)
    assert parse_sqlite(format_sqlite(address)) == address
    dialect = get_dialect("sqlite")
    assert dialect.parse_address(dialect.format_address(address)) == address


@PROPERTY
@given(table=names.filter(lambda t: "@" not in t), schema=st.none() | names, catalog=st.none() | names)
def test_mssql_dialect_round_trip_property(table, schema, catalog):
    dialect = mssql_dialect()
    address = QueueAddress(table, schema or ("dbo" if catalog else None), catalog)
    assert dialect.parse_address(address) == address
    assert dialect.parse_address(dialect.format_address(address)) == address


# -- odd names on real databases -------------------------------------------------------------------
@pytest.mark.parametrize("name", ODD_NAMES)
def test_odd_names_create_send_receive(db, name):
    transport = db.transport
    queue = db.q(name)
    transport.create_queues([queue, db.q("error")], delayed=True)
    assert transport.exists(queue)
    ids = transport.send_many(queue, [OutgoingMessage(b"one", {"k": name}), b"two"])
    assert transport.peek(queue) == 2
    received = transport.receive(queue, 10)
    assert [m.id for m in received] == ids
    assert [m.body for m in received] == [b"one", b"two"]
    assert own(received[0].headers) == {"k": name}
    assert transport.receive(queue) == []
    assert transport.check(queue) == []
    assert transport.name(queue) in transport.discover()
    # the delayed table beside it works too
    transport.send(queue, OutgoingMessage(b"later", delay=0.001))
    import time

    time.sleep(0.02)
    assert transport.move_due_delayed(queue) == 1
    assert [m.body for m in transport.receive(queue)] == [b"later"]


def test_odd_schema_name_on_postgres(db):
    if db.kind != "postgres":
        pytest.skip("schemas are a PostgreSQL feature here")
    schema = 'odd "sch.ema" ' + uuid.uuid4().hex[:6]
    quoted = '"' + schema.replace('"', '""') + '"'
    db.sql(f"CREATE SCHEMA {quoted}")
    try:
        queue = format_postgres(QueueAddress("q ü", schema))
        db.transport.create_queue(queue, delayed=True)
        assert db.sql("SELECT count(*) FROM pg_tables WHERE schemaname = %s", (schema,)) == [(2,)]
        sent = db.transport.send(queue, b"x")
        assert [m.id for m in db.transport.receive(queue)] == [sent]
        assert queue in db.transport.discover()
    finally:
        db.sql(f"DROP SCHEMA {quoted} CASCADE")
