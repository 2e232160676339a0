"""SQL Server dialect: every statement parsed by sqlglot's ``tsql`` grammar, and the DB-API logic (parameters,
isolation, creation under concurrency, error classification) driven through a recording fake connection.

No SQL Server runs on these machines; ``tests/mssql_real/`` holds the suite that runs against a real one.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pymssql
import pytest
from pymssql import _mssql

from airflow_sqlqueue.transport.common.errors import PermissionDeniedError, QueueNotFoundError
from airflow_sqlqueue.transport.dialects import get_dialect
from airflow_sqlqueue.transport.dialects.mssql import IN_LIST_CHUNK, VALUES_CHUNK, MssqlDialect, error_number
from airflow_sqlqueue.transport.wire.address import QueueAddress

MSSQL = MssqlDialect()
POSTGRES = get_dialect("postgres")

ODD_ADDRESSES = [
    QueueAddress("orders"),
    QueueAddress("we]ird 'tab ü %(id)s", "sch ema]", "cät%"),
    QueueAddress("名前 queue", "x]]y'z", None),
    QueueAddress("a'b]c", None, "db ]"),
]
_PARAM = re.compile(r"%\((\w+)\)s")
#: Slots that take repeated fragments (rows of a VALUES list, items of an IN list), not identifiers.
REPEAT_SLOTS = {"rows", "seqs"}


def _slots(dialect: MssqlDialect, address: QueueAddress) -> dict[str, str]:
    return {**dialect.identifiers(address), "savepoint": dialect.quote("sqlqueue_0]x")}


# Every statement parsed by sqlglot's tsql grammar, as each driver sends it: tests/test_mssql_driver_statements.py


# -- (b) the statement set --------------------------------------------------------------------------
#: PostgreSQL statements SQL Server has no counterpart for: LISTEN/NOTIFY wake-ups, psycopg 3's binary parameters,
#: the migration of PostgreSQL tables made by airflow-sqlqueue 0.1 (SQL Server shapes did not change) and the
#: catalog look-ups that support it.
POSTGRES_ONLY = ({*POSTGRES.notify_ddl, "notify_installed", "listen", "relation_named", "commit",
                  "move_due_delayed_legacy", "notify_function_of",
                  "wake_peek",  # the coalescing wake-up's look at the queue (push wake-ups)
                  "receive_after",  # receivers past their last row: PostgreSQL only (dead index entries)
                  "error_groups_merge_range",  # a catch-up in one statement; SQL Server adds group by group
                  "error_groups_fields"}  # its fields and error_groups_range's: one fragment, filled at load
                 | {n for n in POSTGRES.statements if n.startswith(("migrate_", "wake_lock_"))})  # push wake-ups


def test_covers_every_postgres_statement() -> None:
    assert set(POSTGRES.statements) - set(MSSQL.statements) == POSTGRES_ONLY


def test_every_statement_has_a_description_and_no_stray_slot() -> None:
    known = set(_slots(MSSQL, ODD_ADDRESSES[0]))
    for statement in MSSQL.statements.values():
        assert statement.description, statement.name
        assert set(re.findall(r"\{(\w+)\}", statement.text)) <= known | REPEAT_SLOTS, statement.name


def test_queue_ddl_matches_nservicebus() -> None:
    script = "\n".join(MSSQL.ddl(QueueAddress("orders", "sales"), delayed=True))
    assert "CREATE NONCLUSTERED INDEX [Index_RowVersion] ON [sales].[orders] (RowVersion)" in script
    assert ("CREATE NONCLUSTERED INDEX [Index_Expires] ON [sales].[orders] (Expires) INCLUDE (Id, RowVersion) "
            "WHERE Expires IS NOT NULL") in script
    assert "CREATE NONCLUSTERED INDEX [Index_Due] ON [sales].[orders.Delayed] (Due)" in script
    assert "RowVersion bigint IDENTITY(1,1) NOT NULL" in script
    assert "Headers nvarchar(max) NOT NULL" in script
    assert "PRIMARY KEY" not in script and " CLUSTERED" not in script
    for column in ("Id uniqueidentifier NOT NULL", "CorrelationId varchar(255) NULL",
                   "ReplyToAddress varchar(255) NULL", "Recoverable bit NOT NULL", "Expires datetime NULL",
                   "Body varbinary(max) NULL", "Due datetime NOT NULL"):
        assert column in script


def _sample_params(name: str) -> dict[str, Any]:
    names = {m.group(1) for m in _PARAM.finditer(MSSQL.statements[name].text) if m.group(1)}
    return {n: 1 for n in names}


# -- addresses and identifiers ------------------------------------------------------------------------
def test_quote_doubles_closing_brackets() -> None:
    assert MSSQL.quote("a]b") == "[a]]b]"
    assert MSSQL.quote("x'y [z") == "[x'y [z]"


def test_qualified_names() -> None:
    assert MSSQL.qualified(QueueAddress("orders")) == "[dbo].[orders]"
    assert MSSQL.qualified(QueueAddress("orders", "s", "c")) == "[c].[s].[orders]"
    with_catalog = MssqlDialect(default_catalog="Main DB")
    assert with_catalog.qualified(QueueAddress("orders")) == "[Main DB].[dbo].[orders]"
    assert with_catalog.qualified(QueueAddress("orders", None, "Other")) == "[Other].[dbo].[orders]"
    assert with_catalog.identifiers(QueueAddress("orders"))["sys"] == "[Main DB].sys"
    assert MSSQL.identifiers(QueueAddress("orders"))["sys"] == "sys"


def test_addresses_and_index_names() -> None:
    address = MSSQL.parse_address("my]]table@[sch]]ema]@[cat]")
    assert address == QueueAddress("my]]table", "sch]ema", "cat")
    assert MSSQL.parse_address(MSSQL.format_address(address)) == address
    assert MSSQL.delayed_address(QueueAddress("orders", "s")) == QueueAddress("orders.Delayed", "s")
    assert [MSSQL.index_name(address, k) for k in ("seq", "expires", "due")] == [
        "Index_RowVersion", "Index_Expires", "Index_Due"]
    assert get_dialect("sqlserver", "qmark").paramstyle == "qmark"
    assert MSSQL.name == "mssql" and MSSQL.default_schema == "dbo"


# -- (c) DB-API level, through a recording fake connection ---------------------------------------------
Response = list[tuple] | BaseException | Iterator[Any] | Callable[[str, Any], Any]


class RecordingMssqlConnection:
    """Stands in for a pymssql or pyodbc connection, because no SQL Server can run on these machines.

    It records every statement with its parameters and answers from ``rules``: ``(needle, response)`` pairs
    matched against the SQL text in order. A response is rows (a list of tuples), an exception to raise, an
    iterator giving one of those per call, or a callable ``(sql, params) -> rows``. Unmatched statements
    return no rows. ``flavour`` picks the driver's autocommit API: pymssql has a method, pyodbc an attribute.
    """

    def __init__(self, rules: list[tuple[str, Response]] | None = None, flavour: str = "pymssql") -> None:
        self.rules = list(rules or [])
        self.executed: list[tuple[str, Any]] = []
        self.events: list[str] = []
        self.flavour = flavour
        self.autocommit_state = True
        if flavour == "pymssql":
            self.autocommit = self._set_autocommit
        else:
            self.autocommit = True

    def _set_autocommit(self, status: bool) -> None:
        self.autocommit_state = status

    def cursor(self) -> RecordingCursor:
        return RecordingCursor(self)

    def commit(self) -> None:
        self.events.append("commit")

    def rollback(self) -> None:
        self.events.append("rollback")

    def close(self) -> None:
        self.events.append("close")

    def answer(self, sql: str, params: Any) -> list[tuple]:
        self.executed.append((sql, params))
        self.events.append("execute")
        for needle, response in self.rules:
            if needle in sql:
                if isinstance(response, Iterator):
                    response = next(response)
                if callable(response) and not isinstance(response, BaseException):
                    response = response(sql, params)
                if isinstance(response, BaseException):
                    raise response
                return list(response)
        return []

    def sql_texts(self) -> list[str]:
        return [sql for sql, _ in self.executed]


class RecordingCursor:
    """The cursor of RecordingMssqlConnection."""

    def __init__(self, connection: RecordingMssqlConnection) -> None:
        self.connection = connection
        self.rows: list[tuple] = []
        self.rowcount = -1

    def execute(self, sql: str, params: Any = None) -> None:
        self.rows = self.connection.answer(sql, params)
        self.rowcount = len(self.rows)

    def executemany(self, sql: str, seq: list[Any]) -> None:
        for params in seq:
            self.execute(sql, params)

    def fetchone(self) -> tuple | None:
        return self.rows[0] if self.rows else None

    def fetchall(self) -> list[tuple]:
        return list(self.rows)

    def close(self) -> None:
        pass


def _pymssql_error(cls: type[Exception], number: int, text: str) -> Exception:
    """An error shaped as pymssql raises it from cursor.execute: ``cls(number, message_bytes)``."""
    return cls(number, (text + "DB-Lib error message 20018, severity 16:\nGeneral SQL Server error: Check messages "
                        "from the SQL Server\n").encode())


@pytest.mark.parametrize("flavour", ["pymssql", "pyodbc"])
def test_configure_sets_read_committed_and_autocommit_off(flavour: str) -> None:
    conn = RecordingMssqlConnection([("compatibility_level", [(160, "Microsoft SQL Server 2022")])], flavour=flavour)
    dialect = MssqlDialect()
    dialect.configure(conn)
    assert conn.sql_texts()[0] == "SET TRANSACTION ISOLATION LEVEL READ COMMITTED"
    assert "compatibility_level" in conn.sql_texts()[1] and "@@VERSION" in conn.sql_texts()[1]
    if flavour == "pymssql":
        assert conn.autocommit_state is False
    else:
        assert conn.autocommit is False
    assert conn.events[-1] == "commit"
    assert dialect.compatibility_level == 160 and dialect.uses_openjson


SERVERS = {
    "sql-server-2022": ([(160, "Microsoft SQL Server 2022 (RTM) - 16.0.1000.6")], True),
    "level-120": ([(120, "Microsoft SQL Server 2019 (RTM-CU22) - 15.0.4322.2")], False),
    "babelfish": ([(150, "Babelfish for PostgreSQL with SQL Server Compatibility - 12.0.2000.8\n4.3.0")], False),
    "unreadable": (_pymssql_error(pymssql.OperationalError, 229, "The SELECT permission was denied."), False),
}


def _configured(answer: Any) -> MssqlDialect:
    dialect = MssqlDialect()
    dialect.configure(RecordingMssqlConnection([("compatibility_level", answer)]))
    return dialect


@pytest.mark.parametrize("server", SERVERS, ids=SERVERS)
def test_batch_statements_follow_the_compatibility_level(server: str) -> None:
    answer, openjson = SERVERS[server]
    dialect = _configured(answer)
    assert dialect.uses_openjson is openjson
    rows = [{"id": str(uuid.UUID(int=i)), "headers": SECRET_HEADERS, "body": bytes([i % 256]), "ttbr_ms": i or None}
            for i in range(VALUES_CHUNK + 1)]
    conn = RecordingMssqlConnection(_recoverable_present())
    dialect.send_many(conn.cursor(), QueueAddress("orders"), rows)
    dialect.delete_seqs(conn.cursor(), QueueAddress("orders"), list(range(1, IN_LIST_CHUNK + 2)))
    inserts = [(sql, p) for sql, p in conn.executed if sql.startswith("INSERT")]
    deletes = [(sql, p) for sql, p in conn.executed if sql.startswith("DELETE")]
    if openjson:
        assert len(inserts) == 1 and "OPENJSON" in inserts[0][0] and len(deletes) == 1
        return
    assert not any("OPENJSON" in sql for sql, _ in conn.executed)
    # VALUES rows: at most 400 messages (2000 parameters) per statement, in order, values only as parameters
    assert [len(p) for _, p in inserts] == [5 * VALUES_CHUNK, 5]
    assert "FROM (VALUES" in inserts[0][0] and "Secret.Type" not in inserts[0][0]
    sent = [inserts[0][1][f"id_{i}"] for i in range(VALUES_CHUNK)] + [inserts[1][1]["id_0"]]
    assert sent == [r["id"] for r in rows]
    assert inserts[1][1]["n_0"] == 0 and inserts[1][1]["body_0"] == bytes([VALUES_CHUNK % 256])
    # IN lists of at most 1000 positions
    assert [len(p) for _, p in deletes] == [IN_LIST_CHUNK, 1]
    assert "WHERE RowVersion IN (CAST(%(seq_0)s AS bigint), CAST(%(seq_1)s AS bigint)" in deletes[0][0]
    assert deletes[1][1] == {"seq_0": IN_LIST_CHUNK + 1}


def test_values_batch_in_qmark_binds_five_values_per_message() -> None:
    dialect = MssqlDialect("qmark")
    dialect.configure(RecordingMssqlConnection([("compatibility_level", [(110, "Microsoft SQL Server 2012")])]))
    conn = RecordingMssqlConnection(_recoverable_present(), flavour="pyodbc")
    rows = [{"id": str(uuid.UUID(int=i)), "headers": "{}", "body": None, "ttbr_ms": 5} for i in range(3)]
    dialect.send_many(conn.cursor(), QueueAddress("orders"), rows)
    sql, params = conn.executed[-1]
    assert sql.count("?") == len(params) == 15
    assert params[:5] == (0, rows[0]["id"], 5, "{}", None)


def test_old_table_uses_the_values_variant_without_recoverable() -> None:
    dialect = _configured([(120, "Microsoft SQL Server")])
    conn = RecordingMssqlConnection([("COL_LENGTH(", [(0, 1)])])
    dialect.send_many(conn.cursor(), QueueAddress("legacy"), [{"id": "x", "headers": "{}", "body": None,
                                                               "ttbr_ms": None}])
    assert "Recoverable" not in conn.sql_texts()[-1] and "FROM (VALUES" in conn.sql_texts()[-1]


def test_the_lowest_level_of_any_connection_wins() -> None:
    dialect = _configured([(150, "Microsoft SQL Server")])
    dialect.configure(RecordingMssqlConnection([("compatibility_level", [(100, "Microsoft SQL Server")])]))
    dialect.configure(RecordingMssqlConnection([("compatibility_level", [(160, "Microsoft SQL Server")])]))
    assert dialect.compatibility_level == 100 and not dialect.uses_openjson


SECRET_HEADERS = json.dumps({"NServiceBus.EnclosedMessageTypes": "Secret.Type', 'x'); DROP TABLE y; --"})
SECRET_BODY = b"body-bytes-\x00-\xff-'; --"


def _send_params(dialect: MssqlDialect, ttbr: int | None = 60_000) -> dict[str, Any]:
    return {"id": dialect.id_param(uuid.UUID(int=42)), "headers": SECRET_HEADERS, "body": SECRET_BODY,
            "ttbr_ms": ttbr}


def _recoverable_present() -> list[tuple[str, Response]]:
    return [("COL_LENGTH(", [(1, 1)])]


def test_send_passes_values_only_as_parameters() -> None:
    conn = RecordingMssqlConnection(_recoverable_present())
    address = QueueAddress("orders")
    cur = conn.cursor()
    MSSQL.execute(cur, "send", _send_params(MSSQL), **MSSQL.identifiers(address))
    sql, params = conn.executed[-1]
    assert sql.startswith("INSERT INTO [dbo].[orders] (Id, CorrelationId, ReplyToAddress, Recoverable, Expires, "
                          "Headers, Body)")
    for value in (str(uuid.UUID(int=42)), "Secret.Type", "DROP TABLE", "60000", "body-bytes"):
        assert value not in sql
    assert params == _send_params(MSSQL)
    assert "DATEADD(ms" in sql and "GETUTCDATE()" in sql


def test_pyodbc_qmark_parameters_are_ordered_tuples() -> None:
    dialect = MssqlDialect("qmark")
    conn = RecordingMssqlConnection(_recoverable_present(), flavour="pyodbc")
    cur = conn.cursor()
    dialect.execute(cur, "send", _send_params(dialect, 1234), **dialect.identifiers(QueueAddress("orders")))
    sql, params = conn.executed[-1]
    assert "%" not in sql and "- CAST(? AS bigint) / 86400000 * 86400000" in sql
    assert params == (str(uuid.UUID(int=42)), 1234, 1234, 1234, 1234, SECRET_HEADERS, SECRET_BODY)
    assert sql.count("?") == len(params)
    # the Recoverable probe is a qmark statement too
    probe_sql, probe_params = conn.executed[0]
    assert "?" in probe_sql and probe_params == ("[dbo].[orders]", "Recoverable", "[dbo].[orders]")


def test_identifiers_with_brackets_are_doubled_and_percent_goes_in_verbatim() -> None:
    conn = RecordingMssqlConnection(_recoverable_present())
    address = QueueAddress("we]ird %(batch_size)s", "s]c")
    MSSQL.execute(conn.cursor(), "receive_batch", {"batch_size": 5}, **MSSQL.identifiers(address))
    sql, params = conn.executed[-1]
    # pymssql has no escape for '%': the values are formatted in by its own function, nothing left to substitute
    assert "SELECT TOP (5) *" in sql and "FROM [s]]c].[we]]ird %(batch_size)s] WITH (UPDLOCK, READPAST, ROWLOCK)" in sql
    assert params is None
    plain = RecordingMssqlConnection()
    MSSQL.execute(plain.cursor(), "receive_batch", {"batch_size": 5}, **MSSQL.identifiers(QueueAddress("a]b")))
    assert plain.executed[-1][1] == {"batch_size": 5} and "%(batch_size)s" in plain.executed[-1][0]
    qmark = MssqlDialect("qmark")
    sql, args = qmark.prepare("receive_batch", {"batch_size": 5}, qmark.identifiers(address))
    assert "[s]]c].[we]]ird %(batch_size)s]" in sql and args == (5,) and sql.count("?") == 1


def test_purge_skips_rows_receivers_hold_on_both_sides() -> None:
    """Receivers hold rows with UPDLOCK, which a plain READPAST read does not skip (U and S locks are
    compatible): the DELETE itself must read past them, or a purge waits for a receiver's transaction."""
    sql = MSSQL.render("purge_expired", **MSSQL.identifiers(QueueAddress("q")))
    assert sql.startswith("DELETE FROM [dbo].[q] WITH (READPAST)\n")
    assert "FROM [dbo].[q] WITH (READPAST)\n                     WHERE Expires < GETUTCDATE()" in sql


