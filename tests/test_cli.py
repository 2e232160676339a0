"""The installed ``sqlqueue`` console script, driven as a subprocess on SQLite and on the real PostgreSQL.

Each test runs the script the way an operator or a shell script would: arguments, stdin, stdout, stderr and
the exit code (0 success, 1 findings, 2 usage or input error, 3 connection or database error).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from airflow_sqlqueue.transport import OutgoingMessage
from airflow_sqlqueue.transport.wire import headers as h
from tests.conftest import PG_URL, Db, make_db

SQLQUEUE = Path(sys.executable).parent / "sqlqueue"
SUBCOMMANDS = ["create", "ddl", "send", "receive", "peek", "list", "purge-expired", "check", "retry-errors", "demo",
               "archive-failed", "archives", "error-groups", "redirects"]


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def json(self) -> list[dict]:
        return [json.loads(line) for line in self.out.splitlines()]


def run(*args: str, stdin: bytes | str | None = None, code: int = 0, env: dict[str, str] | None = None,
        cwd: Path | None = None) -> Result:
    """Run ``sqlqueue ARGS`` and check its exit code; errors must be one line without a traceback."""
    full_env = {k: v for k, v in os.environ.items() if k != "SQLQUEUE_URL"}
    full_env.update(env or {})
    data = stdin.encode() if isinstance(stdin, str) else stdin
    proc = subprocess.run([str(SQLQUEUE), *args], input=data, capture_output=True, env=full_env, cwd=cwd,
                          stdin=subprocess.DEVNULL if data is None else None, timeout=120)
    result = Result(proc.returncode, proc.stdout.decode(), proc.stderr.decode())
    assert result.code == code, f"sqlqueue {' '.join(args)}: exit {result.code}, stderr: {result.err}"
    if "--debug" in args:
        return result
    assert "Traceback" not in result.err
    if code in (2, 3) and not result.err.startswith("usage:"):
        assert result.err.startswith("sqlqueue: error: ") and result.err.count("\n") == 1, result.err
    return result


@dataclass
class Cli:
    """``sqlqueue`` on one test database (the error queue in the test's namespace)."""

    db: Db

    def __call__(self, *args: str, **kwargs) -> Result:
        return run("--url", self.db.url, "--error-queue", self.db.q("error"), *args, **kwargs)

    def name(self, table: str) -> str:
        """The canonical name the CLI prints for a queue of this test."""
        return self.db.transport.name(self.db.q(table))

    def tables(self, marker: str = "") -> set[str]:
        """Tables of this test's namespace (and anywhere whose name contains ``marker``)."""
        if self.db.kind == "sqlite":
            return {r[0] for r in self.db.sql("SELECT name FROM sqlite_master WHERE type = 'table'")}
        rows = self.db.sql("SELECT table_schema || '.' || table_name FROM information_schema.tables "
                           "WHERE table_schema = %s OR (%s <> '' AND table_name LIKE %s)",
                           (self.db.schema, marker, f"%{marker}%"))
        return {r[0] for r in rows}


@contextmanager
def database(kind: str, tmp_path: Path) -> Iterator[Db]:
    """One test database outside the parametrized ``db`` fixture (for tests that need only one dialect)."""
    made = make_db(kind, tmp_path)
    try:
        yield next(made)
    finally:
        next(made, None)  # closes it (and drops the PostgreSQL schema)


@pytest.fixture
def cli(db: Db) -> Cli:
    """The CLI on a database where ``orders`` (with its delayed table), ``billing`` and ``error`` exist."""
    db.transport.create_queues([db.q("orders")], delayed=True)
    db.transport.create_queues([db.q("billing"), db.q("error")])
    return Cli(db)


# -- help and DDL (no database) ---------------------------------------------------------------------
def test_every_subcommand_has_help_with_examples():
    top = run("--help")
    for name in SUBCOMMANDS:
        assert name in top.out
    assert "exit codes" in top.out and "SQLQUEUE_URL" in top.out
    for name in SUBCOMMANDS:
        page = run(name, "--help").out
        assert page.startswith(f"usage: sqlqueue {name}") and "examples:" in page and f"sqlqueue {name}" in page


def test_ddl_prints_the_named_script_without_a_connection():
    mssql = run("ddl", "orders", "error", "--dialect", "mssql").out
    assert "-- create_queue_table:" in mssql and "CREATE TABLE [dbo].[orders]" in mssql
    assert "[dbo].[error]" in mssql and "Delayed" not in mssql
    postgres = run("ddl", '"sales"."orders"', "--dialect", "postgres", "--delayed").out
    assert '"sales"."orders"' in postgres and '"sales"."orders.Delayed"' in postgres
    assert "CREATE TABLE" in run("ddl", "orders", "--dialect", "sqlite").out
    assert "invalid choice" in run("ddl", "orders", "--dialect", "oracle", code=2).err
    assert "3 parts" in run("ddl", "a.b.c", "--dialect", "postgres", code=2).err


# -- connection options and bad URLs ----------------------------------------------------------------
def test_bad_urls_are_input_errors_and_create_nothing(tmp_path: Path):
    missing = tmp_path / "missing.db"
    for url, says in [("foo://x", "unsupported URL scheme"), ("queues.db", "not a connection URL"),
                      ("sqlite://", "needs a file path"), ("sqlite:///:memory:", "use a file path"),
                      ("postgresql://u:s3cret@db:port/x", "bad database URL"),
                      (f"sqlite:///{missing}", "does not exist")]:
        result = run("--url", url, "peek", "orders", code=2)
        assert says in result.err and "s3cret" not in result.err
    assert "folder" in run("--url", f"sqlite:///{tmp_path}/nodir/q.db", "create", "orders", code=2).err
    assert "no database given" in run("peek", "orders", code=2).err
    forgot_url = run("postgresql://u:s3cret@db/x", "peek", "orders", code=2)
    assert "invalid choice: 'postgresql://u:***@db/x'" in forgot_url.err and "s3cret" not in forgot_url.err
    assert "not both" in run("--url", "sqlite:///q.db", "--conn-id", "x", "peek", "q", code=2).err
    assert list(tmp_path.iterdir()) == []


def test_connection_errors_exit_3_and_never_show_the_password():
    for url in ["postgresql://postgres:s3cret@127.0.0.1:1/test", "mssql+pymssql://sa:s3cret@127.0.0.1:1/db",
                "postgresql://postgres@127.0.0.1:1/test?password=s3cret"]:
        result = run("--url", url, "peek", "orders", code=3)
        assert "cannot connect" in result.err and "s3cret" not in result.err and "***" in result.err
    for url in ["postgresql://postgres:s3cret@127.0.0.1:1/test", "postgresql://postgres@127.0.0.1:1/test?password=s3cret"]:
        debug = run("--debug", "--url", url, "list", code=3)
        assert "Traceback" in debug.err and "s3cret" not in debug.out + debug.err


def test_url_from_the_environment_variable(cli: Cli):
    cli.db.transport.send(cli.db.q("orders"), b"one")
    assert run("peek", cli.db.q("orders"), env={"SQLQUEUE_URL": cli.db.url}).out == "1\n"


def test_airflow_connection_by_conn_id(tmp_path: Path):
    """An Airflow connection from an AIRFLOW_CONN_<ID> variable (once: each run imports Airflow, ~3 s)."""
    with database("postgres", tmp_path) as db:
        url = urlsplit(PG_URL)
        conn = {"conn_type": "postgres", "host": url.hostname, "port": url.port or 5432, "login": url.username,
                "password": url.password, "schema": url.path.lstrip("/")}
        env = {"AIRFLOW_HOME": str(tmp_path / "airflow"), "AIRFLOW_CONN_QUEUES_DB": json.dumps(conn)}
        db.transport.create_queues([db.q("orders")])
        db.transport.send_many(db.q("orders"), [b"a", b"b"])
        result = run("--conn-id", "queues_db", "--json", "peek", db.q("orders"), env=env)
        assert result.json == [{"queue": db.transport.name(db.q("orders")), "depth": 2}]


def test_airflow_connection_errors(tmp_path: Path):
    bad = {"conn_type": "postgres", "host": "127.0.0.1", "port": 1, "login": "postgres", "password": "s3cret",
           "schema": "test"}
    env = {"AIRFLOW_HOME": str(tmp_path), "AIRFLOW_CONN_BAD_DB": json.dumps(bad)}
    result = run("--conn-id", "bad_db", "peek", "orders", env=env, code=3)
    assert "cannot connect to postgresql://postgres:***@127.0.0.1:1/test" in result.err and "s3cret" not in result.err
    assert "'nowhere' not found" in run("--conn-id", "nowhere", "peek", "orders", env=env, code=2).err


# -- create ------------------------------------------------------------------------------------------
def test_create_is_idempotent_and_reports_what_it_did(db: Db):
    cli = Cli(db)
    made = run("--url", db.url, "create", db.q("orders"), db.q("error")).out
    assert made == f"created {cli.name('orders')}\ncreated {cli.name('error')}\n"
    assert run("--url", db.url, "create", db.q("error")).out == f"{cli.name('error')} already exists\n"
    again = run("--url", db.url, "--json", "create", db.q("orders"), "--delayed")
    assert again.json == [{"queue": cli.name("orders"), "created": False, "delayed": True}]
    assert db.transport.exists(db.transport.dialect.delayed_address(db.transport.address(db.q("orders"))))
    assert run("--url", db.url, "peek", db.q("orders")).out == "0\n"


def test_bad_queue_names_are_input_errors_and_create_nothing(db: Db):
    cli = Cli(db)
    marker = "zz" + uuid.uuid4().hex[:8]
    bad = ["", "   ", marker + "x" * 200] if db.kind == "sqlite" else [
        "", marker + "x" * 60, f"{db.schema}.{marker}.c", f'"{marker}', f'{db.schema}."{marker}"x']
    if db.kind == "sqlite":
        run("--url", db.url, "create", "seed")  # the database file exists, so only the names are wrong
    before = cli.tables(marker)
    for name in bad:
        says = run("--url", db.url, "create", db.q(marker + "good"), name, code=2).err  # the good one neither
        assert "address" in says or "name" in says
        run("--url", db.url, "send", name, "--body", "x", code=2)
    run("--url", db.url, "receive", bad[-1], code=2)
    run("ddl", bad[-1], "--dialect", "postgres" if db.kind == "postgres" else "sqlite", code=2)
    assert cli.tables(marker) == before


# -- send and receive --------------------------------------------------------------------------------
def test_round_trip_of_1000_messages_from_stdin(cli: Cli):
    orders = cli.db.q("orders")
    bodies = [f'message {i}: {{"n": {i}, "text": "ünïcode ✓\tand tab"}}' for i in range(1000)]
    sent = cli("send", orders, "--header", "NServiceBus.EnclosedMessageTypes=Sales.OrderPlaced",
               "--header", "batch=b1", stdin="\n".join(bodies) + "\n")
    assert sent.out == f"sent 1000 messages to {cli.name('orders')}\n"
    assert cli("peek", orders).out == "1000\n"
    received = cli("receive", orders, "--max", "1000", "--json").json
    assert [m["body"] for m in received] == bodies
    assert len({m["id"] for m in received}) == 1000 and all(uuid.UUID(m["id"]) for m in received)
    for message in received:
        assert set(message) == {"id", "headers", "body"}
        assert message["headers"]["NServiceBus.EnclosedMessageTypes"] == "Sales.OrderPlaced"
        assert message["headers"]["batch"] == "b1"
        assert uuid.UUID(message["headers"][h.MESSAGE_ID]) and h.TIME_SENT in message["headers"]
    assert cli("peek", orders).out == "0\n"
    assert cli("--json", "peek", orders).json == [{"queue": cli.name("orders"), "depth": 0}]


def test_send_options_and_the_received_shapes(cli: Cli, tmp_path: Path):
    orders = cli.db.q("orders")
    assert cli("--json", "send", orders, "--body", "x", "--count", "3", "--header", "A=1", "--header",
               "B=b=c").json == [{"queue": cli.name("orders"), "sent": 3}]
    binary = tmp_path / "body.bin"
    binary.write_bytes(b"\xff\x00\xfe raw")
    cli("send", orders, "--body-file", str(binary))
    cli("send", orders, "--count", "2", stdin=b"first\r\n\r\n  \nsecond\n")  # blank lines skipped, CR LF removed
    messages = cli("receive", orders, "--max", "10", "--json", "--mode", "sends-atomic-with-receive").json
    assert [m.get("body") for m in messages] == ["x", "x", "x", None, "first", "first", "second", "second"]
    assert [(m["headers"]["A"], m["headers"]["B"]) for m in messages[:3]] == [("1", "b=c")] * 3
    assert set(messages[3]) == {"id", "headers", "body_base64"}
    assert base64.b64decode(messages[3]["body_base64"]) == b"\xff\x00\xfe raw"

    cli("send", orders, "--body", "line one\nline two", "--header", "NServiceBus.EnclosedMessageTypes=T")
    cli("send", orders, "--body-file", str(binary))
    people = cli("receive", orders, "--max", "5")
    first, second = people.out.splitlines()
    assert first.endswith("  T  line one\\nline two") and second.endswith("  -  base64:/wD+IHJhdw==")
    assert people.err == "received 2 messages\n"


def test_send_delay_goes_through_the_delayed_table(cli: Cli):
    orders, billing = cli.db.q("orders"), cli.db.q("billing")
    cli("send", orders, "--body", "later", "--delay", "0.5")
    assert cli("peek", orders).out == "0\n"
    time.sleep(1)
    assert [m["body"] for m in cli("--json", "receive", orders).json] == ["later"]  # moved in when due
    assert "has no delayed table" in cli("send", billing, "--body", "x", "--delay", "1", code=2).err


def test_send_input_errors_send_nothing(tmp_path: Path):
    """Checked before anything is sent, the same way on every database (so once, on SQLite)."""
    with database("sqlite", tmp_path) as db:
        db.transport.create_queues(["orders"])
        cli = Cli(db)
        orders = "orders"
        for args, says in [(["--body", "x", "--count", "0"], "--count must be 1 or more"),
                           (["--body", "x", "--header", "novalue"], "KEY=VALUE"),
                           (["--body", "x", "--ttbr", "-1"], "must be positive"),
                           (["--body", "x", "--ttbr", "5", "--delay", "5"], "both a delay"),
                           (["--body", "x", "--ttbr", "soon"], "invalid float value"),
                           (["--body", "x", "--body-file", "f"], "not allowed with argument"),
                           (["--body-file", str(tmp_path / "nope")], "cannot read --body-file")]:
            assert says in cli("send", orders, *args, code=2).err
        assert cli("send", orders).out == f"sent 0 messages to {cli.name('orders')}\n"  # empty stdin
        assert cli.db.transport.peek(orders) == 0


def test_receive_exit_codes(cli: Cli):
    orders = cli.db.q("orders")
    empty = cli("receive", orders, "--require", code=1)
    assert (empty.out, empty.err) == ("", "received 0 messages\n")
    assert cli("receive", orders, "--json").out == ""
    assert "--max must be 1 or more" in cli("receive", orders, "--max", "0", code=2).err
    assert "invalid choice" in cli("receive", orders, "--mode", "transaction-scope", code=2).err
    cli.db.transport.send(orders, b"one")
    assert cli("receive", orders, "--require", "--json").json[0]["body"] == "one"


def test_receive_drops_expired_messages(cli: Cli):
    orders = cli.db.q("orders")
    cli("send", orders, "--body", "stale", "--ttbr", "0.001", "--count", "2")
    cli("send", orders, "--body", "fresh")
    time.sleep(0.1)
    result = cli("receive", orders, "--max", "5")
    assert result.out.endswith("  fresh\n") and result.err == "received 1 message (2 expired dropped)\n"


@pytest.mark.parametrize("mode", ["receive-only", "sends-atomic-with-receive", "none"])
def test_stdout_closed_early(cli: Cli, mode: str):
    """``receive | head -1``: in the held modes the messages not printed stay queued; mode none loses them.

    Each body is larger than a pipe's buffer, so the second message cannot be written once the reader has
    stopped after the first line. The reader waits a moment before it closes, so that the second message is
    half written by then; with PYTHONUNBUFFERED (as in many containers) Python's stdout used to drop the rest
    of such a line without an error, and the message counted as printed.
    """
    orders = cli.db.q("orders")
    bodies = [f"{i}:" + "x" * 200_000 for i in range(5)]
    cli.db.transport.send_many(orders, [b.encode() for b in bodies])
    env = {**{k: v for k, v in os.environ.items() if k != "SQLQUEUE_URL"}, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([str(SQLQUEUE), "--url", cli.db.url, "--error-queue", cli.db.q("error"), "--json",
                             "receive", orders, "--max", "5", "--mode", mode],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    first = b""
    while b"\n" not in first:
        chunk = os.read(proc.stdout.fileno(), 4096)
        assert chunk, "sqlqueue ended before printing a line"
        first += chunk
    time.sleep(0.5)  # the second message is being written, blocked on the full pipe
    proc.stdout.close()  # like `head -1`
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0 and "Traceback" not in err
    assert json.loads(first.split(b"\n")[0])["body"] == bodies[0]
    if mode == "none":
        assert cli.db.transport.peek(orders) == 0
        assert "4 received messages not printed (stdout closed) are lost" in err
    else:
        assert err == ""
        rest = cli("--json", "receive", orders, "--max", "10", "--mode", mode).json
        assert [m["body"] for m in rest] == bodies[1:]


# -- peek, list and missing queues -------------------------------------------------------------------
def test_list_shows_depth_and_age_of_the_oldest_message(cli: Cli):
    cli.db.transport.send_many(cli.db.q("orders"), [OutgoingMessage(b"o", {h.TIME_SENT: h.format_wire_time()})] * 3)
    mine = {cli.name(t) for t in ("orders", "billing", "error")}
    rows = {r["queue"]: r for r in cli("--json", "list").json if r["queue"] in mine}
    assert set(rows) == mine  # the delayed table is not a queue
    assert rows[cli.name("orders")]["depth"] == 3 and rows[cli.name("orders")]["oldest_age_seconds"] >= 0
    assert rows[cli.name("billing")] == {"queue": cli.name("billing"), "depth": 0, "oldest_age_seconds": None}
    people = cli("list").out.splitlines()
    assert people[0].split() == ["queue", "depth", "oldest"]
    [line] = [row for row in people if row.startswith(cli.name("orders") + " ")]
    assert line.split()[1] == "3" and line.split()[2].endswith("s")


def test_list_skips_a_queue_dropped_while_listing(tmp_path: Path, capsys):
    """A DBA drops a queue between discovery and its peek: the others are still listed (in process: the race
    cannot be timed from outside)."""
    from airflow_sqlqueue.cli.commands import list_queues
    from airflow_sqlqueue.transport import SqlQueueTransport

    class DroppingTransport(SqlQueueTransport):
        def discover(self) -> list[str]:
            found = super().discover()
            self.run(lambda cur: cur.execute('DROP TABLE "gone"'))
            return found

    with DroppingTransport.from_url(f"sqlite:///{tmp_path / 'q.db'}") as transport:
        transport.create_queues(["gone", "kept"])
        transport.send("kept", b"x")
        assert list_queues(transport, type("Args", (), {"json": True})()) == 0
    [listed] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    # every send carries NServiceBus.TimeSent: the queue has an age
    assert listed["queue"] == "kept" and listed["depth"] == 1 and listed["oldest_age_seconds"] >= 0


def test_a_missing_queue_is_an_input_error_everywhere(cli: Cli):
    missing = cli.db.q("nosuch")
    before = cli.tables()
    for args in [["send", missing, "--body", "x"], ["receive", missing], ["peek", missing],
                 ["purge-expired", missing], ["check", cli.db.q("orders"), missing]]:
        assert f"queue {cli.name('nosuch')!r} does not exist" in cli(*args, code=2).err
    assert "does not exist" in run("--url", cli.db.url, "--error-queue", missing, "retry-errors", code=2).err
    if cli.db.kind == "postgres":
        assert "does not exist" in cli("create", '"nosuchschema_' + uuid.uuid4().hex[:6] + '".q', code=2).err
    assert cli.tables() == before


# -- maintenance -------------------------------------------------------------------------------------
def test_purge_expired(cli: Cli):
    orders, billing = cli.db.q("orders"), cli.db.q("billing")
    cli("send", orders, "--body", "stale", "--ttbr", "0.001", "--count", "5")
    cli("send", orders, "--body", "fresh", "--count", "2")
    time.sleep(0.1)
    purged = cli("--json", "purge-expired", orders, billing, "--batch-size", "2").json
    assert purged == [{"queue": cli.name("orders"), "purged": 5}, {"queue": cli.name("billing"), "purged": 0}]
    assert cli.db.transport.peek(orders) == 2
    assert "give queue names or --all" in cli("purge-expired", orders, "--all", code=2).err
    assert "name at least one queue" in cli("purge-expired", code=2).err
    assert "--batch-size must be 1 or more" in cli("purge-expired", orders, "--batch-size", "0", code=2).err
    if cli.db.kind == "sqlite":  # --all on the shared PostgreSQL would touch other people's queues
        cli("send", billing, "--body", "stale", "--ttbr", "0.001")
        time.sleep(0.1)
        table = cli("purge-expired", "--all").out.splitlines()
        assert table[0].split() == ["queue", "purged"] and ["billing", "1"] in [r.split() for r in table]


def _drop_expires_index(db: Db, table: str) -> None:
    dialect = db.transport.dialect
    index = dialect.quote(dialect.index_name(db.transport.address(db.q(table)), "expires"))
    db.sql(f"DROP INDEX {dialect.quote(db.schema) + '.' if db.schema else ''}{index}")


def test_check_reports_findings_and_repairs_them(cli: Cli):
    orders, billing = cli.db.q("orders"), cli.db.q("billing")
    assert cli("check", orders, billing).out == "no findings in 2 queues\n"
    _drop_expires_index(cli.db, "orders")
    found = cli("--json", "check", orders, billing, code=1).json
    assert [(f["queue"], f["code"], f["repairable"], f["repaired"]) for f in found] == [
        (cli.name("orders"), "missing_expires_index", True, False)]
    assert "missing_expires_index  repairable" in cli("check", orders, code=1).out
    repaired = cli("check", orders, "--repair", "--json").json
    assert [(f["code"], f["repaired"]) for f in repaired] == [("missing_expires_index", True)]
    assert cli("check", orders).out == "no findings in 1 queue\n"
    if cli.db.kind == "sqlite":  # --all on the shared PostgreSQL would inspect other people's queues
        _drop_expires_index(cli.db, "billing")
        assert "billing  missing_expires_index" in cli("check", "--all", code=1).out
        assert "repaired" in cli("check", "--all", "--repair").out


def test_retry_errors_lists_filters_and_returns(cli: Cli):
    t = cli.db.new_transport()
    orders, billing, error = cli.db.q("orders"), cli.db.q("billing"), cli.db.q("error")
    t.send_many(orders, [OutgoingMessage(f"o{i}".encode(), {"i": str(i)}) for i in range(3)])
    t.send_many(billing, [OutgoingMessage(b"b0")])

    def timeout(message, context):
        raise TimeoutError("slow")

    def broken(message, context):
        raise KeyError("field")

    assert t.process(orders, timeout, immediate_retries=0).failed == 3
    assert t.process(billing, broken, immediate_retries=0).failed == 1
    t.close()

    listed = cli("--json", "retry-errors", "--list").json
    wire = cli.db.transport.wire_address  # FailedQ is the canonical address, as .NET endpoints write it
    assert [(m["body"], m["failed_q"], m["exception_type"]) for m in listed] == [
        ("o0", wire(orders), "TimeoutError"), ("o1", wire(orders), "TimeoutError"),
        ("o2", wire(orders), "TimeoutError"), ("b0", wire(billing), "KeyError")]
    assert set(listed[0]) >= {"id", "headers", "body", "failed_q", "exception_type", "exception_message"}
    grouped = [line.split() for line in cli("retry-errors", "--list").out.splitlines()[2:]]
    assert sorted(grouped) == sorted([[wire(orders), "TimeoutError", "3"], [wire(billing), "KeyError", "1"]])
    assert [m["body"] for m in cli("--json", "retry-errors", "--list", "--filter", "exception=Key").json] == ["b0"]

    assert "--allow" in cli("retry-errors", code=2).err  # no destination named: nothing moves
    assert cli.db.transport.peek(error) == 4
    back = cli("--json", "retry-errors", "--allow", orders, "--filter", "failedq=orders", "--max", "2").json
    assert back[0]["returned"] == {cli.name("orders"): 2} and back[0]["total_returned"] == 2
    assert cli.db.transport.peek(error) == 2
    assert "unknown --filter colour" in cli("retry-errors", "--filter", "colour=red", code=2).err
    rest = cli("retry-errors", "--allow", f"{orders},{billing}").out.splitlines()
    assert sorted(line.split() for line in rest[2:]) == [[cli.name("billing"), "1"], [cli.name("orders"), "1"]]
    assert cli("retry-errors", "--allow", orders).out == "nothing returned\n"
    bodies = [m["body"] for m in cli("--json", "receive", orders, "--max", "5").json]
    assert bodies == ["o0", "o1", "o2"]  # returned with their Id and body, oldest first


# -- progress bars -----------------------------------------------------------------------------------
def run_on_terminal(args: list[str], stdin: bytes | None = None) -> tuple[int, str, str]:
    """Run ``sqlqueue`` with stderr on a pseudo-terminal and stdout on a pipe; return (code, stdout, terminal)."""
    pty = pytest.importorskip("pty")
    pytest.importorskip("rich")
    main_fd, terminal_fd = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "SQLQUEUE_URL"} | {"TERM": "xterm", "COLUMNS": "100"}
    proc = subprocess.Popen([str(SQLQUEUE), *args], stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=terminal_fd, env=env)
    os.close(terminal_fd)
    out: list[bytes] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read()))
    reader.start()
    if stdin:
        proc.stdin.write(stdin)
        proc.stdin.close()
    screen = b""
    while True:
        try:
            chunk = os.read(main_fd, 65536)
        except OSError:  # the terminal closed: the process has ended
            break
        if not chunk:
            break
        screen += chunk
    os.close(main_fd)
    reader.join()
    return proc.wait(timeout=60), out[0].decode(), screen.decode(errors="replace")


