"""``sqlqueue archive-failed`` and ``sqlqueue archives list|show|restore`` as a subprocess, on SQLite and PostgreSQL:
counts, exit codes, and hostile row content printed escaped."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from airflow_sqlqueue.transport import OutgoingMessage
from airflow_sqlqueue.transport.wire import headers as h
from tests.test_cli import Cli, cli, run  # noqa: F401  (fixture)

OLD = h.format_wire_time(datetime.now(timezone.utc) - timedelta(days=60))


def fail(cli: Cli, count: int, when: str | None, exception: str = "Boom") -> list[str]:  # noqa: F811
    headers = {h.FAILED_Q: cli.name("orders"), h.EXCEPTION_TYPE: exception}
    if when:
        headers[h.TIME_OF_FAILURE] = when
    ids = cli.db.transport.send_many(cli.db.q("error"), [OutgoingMessage(body=f"b-{i}".encode(), headers=headers)
                                                         for i in range(count)])
    return [str(i) for i in ids]


def test_archive_list_show_restore(cli: Cli, tmp_path: Path) -> None:  # noqa: F811
    old = fail(cli, 15, OLD, exception="Evil\x1b]0;pwned\x07\u202eType")
    fresh = fail(cli, 4, h.format_wire_time())
    location = str(tmp_path / "archive")
    done = cli("--json", "archive-failed", "--location", location, "--older-than-days", "30", "--batch-size", "4").json
    [summary] = done
    assert summary["rows"] == 15 and summary["deleted"] == 15
    assert cli.db.transport.count(cli.db.q("error")) == 4
    listed = run("archives", "list", "--location", location)
    assert summary["archive_id"] in listed.out and "deleted" in listed.out
    shown = run("archives", "show", summary["archive_id"], "--location", location, "--limit", "5")
    assert "\x1b" not in shown.out and "\u202e" not in shown.out and "\\x1b]0;pwned\\x07\\u202eType" in shown.out
    page = run("--json", "archives", "show", summary["archive_id"], "--location", location, "--limit", "100").json
    assert [m["id"] for m in page[0]["messages"]] == old
    back = cli("archives", "restore", summary["archive_id"], "--location", location, "--id", old[0], "--id", old[1])
    assert "restored 2 messages" in back.out
    again = cli("--json", "archives", "restore", summary["archive_id"], "--location", location).json
    assert again[0]["restored"] == 13 and again[0]["already_restored"] == 2
    ids = sorted(str(m.id) for m in cli.db.transport.browse(cli.db.q("error"), limit=100))
    assert ids == sorted(old + fresh)


def test_archive_input_errors_change_nothing(cli: Cli, tmp_path: Path) -> None:  # noqa: F811
    fail(cli, 3, OLD)
    location = str(tmp_path / "archive")
    err = cli("archive-failed", "--location", location, code=2).err
    assert "say what to archive" in err
    err = cli("archive-failed", "--location", location, "--cutoff", "2024-01-01", code=2).err
    assert "zone" in err
    err = run("archives", "show", "../../etc", "--location", location, code=2).err
    assert "archive id" in err
    err = run("archives", "show", "--location", location, code=2).err
    assert "needs an ARCHIVE_ID" in err
    assert cli.db.transport.count(cli.db.q("error")) == 3 and not Path(location).exists()