def test_receive_statement_shape() -> None:
    sql = MSSQL.render("receive_batch", **MSSQL.identifiers(QueueAddress("q")))
    assert "TOP (%(batch_size)s)" in sql and "ORDER BY RowVersion" in sql
    output = sql[sql.index("OUTPUT"):]
    order = [output.index(c) for c in ("deleted.Id", "deleted.RowVersion", "deleted.Expires", "deleted.Headers",
                                       "deleted.Body")]
    assert order == sorted(order)


def test_send_many_is_one_statement_with_one_json_parameter() -> None:
    conn = RecordingMssqlConnection(_recoverable_present())
    rows = [{"id": str(uuid.UUID(int=i)), "headers": SECRET_HEADERS, "body": bytes([i]) * 3, "ttbr_ms": None}
            for i in range(5)]
    rows[2]["body"] = None
    rows[3]["ttbr_ms"] = 10
    MSSQL.send_many(conn.cursor(), QueueAddress("orders"), rows)
    sends = [(sql, p) for sql, p in conn.executed if sql.startswith("INSERT")]
    assert len(sends) == 1
    sql, params = sends[0]
    assert "OPENJSON" in sql and "ORDER BY m.n" in sql and "Secret.Type" not in sql
    decoded = json.loads(params["rows"])
    assert [d["n"] for d in decoded] == list(range(5))
    assert [d["id"] for d in decoded] == [r["id"] for r in rows]
    assert decoded[2]["body"] is None
    assert base64.b64decode(decoded[4]["body"]) == bytes([4]) * 3
    assert decoded[3]["ttbr_ms"] == 10 and decoded[0]["headers"] == SECRET_HEADERS


