"""``sqlqueue redirects list|add|remove`` (in-process, and as the installed command) on SQLite and PostgreSQL:
canonical names, who made it, refusals that change nothing (exit 2, one line), hostile names printed escaped, a
retry following what the command stored; and with ``--conn-id`` the page's audit rows in Airflow's audit log."""

from __future__ import annotations  # noqa: I001  (tests.airflow_env must be imported before airflow)

import tests.airflow_env as airflow_env
from tests.airflow_env import airflow_db  # noqa: F401  (fixture)

from pathlib import Path

import pytest

from airflow_sqlqueue.transport import OutgoingMessage
from airflow_sqlqueue.transport.errorqueue.redirects import DEFAULT_REDIRECT_TABLE
from tests.test_cli import Cli, Result, cli, run  # noqa: F401  (fixture)


class InProcess:
    """``sqlqueue`` called in this process (``main``): the subprocess start-up of every call is what made these
    tests slow; one call per test still goes through the installed command (``Cli``)."""

    def __init__(self, cli: Cli, capsys: pytest.CaptureFixture) -> None:  # noqa: F811
        self.cli, self.capsys = cli, capsys

    def __call__(self, *args: str, code: int = 0) -> Result:
        from airflow_sqlqueue.cli.main import main

        self.capsys.readouterr()
        got = main(["--url", self.cli.db.url, "--error-queue", self.cli.db.q("error"), *args])
        out, err = self.capsys.readouterr()
        assert got == code, (args, got, err)
        if code:
            assert err.startswith("sqlqueue: error: ") and err.count("\n") == 1, err
        return Result(got, out, err)


@pytest.fixture
def sq(cli: Cli, capsys: pytest.CaptureFixture) -> InProcess:  # noqa: F811
    return InProcess(cli, capsys)


def redirect_table(cli: Cli) -> str:  # noqa: F811
    return f'"{DEFAULT_REDIRECT_TABLE}"' if cli.db.schema is None else f'"{cli.db.schema}"."{DEFAULT_REDIRECT_TABLE}"'


def redirect_rows(cli: Cli) -> list[tuple]:  # noqa: F811
    if DEFAULT_REDIRECT_TABLE not in {t.rsplit(".", 1)[-1] for t in cli.tables()}:
        return []
    return cli.db.sql(f"SELECT * FROM {redirect_table(cli)}")  # noqa: S608 - test names only


def test_redirects_add_list_remove_and_a_retry_follows(cli: Cli, sq: InProcess) -> None:  # noqa: F811
    orders, billing = cli.db.q("orders"), cli.db.q("billing")
    assert "no retry redirects" in sq("redirects", "list").out
    added = cli("--json", "redirects", "add", cli.db.transport.wire_address(orders), billing, "--as", "alice").json
    assert added == [{"action": "added", "source": cli.name("orders"), "target": cli.name("billing"),
                      "created_by": "alice", "created_at": None}]
    listed = sq("--json", "redirects", "list").json
    assert [(r["source"], r["target"], r["created_by"]) for r in listed] == [
        (cli.name("orders"), cli.name("billing"), "alice")]
    assert listed[0]["created_at"]  # the database's time
    lines = sq("redirects", "list").out.splitlines()
    assert lines[0].split() == ["source", "target", "created_by", "created_at"]
    assert lines[2].split()[:3] == [cli.name("orders"), cli.name("billing"), "alice"]

    # a retry from the command line follows the stored redirect
    t = cli.db.new_transport()
    t.send_many(orders, [OutgoingMessage(b"o1")])

    def boom(message, context):
        raise TimeoutError("slow")

    assert t.process(orders, boom, immediate_retries=0).failed == 1
    t.close()
    back = sq("--json", "retry-errors", "--allow", f"{orders},{billing}").json
    assert back[0]["returned"] == {cli.name("billing"): 1}

    gone = sq("redirects", "remove", orders).out
    assert gone.startswith(f"removed the redirect {cli.name('orders')} -> {cli.name('billing')}")
    assert sq("--json", "redirects", "list").out == ""


