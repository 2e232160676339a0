"""Every SQL Server statement reaches the server exactly as written in ``sql/mssql.sql``, through both drivers.

No SQL Server runs here, so the proof is at the DB-API level with the drivers' own parameter handling, not a
re-implementation of it: the dialect runs each statement on a recording cursor, and then

- pymssql: the recorded ``(sql, params)`` go through ``pymssql._mssql.substitute_params``, the function
  ``pymssql.Cursor.execute`` applies before sending (no parameters given: no substitution, as pymssql does);
- pyodbc: the ``?`` markers are counted with sqlglot's T-SQL tokenizer (pyodbc sends the text unchanged and
  the ODBC driver binds one value per marker), and the values must come in marker order.

The result must equal the statement text with its slots filled by the quoted identifiers and its markers by
the values, for odd identifiers (``%``, ``%(id)s``, ``]``, quotes, ``?``, braces, comment starters), and must
parse with sqlglot's ``tsql`` grammar naming the right tables. This covers the transport's statements, the
maintenance health-sample statements and so every statement the dashboard runs.
"""

from __future__ import annotations

import datetime
import re
import uuid
from typing import Any

import pytest
import sqlglot
from pymssql import _mssql
from sqlglot import exp

from airflow_sqlqueue.maintenance.health import SamplesTable, _statements
from airflow_sqlqueue.transport.dialects.mssql import MssqlDialect
from airflow_sqlqueue.transport.dialects.sqlfile import Statement, numbered
from airflow_sqlqueue.transport.errorqueue.previews import FailedFilter, Position
from airflow_sqlqueue.transport.wire.address import QueueAddress

MARKER = re.compile(r"%\((\w+)\)s")
SLOT = re.compile(r"\{(\w+)\}")
TRANSPORT = MssqlDialect().statements
HEALTH = _statements("mssql")
#: Fragments are never run alone: each is tested inside the statement that repeats it (slot, fragment).
REPEATS = {"send_many_values": ("rows", "send_many_row"), "send_many_values_no_recoverable": ("rows", "send_many_row"),
           "delete_by_seq_list": ("seqs", "seq_item")}
FRAGMENTS = {fragment for _, fragment in REPEATS.values()}
#: Statements sqlglot cannot build a tree for, and why (their identifiers are checked by tokens instead).
NOT_PARSED = {"savepoint": "sqlglot has no grammar for SAVE TRANSACTION"}
COMMANDS = {"rebuild_heap": "sqlglot parses ALTER TABLE ... REBUILD only as a Command",
            "vacuum_table": "sqlglot parses ALTER INDEX ... REORGANIZE only as a Command"}

ODD_ADDRESSES = {
    "plain": QueueAddress("orders"),
    "percent-marker": QueueAddress("we]ird 'tab ü %(id)s", "sch %s ema]", "cät%"),
    "percent-d": QueueAddress("q %d %% 100%", "dbo"),
    "quotes-qmark": QueueAddress("a'b\"c?d", "x]]y'z", "db ]"),
    "braces-comments": QueueAddress("{queue} -- /* :n", "名前"),
}
ALL_STATEMENTS = sorted({("transport", n) for n in TRANSPORT if n not in FRAGMENTS}
                        | {("health", n) for n in HEALTH})


def _value(name: str) -> Any:
    """A sample value per parameter name, adversarial where a string is allowed."""
    fixed = {"batch_size": 10, "after_seq": 5, "seq": 7, "ttbr_ms": 90_061_001, "delay_ms": 86_400_001,
             "n": 3, "depth": 42, "oldest_age_seconds": 1.5, "id": str(uuid.UUID(int=7)),
             "body": b"\x00%(id)s'\xff", "seqs": "[1,2,3]",
             "sampled_at": datetime.datetime(2026, 1, 2, 3, 4, 5), "before": datetime.datetime(2026, 1, 1),
             "since": datetime.datetime(2025, 12, 31, 23, 59, 59)}
    if name in fixed:
        return fixed[name]
    return f"{name} '%(id)s' ]? {{queue}} %% ü"


def _params(statement: Statement) -> dict[str, Any]:
    return {name: _value(re.sub(r"_\d+$", "", name)) for name in statement.params}