def test_old_table_without_recoverable_uses_the_variant_and_is_cached() -> None:
    conn = RecordingMssqlConnection([("COL_LENGTH(", [(0, 1)])])
    dialect = MssqlDialect()
    ids = dialect.identifiers(QueueAddress("legacy"))
    for _ in range(2):
        dialect.execute(conn.cursor(), "send", _send_params(dialect), **ids)
    texts = conn.sql_texts()
    assert sum("COL_LENGTH(" in t for t in texts) == 1
    inserts = [t for t in texts if t.startswith("INSERT")]
    assert len(inserts) == 2 and all("Recoverable" not in t for t in inserts)


def test_missing_table_is_not_cached_as_legacy() -> None:
    conn = RecordingMssqlConnection([("COL_LENGTH(", [(0, 0)])])
    dialect = MssqlDialect()
    dialect.execute(conn.cursor(), "insert_raw", {"id": "x", "headers": "{}", "body": None},
                    **dialect.identifiers(QueueAddress("missing")))
    assert "Recoverable" in conn.sql_texts()[-1]
    assert dialect._recoverable == {}


def test_release_savepoint_sends_nothing_and_savepoints_use_save_transaction() -> None:
    conn = RecordingMssqlConnection()
    cur = conn.cursor()
    name = MSSQL.quote("sqlqueue_1")
    MSSQL.execute(cur, "savepoint", None, savepoint=name)
    MSSQL.execute(cur, "rollback_to_savepoint", None, savepoint=name)
    MSSQL.execute(cur, "release_savepoint", None, savepoint=name)
    assert conn.sql_texts() == ["SAVE TRANSACTION [sqlqueue_1]", "ROLLBACK TRANSACTION [sqlqueue_1]"]