def test_progress_bars_only_on_a_terminal_and_never_with_json(tmp_path: Path):
    with database("sqlite", tmp_path) as db:  # the bars do not depend on the database
        db.transport.create_queues(["orders"])
        lines = "".join(f"m{i}\n" for i in range(2500)).encode()
        code, out, screen = run_on_terminal(["--url", db.url, "send", "orders"], stdin=lines)
        assert code == 0 and out == "sent 2500 messages to orders\n" and "sending to orders" in screen
        code, out, screen = run_on_terminal(["--url", db.url, "receive", "orders", "--max", "2000"])
        assert code == 0 and "receiving from orders" in screen and "received 2000 messages" in screen
        assert [line.split()[-1] for line in out.splitlines()] == [f"m{i}" for i in range(2000)]  # stdout intact
        code, out, screen = run_on_terminal(["--url", db.url, "--json", "receive", "orders", "--max", "2000"])
        assert code == 0 and screen == "" and [json.loads(x)["body"] for x in out.splitlines()] == [
            f"m{i}" for i in range(2000, 2500)]
        piped = run("--url", db.url, "send", "orders", stdin=lines)
        assert piped.err == "" and piped.out == "sent 2500 messages to orders\n"
        code, out, screen = run_on_terminal(["--url", db.url, "purge-expired", "orders"])
        assert code == 0 and "purging orders" in screen and out.split()[-2:] == ["orders", "0"]


