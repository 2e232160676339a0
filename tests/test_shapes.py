"""Table shapes as NServiceBus.Transport.PostgreSql 9.x makes them, the migration of 0.1 tables, never a NULL body,
name collisions, and time-ordered native Ids: on SQLite and the real PostgreSQL.

Old-shape tables are built from the 0.1 DDL kept in ``tests/data`` (the provider's own SQL files before this
change), never from the current files.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

from airflow_sqlqueue.cli.main import main as cli_main
from airflow_sqlqueue.transport import OutgoingMessage, ddl_script
from airflow_sqlqueue.transport.common.errors import InvalidAddressError, NameCollisionError, NotAQueueError
from airflow_sqlqueue.transport.dialects.sqlfile import parse_statements
from airflow_sqlqueue.transport.wire import headers as h
from airflow_sqlqueue.transport.wire.ids import new_id

DATA = Path(__file__).parent / "data"
DOTNET_HEADERS = '{"NServiceBus.EnclosedMessageTypes":"X"}'


# -- helpers -----------------------------------------------------------------------------------------------
def qualified(db, name: str, *, delayed: bool = False) -> str:
    dialect = db.transport.dialect
    address = db.transport.address(db.q(name))
    return dialect.qualified(dialect.delayed_address(address) if delayed else address)


def ph(db) -> str:
    return "%s" if db.kind == "postgres" else "?"


def make_legacy(db, name: str, *, delayed: bool = True, statements: tuple[str, ...] | None = None) -> None:
    """A queue (and delayed store) exactly as airflow-sqlqueue 0.1 created it."""
    dialect = db.transport.dialect
    address = db.transport.address(db.q(name))
    legacy = parse_statements((DATA / f"sqlqueue-0.1-{dialect.name}.sql").read_text(encoding="utf-8"))
    ids = {**dialect.identifiers(address), "old_due_index": dialect.quote(f"{address.table}_due_ix")}
    names = statements or tuple(n for n in legacy if delayed or "delayed" not in n)
    for statement in names:
        db.sql(legacy[statement].text.format_map(ids))


def null_bodies(db, *names: str, delayed: tuple[str, ...] = ()) -> int:
    tables = [qualified(db, n) for n in names] + [qualified(db, n, delayed=True) for n in delayed]
    return sum(db.sql(f"SELECT count(*) FROM {t} WHERE body IS NULL")[0][0] for t in tables)  # noqa: S608


def bodies(db, name: str, *, delayed: bool = False) -> list[bytes]:
    return sorted(bytes(b) for (b,) in db.sql(f"SELECT body FROM {qualified(db, name, delayed=delayed)}"))  # noqa: S608


# -- shapes ------------------------------------------------------------------------------------------------
def test_postgres_tables_have_upstreams_shape(db):
    if db.kind != "postgres":
        pytest.skip("PostgreSQL shapes")
    db.transport.create_queue(db.q("orders"), delayed=True)
    columns = db.sql("SELECT table_name, column_name, data_type, is_nullable, column_default "
                     "FROM information_schema.columns WHERE table_schema = %s ORDER BY table_name, ordinal_position",
                     (db.schema,))
    assert [c[:4] for c in columns] == [
        ("orders", "id", "uuid", "NO"), ("orders", "expires", "timestamp without time zone", "YES"),
        ("orders", "headers", "text", "NO"), ("orders", "body", "bytea", "YES"), ("orders", "seq", "integer", "NO"),
        ("orders.Delayed", "id", "uuid", "NO"), ("orders.Delayed", "headers", "text", "NO"),
        ("orders.Delayed", "body", "bytea", "YES"), ("orders.Delayed", "due", "timestamp with time zone", "NO")]
    assert columns[5][4] == "gen_random_uuid()"
    constraints = db.sql("SELECT c.conrelid::regclass::text, c.contype, a.attname FROM pg_constraint AS c "
                         "JOIN pg_attribute AS a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1] "
                         "JOIN pg_namespace AS n ON n.oid = c.connamespace WHERE n.nspname = %s ORDER BY 1, 2",
                         (db.schema,))
    assert sorted((t.split(".", 1)[1], k, col) for t, k, col in constraints) == [
        ('"orders.Delayed"', "p", "id"), ("orders", "p", "id"), ("orders", "u", "seq")]
    indexes = db.sql("SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = %s ORDER BY 1, 2",
                     (db.schema,))
    assert [(t, i) for t, i, _ in indexes] == [("orders", "orders_exp_ix"), ("orders", "orders_pkey"),
                                               ("orders", "orders_seq_key"), ("orders.Delayed", "orders.Delayed_Due"),
                                               ("orders.Delayed", "orders.Delayed_pkey")]
    assert "WHERE (expires IS NOT NULL)" in indexes[0][2] and indexes[3][2].endswith("(due)")
    [(options,)] = db.sql("SELECT reloptions FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace "
                          "WHERE n.nspname = %s AND c.relname = 'orders.Delayed'", (db.schema,))
    assert options == ["fillfactor=100"]
    assert db.transport.check(db.q("orders")) == []


def test_a_queue_whose_seq_was_widened_past_2_31_keeps_flowing(db):
    """Upstream's ``Seq serial`` runs out after 2**31 messages; a DBA widens it to bigint. Rows past that
    position must still be received, released and deleted in batches (a key list bound as int4 would make
    every batch fail, and the queue would stop)."""
    if db.kind != "postgres":
        pytest.skip("PostgreSQL column types")
    t, q = db.transport, db.q("orders")
    t.create_queue(q)
    table = qualified(db, "orders")
    db.sql(f"ALTER TABLE {table} ALTER COLUMN seq TYPE bigint")
    [(sequence,)] = db.sql("SELECT pg_get_serial_sequence(%s, 'seq')", (table,))
    db.sql(f"ALTER SEQUENCE {sequence} AS bigint RESTART WITH 3000000000")
    t.send_many(q, [b"a", b"b", b"c", b"d"])
    assert [s for (s,) in db.sql(f"SELECT seq FROM {table} ORDER BY seq")][0] == 3_000_000_000  # noqa: S608

    seen: list[bytes] = []
    summary = t.process(q, lambda m, c: seen.append(m.body), batch_size=10)  # one batch: deleted by a key list
    assert summary.succeeded == 4 and seen == [b"a", b"b", b"c", b"d"]
    assert db.sql(f"SELECT count(*) FROM {table}") == [(0,)]  # noqa: S608

    t.send_many(q, [b"e", b"f", b"g"])
    with t.claim(q, 10) as claim:  # release one, ack the others: one delete by a key list
        first, *others = claim.messages
        claim.release(first)
        for message in others:
            claim.ack(message)
    assert [b for (b,) in db.sql(f"SELECT body FROM {table}")] == [b"e"]  # noqa: S608

def test_sqlite_ids_are_unique(db):
    if db.kind != "sqlite":
        pytest.skip("SQLite shape")
    db.transport.create_queue("orders")
    [(sql,)] = db.sql("SELECT sql FROM sqlite_master WHERE name = 'orders'")
    assert "id TEXT NOT NULL UNIQUE" in sql
    import sqlite3

    db.sql("INSERT INTO orders (id, headers, body) VALUES ('a', '{}', X'')")
    with pytest.raises(sqlite3.IntegrityError):
        db.sql("INSERT INTO orders (id, headers, body) VALUES ('a', '{}', X'')")


def test_delayed_rows_move_by_id_and_keep_it(db):
    if db.kind != "postgres":
        pytest.skip("the delayed store has an id on PostgreSQL (upstream's shape)")
    t, q = db.transport, db.q("orders")
    t.create_queue(q, delayed=True)
    store = qualified(db, "orders", delayed=True)
    # a row as a .NET endpoint stores it: explicit columns, the id from the column default, a NULL body
    headers = serialize_headers_for(t.name(q))
    [(dotnet_id,)] = db.sql(f"INSERT INTO {store} (headers, body, due) VALUES (%s, NULL, now() - interval '1 second') "  # noqa: S608
                            "RETURNING id", (headers,))
    t.send(q, OutgoingMessage(b"ours", delay=0.001))
    [(our_id,)] = db.sql(f"SELECT id FROM {store} WHERE body = 'ours'::bytea")  # noqa: S608
    time.sleep(0.01)
    assert t.move_due_delayed(q) == 2
    moved = dict(db.sql(f"SELECT id, body FROM {qualified(db, 'orders')}"))  # noqa: S608
    assert moved == {dotnet_id: b"", our_id: b"ours"}
    received = {m.id: m.body for m in t.receive(q, 10)}
    assert received == {dotnet_id: b"", our_id: b"ours"}


def serialize_headers_for(queue_name: str) -> str:
    return h.serialize_headers({h.ENCLOSED_MESSAGE_TYPES: "X", h.FORWARD_DESTINATION: queue_name})


# -- never a NULL body ---------------------------------------------------------------------------------------
def test_no_insert_path_writes_a_null_body(queues):
    db = queues
    t, orders, replies, error = db.transport, db.q("orders"), db.q("replies"), db.q("error")
    p = ph(db)
    # send, batch send, delayed send
    t.send(orders, OutgoingMessage(None))
    t.send_many(orders, [OutgoingMessage(None), OutgoingMessage(None, {"k": "v"})])
    t.send_many(orders, [OutgoingMessage(None, delay=0.001), OutgoingMessage(None, delay=0.001)])
    assert null_bodies(db, "orders", delayed=("orders",)) == 0
    assert len(bodies(db, "orders")) == 3 and len(bodies(db, "orders", delayed=True)) == 2
    # the delayed move (SQL-side on PostgreSQL): a row a .NET endpoint stored with a NULL body
    if db.kind == "postgres":
        db.sql(f"INSERT INTO {qualified(db, 'orders', delayed=True)} (headers, body, due) "  # noqa: S608
               "VALUES (%s, NULL, now() - interval '1 second')", (serialize_headers_for(t.name(orders)),))
    else:
        db.sql(f"INSERT INTO {qualified(db, 'orders', delayed=True)} (headers, body, due) "  # noqa: S608
               "VALUES (?, NULL, '2000-01-01 00:00:00.000')", (serialize_headers_for(t.name(orders)),))
    time.sleep(0.01)
    assert t.move_due_delayed(orders) == 3
    assert null_bodies(db, "orders") == 0
    assert len(t.receive(orders, 100)) == 6
    # rows already holding NULL (written by other programs): one fails in its handler (error move), one is poison
    # (error move), one is forwarded, one is received
    forwarder = db.new_transport(forward_to=[replies])
    rows = [({"fail": "1"}, "fails"), (None, "poison"), ({h.FORWARD_DESTINATION: t.name(replies)}, "forward"),
            ({}, "ok")]
    for headers, label in rows:
        text = "not json" if headers is None else h.serialize_headers({**headers, "label": label})
        db.sql(f"INSERT INTO {qualified(db, 'orders')} (id, expires, headers, body) "  # noqa: S608
               f"VALUES ({p}, NULL, {p}, NULL)", (str(uuid.uuid4()), text))
    handled = []

    def handler(message, context):
        if message.headers.get("fail"):
            raise RuntimeError("handler failed")
        handled.append((message.headers.get("label"), message.body))

    summary = forwarder.process(orders, handler, immediate_retries=0)
    assert summary.failed == 1 and handled in ([("ok", None)], [("ok", b"")])  # a NULL row is still received
    assert len(bodies(db, "error")) == 2 and len(bodies(db, "replies")) == 1
    assert null_bodies(db, "orders", "replies", "error") == 0
    # retry from the error queue: both go back to orders
    result = t.retry_errors(error_queue=error, allowed=[orders])
    assert result.total_returned == 2
    assert null_bodies(db, "orders", "replies", "error") == 0
    # the handler failure comes back as a message; the poison row's original headers are poison again
    assert [m.body for m in t.receive(orders, 10)] == [b""]
    assert bodies(db, "error") == [b""] and null_bodies(db, "orders", "replies", "error") == 0
    forwarder.close()


def test_an_id_the_table_already_holds_is_stored_under_a_new_one(queues):
    """Ids are unique (upstream's primary key): a copy that meets its Id again (a second dead-letter of the same
    message, a retried message) goes in under a new Id instead of failing the receive or being lost."""
    db = queues
    t, p = db.transport, ph(db)
    same = str(uuid.uuid4())
    db.sql(f"INSERT INTO {qualified(db, 'error')} (id, expires, headers, body) VALUES ({p}, NULL, '{{}}', {p})",  # noqa: S608
           (same, b"first"))
    db.sql(f"INSERT INTO {qualified(db, 'orders')} (id, expires, headers, body) VALUES ({p}, NULL, 'poison', {p})",  # noqa: S608
           (same, b"second"))
    with t.receiving(db.q("orders"), 10) as batch:
        assert batch.stats.poison == 1
    assert bodies(db, "error") == [b"first", b"second"]
    assert len({i for (i,) in db.sql(f"SELECT id FROM {qualified(db, 'error')}")}) == 2  # noqa: S608


# -- creation beside a .NET endpoint ------------------------------------------------------------------------
DOTNET_QUEUE = ('CREATE TABLE IF NOT EXISTS {queue} (Id uuid NOT NULL PRIMARY KEY, Expires TIMESTAMP, '
                'Headers TEXT NOT NULL, Body BYTEA, Seq serial NOT NULL UNIQUE)')
DOTNET_DELAYED = ('CREATE TABLE IF NOT EXISTS {delayed} (Id uuid NOT NULL DEFAULT gen_random_uuid() PRIMARY KEY, '
                  'Headers text NOT NULL, Body bytea, Due timestamptz NOT NULL) WITH (fillfactor=100); '
                  'CREATE INDEX IF NOT EXISTS {due_index} ON {delayed} (Due)')


def test_creation_tolerates_a_dotnet_endpoint_creating_at_the_same_moment(db):
    if db.kind != "postgres":
        pytest.skip("concurrent DDL on PostgreSQL")
    import psycopg

    from tests.conftest import PG_URL

    t = db.transport
    errors: list[BaseException] = []
    dotnet_clashes = []

    def dotnet(ids: dict[str, str], barrier: threading.Barrier) -> None:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            barrier.wait()
            for text in (DOTNET_QUEUE, DOTNET_DELAYED):
                try:
                    with conn.transaction():
                        conn.execute(text.format_map(ids))
                except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateTable,
                        psycopg.errors.DuplicateObject) as exc:  # what upstream ignores
                    dotnet_clashes.append(exc)

    def ours(name: str, barrier: threading.Barrier) -> None:
        other = db.new_transport()
        try:
            barrier.wait()
            other.create_queue(name, delayed=True)
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)
        finally:
            other.close()

    for round_ in range(8):
        name = db.q(f"race{round_}")
        ids = t.dialect.identifiers(t.address(name))
        barrier = threading.Barrier(4)
        threads = [threading.Thread(target=dotnet, args=(ids, barrier)) for _ in range(2)]
        threads += [threading.Thread(target=ours, args=(name, barrier)) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert t.check(name) == []
        t.send(name, b"x")
        assert [m.body for m in t.receive(name)] == [b"x"]


# -- migration of 0.1 tables --------------------------------------------------------------------------------
def test_check_reports_0_1_tables(db):
    make_legacy(db, "orders")
    codes = sorted(f.code for f in db.transport.check(db.q("orders")))
    if db.kind == "postgres":
        assert codes == ["legacy_delayed_table", "missing_primary_key", "missing_seq_unique"]
    else:
        assert codes == ["missing_unique_id"]
    assert all(f.repairable for f in db.transport.check(db.q("orders")))


def test_repair_migrates_0_1_tables_online_without_losing_a_message(db):
    t, q = db.transport, db.q("orders")
    make_legacy(db, "orders")
    t.create_queue(db.q("error"))
    p = ph(db)
    sent: set[bytes] = set()
    # rows of every kind a 0.1 table holds: sends, a delayed backlog, two rows sharing one Id
    batch = [f"pre-{i}".encode() for i in range(200)]
    t.send_many(q, batch)
    sent.update(batch)
    later = [f"delayed-{i}".encode() for i in range(20)]
    t.send_many(q, [OutgoingMessage(b, delay=0.001) for b in later])
    sent.update(later)
    twin = str(uuid.uuid4())
    for body in (b"twin-1", b"twin-2"):
        db.sql(f"INSERT INTO {qualified(db, 'orders')} (id, expires, headers, body) "  # noqa: S608
               f"VALUES ({p}, NULL, '{{}}', {p})", (twin, body))
        sent.add(body)
    # the 0.1 delayed store still works before the repair
    time.sleep(0.01)
    assert t.move_due_delayed(q, batch_size=5) == 20
    t.send(q, OutgoingMessage(b"delayed-after", delay=0.001))
    sent.add(b"delayed-after")
    # a sender keeps sending (immediate and delayed) while the repair runs
    stop = threading.Event()
    during: list[bytes] = []
    failures: list[BaseException] = []

    def sender() -> None:
        other = db.new_transport()
        i = 0
        try:
            while not stop.is_set() or i < 20:
                body = f"during-{i}".encode()
                other.send(q, OutgoingMessage(body, delay=0.001) if i % 5 == 0 else OutgoingMessage(body))
                during.append(body)
                i += 1
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)
        finally:
            other.close()

    thread = threading.Thread(target=sender)
    thread.start()
    try:
        assert t.check(q, repair=True) == []
    finally:
        stop.set()
        thread.join()
    assert failures == []
    sent.update(during)
    assert len(during) >= 20
    time.sleep(0.01)
    t.move_due_delayed(q)
    received = []
    while True:
        got = t.receive(q, 100)
        if not got:
            break
        received += [m.body for m in got]
    assert sorted(received) == sorted(sent)  # every message once, nothing lost, nothing twice
    assert t.check(q) == []
    if db.kind == "postgres":
        indexes = db.sql("SELECT tablename, indexname FROM pg_indexes WHERE schemaname = %s ORDER BY 1, 2",
                         (db.schema,))
        assert indexes == [("error", "error_exp_ix"), ("error", "error_pkey"), ("error", "error_seq_key"),
                           ("orders", "orders_exp_ix"), ("orders", "orders_pkey"), ("orders", "orders_seq_key"),
                           ("orders.Delayed", "orders.Delayed_Due"), ("orders.Delayed", "orders.Delayed_pkey")]
        columns = db.sql("SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = %s "
                         "AND table_name = 'orders.Delayed' ORDER BY column_name", (db.schema,))
        assert columns == [("body", "bytea"), ("due", "timestamp with time zone"), ("headers", "text"),
                           ("id", "uuid")]


def test_repair_rebuilds_an_index_an_interrupted_build_left_invalid(db):
    if db.kind != "postgres":
        pytest.skip("CONCURRENTLY builds are PostgreSQL's")
    t, q = db.transport, db.q("orders")
    make_legacy(db, "orders", delayed=False)
    # an interrupted CREATE UNIQUE INDEX CONCURRENTLY leaves an invalid index: make one (duplicate Ids)
    twin = str(uuid.uuid4())
    for body in (b"a", b"b"):
        db.sql(f"INSERT INTO {qualified(db, 'orders')} (id, expires, headers, body) VALUES (%s, NULL, '{{}}', %s)",  # noqa: S608
               (twin, body))
    import psycopg

    with pytest.raises(psycopg.errors.UniqueViolation):
        db.sql(f'CREATE UNIQUE INDEX CONCURRENTLY "orders_pkey" ON {qualified(db, "orders")} (id)')
    assert db.sql("SELECT indisvalid FROM pg_index WHERE indexrelid = %s::regclass",
                  (f'"{db.schema}"."orders_pkey"',)) == [(False,)]
    assert t.check(q, repair=True) == []
    assert sorted(m.body for m in t.receive(q, 10)) == [b"a", b"b"]


def test_ddl_migrate_script_migrates_0_1_tables(db, capsys):
    t, q = db.transport, db.q("orders")
    make_legacy(db, "orders")
    t.send_many(q, [b"one", b"two"])
    script = ddl_script(db.kind, [q], delayed=True, migrate=True)
    assert cli_main(["ddl", q, "--dialect", db.kind, "--delayed", "--migrate"]) == 0
    assert capsys.readouterr().out == script
    if db.kind == "postgres":
        import psycopg

        from tests.conftest import PG_URL

        with psycopg.connect(PG_URL, autocommit=True) as conn:  # as a DBA runs it: psql, statement by statement
            for part in script.split(";\n"):
                sql = "\n".join(line for line in part.splitlines() if not line.startswith("--")).strip()
                if sql:
                    conn.execute(sql)
    else:
        import sqlite3

        conn = sqlite3.connect(db.url[len("sqlite:///"):])
        conn.executescript(script)
        conn.close()
    assert t.check(q) == []
    assert sorted(m.body for m in t.receive(q, 10)) == [b"one", b"two"]
    assert "nothing to migrate" in ddl_script("mssql", ["orders"], migrate=True)


# -- name collisions and tables that are not queues -----------------------------------------------------------
def test_an_index_name_held_by_another_object_is_a_clear_error_on_create(db):
    t = db.transport
    other = qualified(db, "other")
    db.sql(f"CREATE TABLE {other} (x integer)")
    db.sql(f'CREATE INDEX "orders_exp_ix" ON {other} (x)')
    with pytest.raises(NameCollisionError) as info:
        t.create_queue(db.q("orders"))
    assert "orders_exp_ix" in str(info.value) and "other" in str(info.value)
    assert not t.exists(db.q("orders"))  # nothing was created


def test_an_index_name_held_by_another_object_is_a_finding_not_ok(db):
    t = db.transport
    other = qualified(db, "other")
    db.sql(f"CREATE TABLE {other} (x integer)")
    db.sql(f'CREATE INDEX "orders_exp_ix" ON {other} (x)')
    make_legacy(db, "orders", delayed=False)  # 0.1 created the table and skipped the index without a word
    findings = {f.code: f for f in t.check(db.q("orders"))}
    assert "index_name_taken" in findings and "missing_expires_index" not in findings
    assert not findings["index_name_taken"].repairable and "orders_exp_ix" in findings["index_name_taken"].message
    after = {f.code for f in t.check(db.q("orders"), repair=True)}
    assert after == {"index_name_taken"}


def test_a_queue_named_like_another_queues_index_is_refused(db):
    t = db.transport
    t.create_queue(db.q("orders"))
    with pytest.raises(NotAQueueError) as info:
        t.create_queue(db.q("orders_exp_ix"))
    assert "index" in str(info.value) and "orders" in str(info.value)


def test_a_table_that_is_not_a_queue_is_refused_with_what_is_wrong(db):
    t = db.transport
    plain = db.q("plain")
    db.sql(f"CREATE TABLE {qualified(db, 'plain')} (a integer, b text)")
    with pytest.raises(NotAQueueError) as info:
        t.create_queue(plain)
    assert "not a queue" in str(info.value) and "id, expires, headers, body, seq" in str(info.value)
    for attempt in (lambda: t.send(plain, b"x"), lambda: t.receive(plain), lambda: t.send_many(plain, [b"a", b"b"])):
        with pytest.raises(NotAQueueError) as info:
            attempt()
        assert "not a queue table" in str(info.value)
    assert db.sql(f"SELECT count(*) FROM {qualified(db, 'plain')}") == [(0,)]  # noqa: S608


def test_system_tables_are_never_queues(queues):
    db = queues
    t = db.transport
    if db.kind == "sqlite":  # SQLite's own names are refused as addresses already
        with pytest.raises(InvalidAddressError, match="reserves"):
            t.receive("sqlite_master")
        return
    system = '"pg_catalog"."pg_class"'
    for attempt in (lambda: t.receive(system), lambda: t.send(system, b"x"), lambda: t.create_queue(system),
                    lambda: t.peek(system), lambda: t.receive('"information_schema"."tables"')):
        with pytest.raises(NotAQueueError) as info:
            attempt()
        assert "never" in str(info.value)
    # a row forwarding to one goes to the error queue with the reason, and the queue keeps flowing
    forwarder = db.new_transport(forward_to=[system])
    t.send(db.q("orders"), OutgoingMessage(b"fwd", {h.FORWARD_DESTINATION: system}))
    t.send(db.q("orders"), b"next")
    with forwarder.receiving(db.q("orders"), 10) as batch:
        assert [m.body for m in batch.messages] == [b"next"] and batch.stats.poison == 1
    [(headers,)] = db.sql(f"SELECT headers FROM {qualified(db, 'error')}")  # noqa: S608
    assert "never" in headers
    forwarder.close()


# -- time-ordered native Ids ----------------------------------------------------------------------------------
def test_native_ids_are_time_ordered_uuids(queues):
    first = new_id()
    time.sleep(0.002)
    second = new_id()
    assert first.version == 7 and first.variant == uuid.RFC_4122 and second > first
    assert len({new_id() for _ in range(10_000)}) == 10_000
    ids = queues.transport.send_many(queues.q("orders"), [b"a", b"b"])
    assert all(i.version == 7 for i in ids)
    assert {m.id for m in queues.transport.receive(queues.q("orders"), 10)} == set(ids)


@pytest.mark.parametrize("stored", [
    "0f8fad5b-d9cb-469f-a165-70867728950e",             # canonical text (SQLite rows of this provider): as stored
    "0F8FAD5B-D9CB-469F-A165-70867728950E",             # upper case: the canonical form of the same UUID
    "{0f8fad5b-d9cb-469f-a165-70867728950e}",           # braces parse as the same UUID
    uuid.UUID("0f8fad5b-d9cb-469f-a165-70867728950e"),  # a driver's UUID (psycopg, pymssql)
    uuid.UUID("0f8fad5b-d9cb-469f-a165-70867728950e").bytes_le,  # SQL Server's 16 mixed-endian bytes
    "order-42", "0f8fad5b-d9cb-469f-a165-70867728950g", 42, None,  # loose SQLite ids: a derived UUID's text
])
def test_the_id_text_of_a_message_is_the_text_of_its_id(stored):
    """``id_text`` (what the Parquet files and payloads write) is ``str(message.id)`` for any stored id."""
    from airflow_sqlqueue.transport.wire.messages import ReceivedMessage

    message = ReceivedMessage(stored, {}, b"", 1)
    assert message.id_text == str(message.id)
    assert str(uuid.UUID(message.id_text)) == message.id_text