# -- create_queue -------------------------------------------------------------------------------------
def _creation_rules(exists: Iterator[Any], schema: int = 1,
                    create_table: Response | None = None, create_index: Response | None = None
                    ) -> list[tuple[str, Response]]:
    rules: list[tuple[str, Response]] = [
        (".objects WHERE object_id = OBJECT_ID(", exists),
        ("sp_getapplock", []),
        (".schemas WHERE name", [(schema,)]),
    ]
    if create_table is not None:
        rules.append(("CREATE TABLE", create_table))
    if create_index is not None:
        rules.append(("CREATE NONCLUSTERED INDEX", create_index))
    return rules


def _exists(*answers: int) -> Iterator[list[tuple]]:
    return iter([[(a,)] for a in answers])


def test_create_queue_runs_check_lock_recheck_create_in_one_transaction() -> None:
    conn = RecordingMssqlConnection(_creation_rules(_exists(0, 0)))
    MSSQL.create_queue(conn, QueueAddress("orders", "sales"), delayed=False)
    texts = conn.sql_texts()
    assert texts[0].startswith("SELECT COUNT(*) FROM sys.objects WHERE object_id = OBJECT_ID(")
    assert texts[1].startswith("EXEC sp_getapplock")
    assert conn.executed[1][1] == {"lock_name": "[sales].[orders]_lock"}
    assert conn.executed[0][1] == {"object_name": "[sales].[orders]"}
    assert conn.executed[2][1] == {"schema_name": "sales"}
    assert texts[4].startswith("CREATE TABLE [sales].[orders]")
    assert "[Index_RowVersion]" in texts[5] and "[Index_Expires]" in texts[6]
    assert conn.events.count("commit") == 1 and "rollback" not in conn.events