@pytest.mark.parametrize("password", ['pa"ss', "pa'ss", "pa ss", "p'a \"s s", "p%20a'ss", "pa ss?x=1 y"])
def test_no_error_repeats_a_password_holding_a_quote_or_a_space(password: str) -> None:
    """A URL given where the command was expected, after the queue, with --url=, refused by the server, or
    malformed (an unencoded '?' in the password): no usage error, error line or --debug traceback repeats it."""
    import contextlib
    import io
    from urllib.parse import unquote

    from airflow_sqlqueue.cli.main import main

    url = f"postgresql://app:{password}@127.0.0.1:1/test?connect_timeout=2"
    connecting = 2 if "?" in password else 3  # a '?' in the password ends the host part: a bad URL
    texts = []
    for argv, code in [([url, "peek", "orders"], 2), (["peek", "orders", url], 2), (["peek", url], 2),
                       (["--url", url, "peek", "orders", "--max", "x"], 2), ([f"--url={url}", "nosuch"], 2),
                       (["--url", url, "peek", "orders"], connecting),
                       (["--debug", "--url", url, "peek", "orders"], connecting),
                       (["--url", url.replace(f":{password}@", "@") + "&password=" + password, "list"], 3)]:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.suppress(SystemExit):
            assert main(argv) == code, err.getvalue()
        texts.append(err.getvalue())
    assert "invalid choice: " in texts[0] and "postgresql://app:***@127.0.0.1:1/test?connect_timeout=2" in texts[0]
    assert "unrecognized arguments: postgresql://app:***@" in texts[1], texts[1]
    assert "Traceback" in texts[6] and all(text.count("sqlqueue: error: ") == 1 for text in texts), texts
    for secret in {password, unquote(password), repr(password)[1:-1]} | set(password.split()):
        assert not [text for text in texts if secret in text and len(secret) > 2], (secret, texts)