def test_redirect_refusals_change_nothing(cli: Cli, sq: InProcess) -> None:  # noqa: F811
    orders, billing, error = cli.db.q("orders"), cli.db.q("billing"), cli.db.q("error")
    # refused before anything is written: the table is not even made
    for args, reason in [(("add", orders, cli.db.q("nowhere")), "does not exist"),
                         (("add", orders, orders), "itself"),
                         (("add", orders, error), "error queue"),
                         (("add", error, orders), "error queue"),
                         (("add", orders), "add takes 2 queue names"),
                         (("list", orders), "list takes no queue names"),
                         (("remove",), "remove takes 1 queue name"),
                         (("add", " ", orders), "name the source queue"),
                         (("add", "x" * 600, orders), "at most"),
                         (("add", orders, billing, "--as", "mallory\u202eecila"), "--as must be"),
                         (("add", orders, billing, "--as", " "), "--as must be")]:
        err = sq("redirects", *args, code=2).err
        assert reason in err, (args, err)
    assert redirect_rows(cli) == []
    err = cli("redirects", "remove", orders, code=2).err  # the installed command: one line, exit 2
    assert "no retry redirect from" in err and "redirects list" in err

    sq("redirects", "add", orders, billing)
    before = redirect_rows(cli)
    for args, reason in [(("add", orders, billing), "already has a redirect"),
                         (("add", cli.db.q("invoices"), orders), "redirects do not chain"),
                         (("add", billing, orders), "redirects do not chain")]:
        assert reason in sq("redirects", *args, code=2).err, args
    assert redirect_rows(cli) == before and len(before) == 1
    err = sq("--error-queue", cli.db.q("missing_errors"), "redirects", "list", code=2).err
    assert "does not exist" in err


def test_redirect_texts_from_the_database_are_printed_escaped(cli: Cli, sq: InProcess) -> None:  # noqa: F811
    sq("redirects", "add", cli.db.q("orders"), cli.db.q("billing"), "--as", "mallory")
    hostile = "evil\x1b]0;pwned\x07name"
    column, mark = ('"CreatedBy"', "?") if cli.db.kind == "sqlite" else ("created_by", "%s")
    cli.db.sql(f"UPDATE {redirect_table(cli)} SET {column} = {mark}", (hostile,))  # noqa: S608 - test names only
    for out in (sq("redirects", "list").out, sq("--json", "redirects", "list").out):
        assert "\x1b" not in out and "\x07" not in out and ("\\u001b" in out or "\\x1b" in out), out
    assert sq("--json", "redirects", "list").json[0]["created_by"] == hostile  # the same value for a parser


def test_redirect_changes_with_conn_id_are_audited_in_airflow(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              airflow_db: None) -> None:  # noqa: F811
    """In-process (one Airflow import): the page's events, owner the user, the canonical names."""
    from airflow_sqlqueue.cli.main import main
    from airflow_sqlqueue.transport import SqlQueueTransport
    from tests.test_dashboard_api import last_audit

    path = tmp_path / "queues.db"
    transport = SqlQueueTransport.from_url(f"sqlite:///{path}")
    transport.create_queues(["orders", "billing", "error"])
    transport.close()
    monkeypatch.setenv("AIRFLOW_CONN_SQ_CLI", "")
    airflow_env.set_connection("sq_cli", {"conn_type": "sqlite", "host": str(path)})
    assert main(["--conn-id", "sq_cli", "redirects", "add", "orders", "billing", "--as", "ops-bob"]) == 0
    entry = last_audit("sqlqueue.redirect_created")
    assert entry.owner == "ops-bob" and '"source": "orders"' in entry.extra and '"via": "cli"' in entry.extra
    assert main(["--conn-id", "sq_cli", "redirects", "remove", "orders", "--as", "ops-bob"]) == 0
    assert last_audit("sqlqueue.redirect_removed").owner == "ops-bob"
    assert main(["--conn-id", "sq_cli", "redirects", "remove", "orders"]) == 2  # nothing to remove: not audited
    err = capsys.readouterr().err
    assert "no retry redirect from" in err and "warning" not in err