def test_create_queue_is_a_no_op_when_the_table_exists() -> None:
    conn = RecordingMssqlConnection(_creation_rules(_exists(1)))
    MSSQL.create_queue(conn, QueueAddress("orders"), delayed=False)
    assert len(conn.executed) == 1 and conn.events[-1] == "commit"


def test_create_queue_with_delayed_table() -> None:
    conn = RecordingMssqlConnection(_creation_rules(_exists(0, 0, 0, 0)))
    MSSQL.create_queue(conn, QueueAddress("orders"), delayed=True)
    texts = conn.sql_texts()
    assert any(t.startswith("CREATE TABLE [dbo].[orders.Delayed]") for t in texts)
    assert any("[Index_Due] ON [dbo].[orders.Delayed]" in t for t in texts)
    assert {"lock_name": "[dbo].[orders.Delayed]_lock"} in [p for _, p in conn.executed]


@pytest.mark.parametrize(("number", "where"), [(2714, "table"), (1913, "index")])
def test_create_queue_tolerates_a_concurrent_creator(number: int, where: str) -> None:
    text = ("There is already an object named 'orders' in the database." if number == 2714 else
            "The operation failed because an index or statistics with name 'Index_RowVersion' already exists "
            "on table 'dbo.orders'.")
    error = _pymssql_error(pymssql.OperationalError, number, text)
    rules = _creation_rules(_exists(0, 0, 1), create_table=error if where == "table" else None,
                            create_index=error if where == "index" else None)
    conn = RecordingMssqlConnection(rules)
    MSSQL.create_queue(conn, QueueAddress("orders"), delayed=False)  # no error
    assert conn.events.count("rollback") == 1
    assert conn.events[-1] == "commit"


def test_create_queue_reraises_2714_when_the_table_still_does_not_exist() -> None:
    error = _pymssql_error(pymssql.OperationalError, 2714, "There is already an object named 'orders'.")
    conn = RecordingMssqlConnection(_creation_rules(_exists(0, 0, 0), create_table=error))
    with pytest.raises(pymssql.OperationalError):
        MSSQL.create_queue(conn, QueueAddress("orders"), delayed=False)


def test_create_queue_never_creates_a_schema() -> None:
    conn = RecordingMssqlConnection(_creation_rules(_exists(0), schema=0))
    with pytest.raises(QueueNotFoundError, match=r"schema 'sales' does not exist.*CREATE SCHEMA \[sales\]"):
        MSSQL.create_queue(conn, QueueAddress("orders", "sales"), delayed=False)
    assert not any("CREATE" in t and "sp_getapplock" not in t for t in conn.sql_texts())
    assert conn.events[-1] == "rollback"


def test_create_queue_turns_a_server_side_missing_schema_into_queue_not_found() -> None:
    error = _pymssql_error(pymssql.OperationalError, 2760,
                           "The specified schema name \"sales\" either does not exist or you do not have "
                           "permission to use it.")
    conn = RecordingMssqlConnection(_creation_rules(_exists(0, 0), create_table=error))
    with pytest.raises(QueueNotFoundError, match="sales"):
        MSSQL.create_queue(conn, QueueAddress("orders", "sales"), delayed=False)


def test_create_queue_permission_denied_names_the_rights() -> None:
    error = _pymssql_error(pymssql.OperationalError, 262, "CREATE TABLE permission denied in database 'app'.")
    conn = RecordingMssqlConnection(_creation_rules(_exists(0, 0), create_table=error))
    with pytest.raises(PermissionDeniedError, match="CREATE TABLE.*VIEW DEFINITION"):
        MSSQL.create_queue(conn, QueueAddress("orders"), delayed=False)