def test_check_shows_what_it_could_not_check_and_exits_0_for_it(capsys: pytest.CaptureFixture[str]) -> None:
    """A part of the check the engine did not allow (Babelfish has no sys.allocation_units) is reported, not failed."""
    import argparse

    from airflow_sqlqueue.cli import commands
    from airflow_sqlqueue.transport import Finding

    class StandInTransport:
        """Not a transport: answers check() as one on an engine without sys.allocation_units does."""

        def __init__(self, problem: bool) -> None:
            self.problem = problem

        def name(self, queue: str) -> str:
            return queue

        def exists(self, queue: str) -> bool:
            return True

        def check(self, queue: str, *, repair: bool = False) -> list[Finding]:
            found = [Finding(queue, "heap_bloat_not_checked", "heap bloat not checked: no sys.allocation_units",
                             not_checked=True)]
            return found + ([Finding(queue, "missing_seq_index", "no index on RowVersion")] if self.problem else [])

    args = argparse.Namespace(all=False, queues=["orders"], repair=False, json=False)
    assert commands.check(StandInTransport(problem=False), args) == 0  # type: ignore[arg-type]
    assert "heap_bloat_not_checked  not checked" in capsys.readouterr().out
    assert commands.check(StandInTransport(problem=True), args) == 1  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert "missing_seq_index       manual" in out and "not checked" in out
    args.json = True
    assert commands.check(StandInTransport(problem=False), args) == 0  # type: ignore[arg-type]
    [row] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["code"] == "heap_bloat_not_checked" and row["not_checked"] is True and row["repairable"] is False