def _statement_and_ids(dialect: MssqlDialect, where: str, name: str,
                       address: QueueAddress) -> tuple[Statement, dict[str, str]]:
    if where == "health":
        table = SamplesTable(dialect, dialect.format_address(address))
        return HEALTH[name], dict(table.identifiers)
    statement = TRANSPORT[name]
    if name in REPEATS:
        slot, fragment = REPEATS[name]
        statement = dialect._repeated(name, slot, fragment, 2)
    ids = {**dialect.identifiers(address), "savepoint": dialect.quote("sp %(id)s ]x")}
    return statement, ids


def _as_written(statement: Statement, ids: dict[str, str], value: Any) -> str:
    """The statement text with slots filled and each marker replaced by ``value(name)`` (the test's own walk)."""
    text = SLOT.split(statement.text)
    out = []
    for i, piece in enumerate(text):
        out.append(ids[piece] if i % 2 else MARKER.sub(lambda m: value(m.group(1)), piece))
    return "".join(out)


class RecordingCursor:
    """Records what the dialect hands the driver: ``(sql, params)``, params absent when none were given."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.rowcount = 0

    def execute(self, sql: str, params: Any = _mssql.NoParams) -> None:
        self.calls.append((sql, params))

    def executemany(self, sql: str, seq: list[Any]) -> None:
        for params in seq:
            self.execute(sql, params)

    def fetchone(self) -> None:
        return None


def _pymssql_wire(sql: str, params: Any) -> str:
    """What pymssql sends for ``cursor.execute(sql, params)``: its own substitution, done by its own function."""
    return _mssql.substitute_params(sql, params).decode("utf-8")


def _tables(trees: list[Any]) -> set[tuple[str, str, str]]:
    return {(t.name, t.db, t.catalog) for tree in trees for t in tree.find_all(exp.Table)}


def _expected_tables(dialect: MssqlDialect, statement: Statement, address: QueueAddress,
                     where: str) -> set[tuple[str, str, str]]:
    catalog = address.catalog or ""
    wanted = set()
    targets = {"queue": address, "delayed": dialect.delayed_address(address), "samples": address}
    for slot in statement.slot_names & set(targets):
        target = targets[slot]
        wanted.add((target.table, target.schema or "dbo", catalog))
    return wanted


def _check_parse(dialect: MssqlDialect, where: str, name: str, statement: Statement, address: QueueAddress,
                 ids: dict[str, str], text: str) -> None:
    if name in NOT_PARSED:
        tokens = sqlglot.tokenize(text, read="tsql")
        assert [(t.token_type.name, t.text) for t in tokens[2:]] == [("IDENTIFIER", "sp %(id)s ]x")]
        return
    trees = sqlglot.parse(text, read="tsql")
    assert trees and all(tree is not None for tree in trees)
    if name in COMMANDS:
        assert all(isinstance(tree, exp.Command) for tree in trees)
        found = {t.text for t in sqlglot.tokenize(text, read="tsql") if t.token_type.name == "IDENTIFIER"}
        assert {address.table, address.schema or "dbo"} <= found
        return
    assert not any(isinstance(tree, exp.Command) for tree in trees), f"{name} fell back to an opaque Command"
    assert _expected_tables(dialect, statement, address, where) <= _tables(trees)
    if "savepoint" in statement.slot_names:
        assert "sp %(id)s ]x" in {i.name for tree in trees for i in tree.find_all(exp.Identifier)}


@pytest.mark.parametrize("address", ODD_ADDRESSES.values(), ids=ODD_ADDRESSES.keys())
@pytest.mark.parametrize(("where", "name"), ALL_STATEMENTS, ids=[f"{w}:{n}" for w, n in ALL_STATEMENTS])
def test_pymssql_sends_every_statement_as_written(where: str, name: str, address: QueueAddress) -> None:
    dialect = MssqlDialect("pyformat")
    statement, ids = _statement_and_ids(dialect, where, name, address)
    params = _params(statement)
    cursor = RecordingCursor()
    dialect.execute_statement(cursor, statement, params or None, ids)
    [(sql, given)] = cursor.calls
    wire = sql if given is _mssql.NoParams else _pymssql_wire(sql, given)
    quoted = _mssql.quote_data(params) if params else {}
    assert wire == _as_written(statement, ids, lambda n: quoted[n].decode("utf-8"))
    if not any("%" in v for v in ids.values()):
        assert given == (params or _mssql.NoParams), "plain names: pymssql binds the values itself"
    _check_parse(dialect, where, name, statement, address, ids, wire)


@pytest.mark.parametrize("address", ODD_ADDRESSES.values(), ids=ODD_ADDRESSES.keys())
@pytest.mark.parametrize(("where", "name"), ALL_STATEMENTS, ids=[f"{w}:{n}" for w, n in ALL_STATEMENTS])
def test_pyodbc_sends_every_statement_as_written(where: str, name: str, address: QueueAddress) -> None:
    dialect = MssqlDialect("qmark")
    statement, ids = _statement_and_ids(dialect, where, name, address)
    params = _params(statement)
    cursor = RecordingCursor()
    dialect.execute_statement(cursor, statement, params or None, ids)
    [(sql, given)] = cursor.calls
    assert sql == _as_written(statement, ids, lambda n: "?")
    assert given == tuple(params[n] for n in statement.params)
    placeholders = [t for t in sqlglot.tokenize(sql, read="tsql") if t.token_type.name == "PLACEHOLDER"]
    assert len(placeholders) == len(given)
    _check_parse(dialect, where, name, statement, address, ids, sql)


@pytest.mark.parametrize("path", ["transport/dialects/sql/mssql.sql", "maintenance/sql/mssql.sql"])
def test_no_literal_percent_in_the_sql_server_files(path: str) -> None:
    from importlib import resources

    text = resources.files("airflow_sqlqueue").joinpath(path).read_text(encoding="utf-8")
    assert "%" not in MARKER.sub("", text), "write the modulo as x - x / d * d: pymssql sends '%%' unchanged"


def test_pymssql_does_not_unescape_a_doubled_percent() -> None:
    """The driver fact the statement file is written for (pymssql 2.x)."""
    assert _mssql.substitute_params("SELECT %(a)s %% 3", {"a": 7}) == b"SELECT 7 %% 3"


def test_every_fragment_is_repeated_by_a_statement() -> None:
    assert FRAGMENTS <= set(TRANSPORT)
    for name, (slot, _fragment) in REPEATS.items():
        assert TRANSPORT[name].slot_names == {"queue", slot}, name


@pytest.mark.parametrize("paramstyle", ["pyformat", "qmark"])
def test_executemany_with_a_percent_name_sends_each_row_as_written(paramstyle: str) -> None:
    dialect = MssqlDialect(paramstyle)
    address = ODD_ADDRESSES["percent-marker"]
    rows = [{"headers": f"h{i} %(id)s", "body": bytes([i]), "delay_ms": i} for i in range(3)]
    cursor = RecordingCursor()
    dialect.executemany(cursor, "send_delayed", rows, **dialect.identifiers(address))
    assert len(cursor.calls) == 3
    for (sql, given), row in zip(cursor.calls, rows, strict=True):
        if paramstyle == "qmark":
            assert given == tuple(row[n] for n in TRANSPORT["send_delayed"].params)
            continue
        quoted = _mssql.quote_data(row)
        wire = sql if given is _mssql.NoParams else _pymssql_wire(sql, given)
        assert wire == _as_written(TRANSPORT["send_delayed"], dialect.identifiers(address),
                                   lambda n, q=quoted: q[n].decode("utf-8"))


def test_numbered_parameters_follow_the_repeated_fragment() -> None:
    statement = TRANSPORT["delete_by_seq_list"].repeated("seqs", TRANSPORT["seq_item"], 3, ", ")
    assert statement.params == ("seq_0", "seq_1", "seq_2")
    assert numbered([{"seq": 4}, {"seq": 5}]) == {"seq_0": 4, "seq_1": 5}
    with pytest.raises(ValueError, match="at least one"):
        TRANSPORT["delete_by_seq_list"].repeated("seqs", TRANSPORT["seq_item"], 0)


# -- the same, through the operations the real-server suite runs ------------------------------------------------
class FakePymssqlConnection:
    """Not pymssql: records what the transport hands the driver (no SQL Server runs here). Answers the few
    catalog reads the operations need (the queue exists, has Recoverable, level 160) and nothing else."""

    def __init__(self, calls: list[tuple[str, Any]]) -> None:
        self.calls = calls

    def autocommit(self, status: bool) -> None:
        pass

    def cursor(self) -> FakePymssqlCursor:
        return FakePymssqlCursor(self.calls)

    def commit(self) -> None:
        pass

    def rollback(self) -> None:
        pass

    def close(self) -> None:
        pass


class FakePymssqlCursor(RecordingCursor):
    def __init__(self, calls: list[tuple[str, Any]]) -> None:
        super().__init__()
        self.calls = calls
        self.rows: list[tuple] = []

    def execute(self, sql: str, params: Any = _mssql.NoParams) -> None:
        self.calls.append((sql, params))
        wire = sql if params is _mssql.NoParams else _pymssql_wire(sql, params)
        self.rows = ([(160, "Microsoft SQL Server 2022")] if "compatibility_level" in wire else
                     [(1, 1)] if "COL_LENGTH(" in wire else
                     [(1,)] if "COUNT(*)" in wire else [])
        self.rowcount = 0

    def fetchone(self) -> tuple | None:
        return self.rows[0] if self.rows else None

    def fetchall(self) -> list[tuple]:
        return list(self.rows)

    def __iter__(self) -> Any:
        return iter(list(self.rows))

    def close(self) -> None:
        pass


@pytest.mark.parametrize("level", [160, 120])
def test_operations_send_every_statement_as_written_for_an_odd_queue_name(level: int) -> None:
    from airflow_sqlqueue.dashboard import failed as dashboard_failed
    from airflow_sqlqueue.maintenance import health
    from airflow_sqlqueue.transport import OutgoingMessage, SqlQueueTransport

    calls: list[tuple[str, Any]] = []
    queue = QueueAddress("q %(id)s ]'x %d")
    samples = QueueAddress("samples %(conn_id)s ]")
    error = QueueAddress("err %(headers)s")
    dialect = MssqlDialect()
    transport = SqlQueueTransport(lambda: FakePymssqlConnection(calls), dialect,
                                  error_queue=dialect.format_address(error))
    name = transport.name(queue)
    transport.send(name, OutgoingMessage(b"1", {"n": "%(id)s"}, time_to_be_received=5))
    dialect.compatibility_level = min(dialect.compatibility_level or level, level)
    transport.send_many(name, [OutgoingMessage(b"2", {"n": "2"}), OutgoingMessage(None, {"n": "3"})])
    transport.send(name, OutgoingMessage(b"d", {"n": "d"}, delay=60))
    transport.peek(name)
    transport.browse(name)
    transport.purge_expired(name)
    transport.move_due_delayed(name)
    transport.process(name, lambda m, c: None, mode="sends-atomic-with-receive")
    transport.receive(name, 5)
    transport.check(name)
    transport.discover()
    transport.retry_errors(allowed=[name])
    health.record_samples(transport, [{"conn_id": "c", "queue": name, "depth": 1, "oldest_age_seconds": None}],
                          dialect.format_address(samples), retention_days=1)
    health.recent_samples(transport, dialect.format_address(samples), "c", name, datetime.datetime(2026, 1, 1))
    dashboard_failed.failed_groups(transport, transport.name(error))
    dashboard_failed.failed_messages(transport, transport.name(error), after_seq=0, limit=10, where=FailedFilter())
    with pytest.raises(LookupError):
        dashboard_failed.delete_messages(transport, transport.name(error), [Position(1, str(uuid.UUID(int=1)))])
    expected = {(a.table, "dbo") for a in (queue, dialect.delayed_address(queue), samples, error)} | {
        ("SqlQueueErrorGroups", "dbo"), ("SqlQueueErrorGroupsState", "dbo")}  # the error groups summary
    seen: set[tuple[str, str]] = set()
    for sql, params in calls:
        wire = sql if params is _mssql.NoParams else _pymssql_wire(sql, params)
        if wire.startswith(("SAVE TRANSACTION", "SET TRANSACTION")):
            continue
        for tree in sqlglot.parse(wire, read="tsql"):
            for table in tree.find_all(exp.Table):
                if table.db == "dbo":
                    assert (table.name, table.db) in expected, f"a mangled name in {wire!r}"
                    seen.add((table.name, table.db))
    assert seen == expected
    assert ("OPENJSON" in "".join(s for s, _ in calls)) is (level >= 130)