# -- error classification -------------------------------------------------------------------------------
DEADLOCK_TEXT = ("Transaction (Process ID 57) was deadlocked on lock resources with another process and has been "
                 "chosen as the deadlock victim. Rerun the transaction.")


def _pymssql_cases() -> list[tuple[str, Exception, str]]:
    """(case id, error as pymssql raises it, expected kind)."""
    return [
        ("deadlock", _pymssql_error(pymssql.OperationalError, 1205, DEADLOCK_TEXT), "deadlock"),
        ("lock-timeout", _pymssql_error(pymssql.OperationalError, 1222, "Lock request time out period exceeded."),
         "deadlock"),
        ("connect-refused", pymssql.OperationalError(
            (20009, b"DB-Lib error message 20009, severity 9:\nUnable to connect: Adaptive Server is unavailable "
                    b"or does not exist (db:1433)\nNet-Lib error during Connection refused (111)\n")), "lost"),
        ("dbprocess-dead", pymssql.OperationalError(
            20047, b"DB-Lib error message 20047, severity 9:\nDBPROCESS is dead or not enabled\n"), "lost"),
        ("write-failed", pymssql.OperationalError(
            20006, b"DB-Lib error message 20006, severity 9:\nWrite to the server failed\n"), "lost"),
        ("commit-on-dead", pymssql.OperationalError(
            "Cannot commit transaction: (20047, b'DB-Lib error message 20047, severity 9:\\nDBPROCESS is dead or "
            "not enabled\\n')"), "lost"),
        ("closed", pymssql.InterfaceError("Connection is closed."), "lost"),
        ("missing-table", _pymssql_error(pymssql.ProgrammingError, 208, "Invalid object name 'dbo.nope'."),
         "missing"),
        ("missing-schema", _pymssql_error(pymssql.OperationalError, 15151,
                                          "Cannot find the schema 'nope', because it does not exist."), "missing"),
        ("select-denied", _pymssql_error(
            pymssql.OperationalError, 229,
            "The SELECT permission was denied on the object 'orders', database 'app', schema 'dbo'."), "denied"),
        ("create-denied", _pymssql_error(pymssql.OperationalError, 262,
                                         "CREATE TABLE permission denied in database 'app'."), "denied"),
        ("db-exception", _mssql.MSSQLDatabaseException((1205, DEADLOCK_TEXT.encode())), "deadlock"),
        ("syntax", _pymssql_error(pymssql.ProgrammingError, 102, "Incorrect syntax near 'x'."), "none"),
        ("no-resultset", pymssql.OperationalError("Statement not executed or executed statement has no resultset"),
         "none"),
        ("constraint", _pymssql_error(pymssql.IntegrityError, 2627, "Violation of UNIQUE KEY constraint."), "none"),
    ]


#: pyodbc errors are ``cls(sqlstate, text)``, the native number in parentheses before the ODBC function name.
PYODBC_CASES = [
    ("deadlock", "Error", "40001", "[40001] [Microsoft][ODBC Driver 18 for SQL Server][SQL Server]"
     + DEADLOCK_TEXT + " (1205) (SQLExecDirectW)", "deadlock"),
    ("link-failure", "OperationalError", "08S01",
     "[08S01] [Microsoft][ODBC Driver 18 for SQL Server]Communication link failure (0) (SQLExecDirectW)", "lost"),
    ("reset", "OperationalError", "08S01",
     "[08S01] [Microsoft][ODBC Driver 18 for SQL Server]TCP Provider: An existing connection was forcibly closed "
     "by the remote host.\r\n (10054) (SQLExecDirectW)", "lost"),
    ("cannot-connect", "OperationalError", "08001",
     "[08001] [Microsoft][ODBC Driver 18 for SQL Server]TCP Provider: Error code 0x2749 (10057) "
     "(SQLDriverConnect)", "lost"),
    ("missing-table", "ProgrammingError", "42S02",
     "[42S02] [Microsoft][ODBC Driver 18 for SQL Server][SQL Server]Invalid object name 'dbo.nope'. (208) "
     "(SQLExecDirectW)", "missing"),
    ("denied", "ProgrammingError", "42000",
     "[42000] [Microsoft][ODBC Driver 18 for SQL Server][SQL Server]The SELECT permission was denied on the "
     "object 'orders', database 'app', schema 'dbo'. (229) (SQLExecDirectW)", "denied"),
    ("lock-timeout", "Error", "HY000",
     "[HY000] [Microsoft][ODBC Driver 18 for SQL Server][SQL Server]Lock request time out period exceeded. "
     "(1222) (SQLExecDirectW)", "deadlock"),
    ("syntax", "ProgrammingError", "42000",
     "[42000] [Microsoft][ODBC Driver 18 for SQL Server][SQL Server]Incorrect syntax near 'x'. (102) "
     "(SQLExecDirectW)", "none"),
]


def _kinds(exc: BaseException) -> set[str]:
    kinds = {"deadlock": MSSQL.is_deadlock(exc), "lost": MSSQL.is_connection_lost(exc),
             "missing": MSSQL.is_missing_table(exc), "denied": MSSQL.is_permission_denied(exc)}
    return {k for k, v in kinds.items() if v} or {"none"}


@pytest.mark.parametrize(("case", "exc", "kind"), _pymssql_cases(), ids=[c[0] for c in _pymssql_cases()])
def test_classifies_pymssql_errors(case: str, exc: Exception, kind: str) -> None:
    assert _kinds(exc) == {kind}


def test_error_number_reads_every_pymssql_shape() -> None:
    assert error_number(pymssql.OperationalError(1205, b"x")) == 1205
    assert error_number(pymssql.OperationalError((20009, b"x"))) == 20009
    assert error_number(_mssql.MSSQLDatabaseException((208, b"x"))) == 208
    assert error_number(pymssql.OperationalError("Cannot commit transaction: (20047, b'x')")) == 20047
    assert error_number(ValueError("nothing here")) is None


@pytest.mark.parametrize(("case", "cls_name", "state", "text", "kind"), PYODBC_CASES, ids=[c[0] for c in PYODBC_CASES])
def test_classifies_real_pyodbc_errors(case: str, cls_name: str, state: str, text: str, kind: str) -> None:
    # pyodbc is installed but its libodbc.so may be missing (an ImportError, not ModuleNotFoundError)
    pyodbc = pytest.importorskip("pyodbc", reason="pyodbc or libodbc is not installed here", exc_type=ImportError)
    assert _kinds(getattr(pyodbc, cls_name)(state, text)) == {kind}


class PyodbcShapedError(Exception):
    """Not pyodbc: an exception with pyodbc's argument shape ``(sqlstate, text)``, for machines without libodbc."""


@pytest.mark.parametrize(("case", "cls_name", "state", "text", "kind"), PYODBC_CASES, ids=[c[0] for c in PYODBC_CASES])
def test_classifies_pyodbc_shaped_errors(case: str, cls_name: str, state: str, text: str, kind: str) -> None:
    error = type(cls_name, (PyodbcShapedError,), {})(state, text)
    assert _kinds(error) == {kind}


# -- values, discovery and the check --------------------------------------------------------------------
def test_to_raw_row_accepts_every_driver_id_shape() -> None:
    value = uuid.uuid4()
    for raw in (value, str(value).upper(), value.bytes_le):
        row = MSSQL.to_raw_row((raw, 7, 1, "{}", b"x"))
        assert row.id == value and row.seq == 7 and row.expired is True and row.body == b"x"


def test_discover_maps_dbo_to_the_default_schema() -> None:
    conn = RecordingMssqlConnection([("sys.tables", [("dbo", "orders"), ("sales", "a]b")])])
    assert MSSQL.discover(conn.cursor()) == [QueueAddress("orders"), QueueAddress("a]b", "sales")]


HEALTHY_COLUMNS = [("Id", "uniqueidentifier", 16, False), ("CorrelationId", "varchar", 255, True),
                   ("ReplyToAddress", "varchar", 255, True), ("Recoverable", "bit", 1, False),
                   ("Expires", "datetime", 8, True), ("Headers", "nvarchar", -1, False),
                   ("Body", "varbinary", -1, True), ("RowVersion", "bigint", 8, False)]
HEALTHY_INDEXES = [("Index_Expires", "Expires", "NONCLUSTERED", True),
                   ("Index_RowVersion", "RowVersion", "NONCLUSTERED", False)]


def _check(columns: list[tuple], indexes: list[tuple], bloat: list[tuple] | Response | None = None,
           allocation_units: bool = True) -> dict[str, Any]:
    conn = RecordingMssqlConnection([(".columns AS c\nJOIN", columns), (".indexes AS i", indexes),
                                     ("OBJECT_ID(", [(int(allocation_units),)]),
                                     (".partitions AS p", bloat or [(100, 3)])])
    findings = MSSQL.check(conn.cursor(), QueueAddress("orders", "sales", "cat"))
    for sql, params in conn.executed:
        if "OBJECT_ID(" in sql:  # the probe for the catalog view, in the queue's database
            assert params == {"view_name": "[cat].sys.allocation_units"}
            continue
        assert params == {"schema_name": "sales", "table_name": "orders"}
        assert "[cat].sys." in sql
    assert sum(".allocation_units" in sql for sql in conn.sql_texts()) == (1 if allocation_units else 0)
    return {f.code: f for f in findings}


def test_check_healthy_queue_has_no_findings() -> None:
    assert _check(HEALTHY_COLUMNS, HEALTHY_INDEXES) == {}
    old = [c for c in HEALTHY_COLUMNS if c[0] != "Recoverable"]
    assert _check(old, HEALTHY_INDEXES) == {}


def test_check_compares_catalog_names_without_case() -> None:
    """An engine that reports lower-case names (as Babelfish may) is as healthy as SQL Server."""
    columns = [(name.lower(), type_name.upper(), size, nullable) for name, type_name, size, nullable in HEALTHY_COLUMNS]
    indexes = [(name.lower(), column.lower(), kind.lower(), has_filter)
               for name, column, kind, has_filter in HEALTHY_INDEXES]
    assert _check(columns, indexes) == {}
    clustered = [HEALTHY_INDEXES[0], ("index_rowversion", "rowversion", "CLUSTERED", False)]
    assert _check(HEALTHY_COLUMNS, clustered)["clustered_seq_index"].repair == ("migrate_rowversion_index",)
    conn = RecordingMssqlConnection([("sys.tables", [("DBO", "orders")])])
    assert MSSQL.discover(conn.cursor()) == [QueueAddress("orders")]


def test_check_findings_and_repairs() -> None:
    columns = [c for c in HEALTHY_COLUMNS if c[0] != "CorrelationId"]
    columns = [("Headers", "varchar", -1, False) if c[0] == "Headers" else
               ("Expires", "datetime2", 8, True) if c[0] == "Expires" else c for c in columns]
    indexes = [("Index_RowVersion", "RowVersion", "CLUSTERED", False)]
    found = _check(columns, indexes, [(10, 50_000)])
    assert set(found) == {"missing_column", "varchar_headers", "wrong_column_type", "clustered_seq_index",
                          "missing_expires_index", "heap_bloat"}
    assert found["clustered_seq_index"].repair == ("migrate_rowversion_index",)
    assert found["missing_expires_index"].repair == ("create_queue_expires_index",)
    assert found["heap_bloat"].repair == ("rebuild_heap",)
    assert "datetime2" in found["wrong_column_type"].message


def test_check_missing_and_foreign_clustered_seq_index() -> None:
    assert _check(HEALTHY_COLUMNS, HEALTHY_INDEXES[:1])["missing_seq_index"].repair == ("create_queue_seq_index",)
    other = [HEALTHY_INDEXES[0], ("PK_orders", "RowVersion", "CLUSTERED", False)]
    finding = _check(HEALTHY_COLUMNS, other)["clustered_seq_index"]
    assert finding.repair == () and "PK_orders" in finding.message


def test_migration_statement_drops_and_recreates_nonclustered() -> None:
    sql = MSSQL.render("migrate_rowversion_index", **MSSQL.identifiers(QueueAddress("orders")))
    assert sql.splitlines() == ["DROP INDEX [Index_RowVersion] ON [dbo].[orders];",
                                "CREATE NONCLUSTERED INDEX [Index_RowVersion] ON [dbo].[orders] (RowVersion)"]


# -- engines that lack part of SQL Server (Babelfish 4.3 seen), through the stand-in connection ---------------
BABELFISH_UNMAPPED = 33557097  # Babelfish's number for an error with no SQL Server counterpart


def _babelfish_error(text: str) -> Exception:
    """An UNMAPPED error as pymssql raises it from a statement on Babelfish."""
    return _pymssql_error(pymssql.OperationalError, BABELFISH_UNMAPPED, text)


def test_check_reports_what_it_could_not_check_when_a_catalog_view_is_missing() -> None:
    """No sys.allocation_units (Babelfish): every other part is checked, the heap part is reported as not checked."""
    found = _check(HEALTHY_COLUMNS, HEALTHY_INDEXES, allocation_units=False)
    assert list(found) == ["heap_bloat_not_checked"]
    finding = found["heap_bloat_not_checked"]
    assert finding.not_checked and not finding.repairable and "[cat].sys.allocation_units" in finding.message
    broken = _check(HEALTHY_COLUMNS, HEALTHY_INDEXES[:1], allocation_units=False)
    assert set(broken) == {"missing_seq_index", "heap_bloat_not_checked"}
    assert not broken["missing_seq_index"].not_checked


def test_check_reports_a_catalog_query_the_engine_refuses_and_raises_anything_else() -> None:
    refused = _babelfish_error('relation "sys.allocation_units" does not exist')
    found = _check(HEALTHY_COLUMNS, HEALTHY_INDEXES, refused)
    assert list(found) == ["heap_bloat_not_checked"] and "does not exist" in found["heap_bloat_not_checked"].message
    deadlock = _pymssql_error(pymssql.OperationalError, 1205, DEADLOCK_TEXT)
    with pytest.raises(pymssql.OperationalError, match="deadlock"):
        _check(HEALTHY_COLUMNS, HEALTHY_INDEXES, deadlock)


@pytest.mark.parametrize(("text", "missing"), [
    ('relation "master_dbo.sqlqueue_nope" does not exist', True),
    ('schema "sqlqueue_no_schema" does not exist', True),
    ("Invalid object name 'dbo.nope'.", True),
    ('relation "sys.identity_columns" does not exist', False),  # an engine gap, not a missing queue
    ("'UNPIVOT' is not currently supported in Babelfish", False),
    ("Either the parameter @objname is ambiguous or the claimed @objtype (INDEX) is wrong.", False),
])
def test_an_unmapped_engine_error_is_a_missing_table_only_when_its_text_says_so(text: str, missing: bool) -> None:
    assert MSSQL.is_missing_table(_babelfish_error(text)) is missing
    pyodbc_shaped = PyodbcShapedError("42000", f"[42000] [FreeTDS][SQL Server]{text} ({BABELFISH_UNMAPPED}) "
                                               "(SQLExecDirectW)")
    assert MSSQL.is_missing_table(pyodbc_shaped) is missing


@pytest.mark.parametrize("number", [208, BABELFISH_UNMAPPED])
def test_a_missing_table_raises_queue_not_found_whichever_number_the_engine_gives(number: int) -> None:
    from airflow_sqlqueue.transport.tables.session import Session

    text = "Invalid object name 'dbo.nope'." if number == 208 else 'relation "master_dbo.nope" does not exist'
    conn = RecordingMssqlConnection([("MAX(RowVersion)", _pymssql_error(pymssql.OperationalError, number, text)),
                                     ("@@VERSION", [(150, "Microsoft SQL Server 2019")])])
    session = Session(lambda: conn, MssqlDialect())
    ids = MSSQL.identifiers(QueueAddress("nope"))
    with pytest.raises(QueueNotFoundError, match="does not exist"):
        session.run(lambda cur: MSSQL.scalar(cur, "peek", None, **ids), what="peek 'nope'")
    unsupported = RecordingMssqlConnection([("MAX(RowVersion)", _babelfish_error("'X' is not currently supported"))])
    with pytest.raises(pymssql.OperationalError, match="not currently supported"):
        Session(lambda: unsupported, MssqlDialect()).run(lambda cur: MSSQL.scalar(cur, "peek", None, **ids))
