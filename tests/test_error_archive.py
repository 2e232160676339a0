"""The error archive on SQLite and PostgreSQL: failed messages by age or group to Parquet with a manifest, then
deleted; every message counted (archived + left == before), every byte kept, restore exactly once, a crash between
write and delete finished by the next run, hostile rows, and memory bounded on 20,000 rows."""

from __future__ import annotations

import gc
import hashlib
import json
import os
import tracemalloc
import uuid
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from airflow_sqlqueue.archive.error_archive import (
    ArchiveRefusedError,
    ArchiveSelection,
    archive_failed,
    archive_page,
    list_archives,
    restore_archive,
)
from airflow_sqlqueue.archive.store import ArchiveLocationError
from airflow_sqlqueue.transport import OutgoingMessage
from airflow_sqlqueue.transport.errorqueue.previews import FailedFilter
from airflow_sqlqueue.transport.wire import headers as h
from tests.conftest import Db

OLD = datetime(2020, 1, 1, tzinfo=timezone.utc)
NEW = datetime.now(timezone.utc)
CUTOFF = datetime(2024, 1, 1, tzinfo=timezone.utc)


def fail(db: Db, count: int, *, when: datetime | None, exception: str = "Boom", queue: str = "orders",
         body: bytes | None = None) -> list[str]:
    """``count`` failed messages of ``queue`` in the error queue that failed at ``when`` (None: no header)."""
    headers = {h.FAILED_Q: db.transport.name(db.q(queue)), h.EXCEPTION_TYPE: exception,
               h.ENCLOSED_MESSAGE_TYPES: "Shop.OrderPlaced"}
    if when is not None:
        headers[h.TIME_OF_FAILURE] = h.format_wire_time(when)
    ids = db.transport.send_many(db.q("error"), [
        OutgoingMessage(body=body if body is not None else f"{exception}-{i}".encode(), headers=headers)
        for i in range(count)])
    return [str(i) for i in ids]


def stored(db: Db) -> dict[str, tuple[Any, Any]]:
    """Every row of the error queue: id -> (headers, body) exactly as the database holds them."""
    table = db.transport.book.queue(db.q("error"))
    sql = ("SELECT CAST(id AS TEXT), CAST(headers AS BLOB), typeof(headers), CAST(body AS BLOB), typeof(body) "
           "FROM {t}") if db.kind == "sqlite" else "SELECT id::text, headers, 'text', body, 'blob' FROM {t}"
    rows = db.sql(sql.format(t=db.transport.dialect.qualified(table.address)))
    return {str(r[0]): (bytes(r[1]) if isinstance(r[1], bytes | memoryview) else r[1].encode(), r[2],
                        bytes(r[3]) if r[3] is not None else None, r[4]) for r in rows}


def archived_rows(location: Path, archive_id: str) -> list[dict[str, Any]]:
    out = []
    for part in sorted((location / archive_id).glob("part-*.parquet")):
        out += pq.read_table(part).to_pylist()
    return out


def test_archive_by_age_counts_every_message_and_keeps_every_byte(db: Db, tmp_path: Path) -> None:
    db.transport.create_queues([db.q("orders"), db.q("error")])
    old = fail(db, 230, when=OLD)
    new = fail(db, 40, when=NEW)
    untimed = fail(db, 7, when=None)
    before = stored(db)
    location = tmp_path / "archive"
    result = archive_failed(db.transport, db.q("error"), str(location), ArchiveSelection(cutoff=CUTOFF),
                            batch_size=37, rows_per_file=100)
    left = stored(db)
    assert result["status"] == "deleted" and result["rows"] == 230 and result["deleted"] == 230
    assert set(left) == set(new) | set(untimed)  # a row whose time cannot be read is not older than anything
    rows = archived_rows(location, result["archive_id"])
    assert Counter(r["id"] for r in rows) == Counter(old)  # each archived once
    assert len(rows) + len(left) == len(before)  # archived + left == before
    for row in rows:  # every byte as stored
        headers, _, body, _ = before[row["id"]]
        assert row["headers"] == headers and row["body"] == body and row["exception_type"] == "Boom"
        assert row["time_of_failure"] == OLD and row["failed_q"] == db.transport.name(db.q("orders"))
    manifest = json.loads((location / result["archive_id"] / "manifest.json").read_text())
    assert [f["rows"] for f in manifest["files"]] == [100, 100, 30]
    for f in manifest["files"]:
        assert f["sha256"] == hashlib.sha256((location / result["archive_id"] / f["path"]).read_bytes()).hexdigest()
    assert sorted(manifest["ids"]) == sorted(old) and manifest["min_time_of_failure"] == OLD.isoformat()
    assert manifest["selection"]["cutoff"] == CUTOFF.isoformat() and manifest["not_found"] == []
    assert manifest["groups"] == [{"failed_q": db.transport.name(db.q("orders")), "exception_type": "Boom",
                                   "message_type": "Shop.OrderPlaced", "count": 230}]
    assert [a["archive_id"] for a in list_archives(str(location))] == [result["archive_id"]]


def test_archive_by_group_and_browse_then_restore_exactly_once(db: Db, tmp_path: Path) -> None:
    db.transport.create_queues([db.q("orders"), db.q("error")])
    timeouts = fail(db, 25, when=None, exception="Timeout")
    kept = fail(db, 10, when=OLD, exception="Boom")
    before = stored(db)
    location = str(tmp_path / "archive")
    result = archive_failed(db.transport, db.q("error"), location,
                            ArchiveSelection(where=FailedFilter(exception_type="Timeout")), batch_size=10)
    assert result["rows"] == 25 and set(stored(db)) == set(kept)
    archive_id = result["archive_id"]

    first = archive_page(location, archive_id, limit=10)
    second = archive_page(location, archive_id, after_seq=first[-1]["seq"], limit=100)
    assert [m["id"] for m in first + second] == timeouts  # queue order, paged by position
    assert first[0]["exception_type"] == "Timeout" and first[0]["body_preview"] == "Timeout-0"
    assert archive_page(location, archive_id, where=FailedFilter(search="Timeout-")) == []  # bodies are not headers
    assert len(archive_page(location, archive_id, where=FailedFilter(exception_type="Timeout"))) == 25

    chosen = timeouts[:5]
    done = restore_archive(db.transport, location, archive_id, ids=chosen, batch_size=2)
    assert done["restored"] == 5 and done["already_restored"] == 0
    again = restore_archive(db.transport, location, archive_id, batch_size=7)
    assert again["restored"] == 20 and again["already_restored"] == 5
    third = restore_archive(db.transport, location, archive_id)
    assert third["restored"] == 0 and third["already_restored"] == 25
    after = stored(db)
    assert after == before  # every message back once: same Id, headers and body
    assert all(m["restored"] for m in archive_page(location, archive_id, limit=100))
    with pytest.raises(ArchiveRefusedError, match="not restorable messages"):
        restore_archive(db.transport, location, archive_id, ids=[str(uuid.uuid4())])


def test_a_crash_between_write_and_delete_is_finished_by_the_next_run(db: Db, tmp_path: Path) -> None:
    db.transport.create_queues([db.q("orders"), db.q("error")])
    old = fail(db, 60, when=OLD)
    location = str(tmp_path / "archive")

    def crash(manifest: dict[str, Any]) -> None:
        raise RuntimeError("the worker died here")

    with pytest.raises(RuntimeError, match="died"):
        archive_failed(db.transport, db.q("error"), location, ArchiveSelection(cutoff=CUTOFF), batch_size=16,
                       before_delete=crash)
    assert set(stored(db)) == set(old)  # written, nothing deleted
    [crashed] = list_archives(location)
    assert crashed["status"] == "written" and crashed["rows"] == 60
    with pytest.raises(ArchiveRefusedError, match="deletion did not finish"):
        restore_archive(db.transport, location, crashed["archive_id"])
    more = fail(db, 5, when=OLD)
    rerun = archive_failed(db.transport, db.q("error"), location, ArchiveSelection(cutoff=CUTOFF), batch_size=16)
    assert rerun["resumed"] == [crashed["archive_id"]] and rerun["rows"] == 5
    assert stored(db) == {}
    archives = {a["archive_id"]: a for a in list_archives(location)}
    assert {a["status"] for a in archives.values()} == {"deleted"}
    counted = Counter(r["id"] for a in archives for r in archived_rows(Path(location), a))
    assert counted == Counter(old + more)  # no message lost, none archived twice
    restore_archive(db.transport, location, crashed["archive_id"])
    assert sorted(stored(db)) == sorted(old)


def test_bad_requests_are_refused_with_the_fix_and_change_nothing(db: Db, tmp_path: Path) -> None:
    db.transport.create_queues([db.q("orders"), db.q("error")])
    fail(db, 3, when=OLD)
    with pytest.raises(ArchiveRefusedError, match="say what to archive"):
        ArchiveSelection()
    with pytest.raises(ArchiveRefusedError, match="time zone"):
        ArchiveSelection(cutoff=datetime(2024, 1, 1))  # noqa: DTZ001
    with pytest.raises(ArchiveRefusedError, match="batch_size"):
        archive_failed(db.transport, db.q("error"), str(tmp_path), ArchiveSelection(cutoff=CUTOFF), batch_size=0)
    with pytest.raises(ArchiveLocationError, match="archive id"):
        archive_page(str(tmp_path), "../etc")
    with pytest.raises(ArchiveLocationError, match="no archive"):
        restore_archive(db.transport, str(tmp_path), "20200101T000000Z-abcdef12")
    assert len(stored(db)) == 3 and list_archives(str(tmp_path)) == []
    none = archive_failed(db.transport, db.q("error"), str(tmp_path), ArchiveSelection(cutoff=OLD))
    assert none["status"] == "empty" and none["rows"] == 0 and list_archives(str(tmp_path)) == []


def test_hostile_rows_are_archived_and_restored_byte_for_byte(db: Db, tmp_path: Path) -> None:
    db.transport.create_queues([db.q("orders"), db.q("error")])
    table = db.transport.book.queue(db.q("error"))
    name = db.transport.dialect.qualified(table.address)
    huge = os.urandom(3 * 1024 * 1024)
    marker = "HostileMarker"
    rows: list[tuple[str, Any, Any]] = [
        (str(uuid.uuid4()), json.dumps({h.EXCEPTION_TYPE: marker, h.FAILED_Q: "orders"}), huge),
        (str(uuid.uuid4()), '{"' + marker + '": not JSON', b""),
        (str(uuid.uuid4()), json.dumps({h.TIME_OF_FAILURE: "yesterday", "x": marker}), None),
    ]
    if db.kind == "sqlite":
        rows += [(str(uuid.uuid4()), b"{\"" + marker.encode() + b"\":\"\xff\xfe bad UTF-8\"}", b"blob headers"),
                 (str(uuid.uuid4()), "text-body " + marker, "a text body")]
        for row_id, headers, body in rows:
            db.sql(f"INSERT INTO {name} (id, headers, body) VALUES (?, ?, ?)", (row_id, headers, body))  # noqa: S608  (test setup, quoted name)
        # a TEXT value holding invalid UTF-8 (another program wrote it)
        bad_text = str(uuid.uuid4())
        db.sql(f"INSERT INTO {name} (id, headers, body) VALUES (?, CAST(? AS TEXT), ?)",  # noqa: S608
               (bad_text, b"{\"a\":\"" + marker.encode() + b"\xc3\x28\"}", b"t"))
    else:
        for row_id, headers, body in rows:
            db.sql(f"INSERT INTO {name} (id, headers, body) VALUES (%s, %s, %s)", (row_id, headers, body))  # noqa: S608
    fail(db, 4, when=OLD)
    before = stored(db)
    location = str(tmp_path / "a")
    result = archive_failed(db.transport, db.q("error"), location,
                            ArchiveSelection(where=FailedFilter(search=marker)), batch_size=2)
    hostile = len(before) - 4
    assert result["rows"] == hostile and len(stored(db)) == 4  # none of the well-formed ones
    page = archive_page(location, result["archive_id"], limit=100)
    assert len(page) == hostile and all(isinstance(m["headers_preview"], str) for m in page)
    big = next(m for m in page if m["body_length"] == len(huge))
    assert big["body_binary"] and big["body_truncated"]
    restore_archive(db.transport, location, result["archive_id"])
    after = stored(db)
    # the NULL body comes back as empty bytes (the transport never writes NULL bodies); everything else exactly,
    # text stored as text and blobs as blobs
    assert after == {k: v if v[2] is not None else (v[0], v[1], b"", "blob") for k, v in before.items()}


def test_memory_stays_bounded_on_twenty_thousand_messages(tmp_path: Path) -> None:
    from airflow_sqlqueue.transport import SqlQueueTransport

    transport = SqlQueueTransport.from_url(f"sqlite:///{tmp_path / 'q.db'}", error_queue="error")
    try:
        transport.create_queues(["orders", "error"])
        headers = {h.FAILED_Q: "orders", h.EXCEPTION_TYPE: "Boom", h.TIME_OF_FAILURE: h.format_wire_time(OLD)}
        # a first small archive: the modules pyarrow imports on its first Parquet write (about 27 MB of Python
        # objects, once per process) are not what this test measures
        transport.send("error", OutgoingMessage(body=b"warm-up", headers=headers))
        archive_failed(transport, "error", str(tmp_path / "warm-up"), ArchiveSelection(cutoff=CUTOFF))
        for _ in range(10):
            transport.send_many("error", [OutgoingMessage(body=os.urandom(2_000), headers=headers)
                                          for _i in range(2_000)])
        gc.collect()
        tracemalloc.start()
        try:
            result = archive_failed(transport, "error", str(tmp_path / "archive"), ArchiveSelection(cutoff=CUTOFF),
                                    batch_size=500)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert result["rows"] == 20_000 and transport.count("error") == 0
        # 40 MB of bodies went through; the traced peak is a few batches and the manifest's id lists
        assert peak < 16 * 1024 * 1024, f"traced peak {peak / 1e6:.1f} MB"
    finally:
        transport.close()


def test_an_archive_at_a_uri_location(db: Db, tmp_path: Path) -> None:
    db.transport.create_queues([db.q("orders"), db.q("error")])
    ids = fail(db, 12, when=OLD)
    location = (tmp_path / "by-uri").as_uri()
    result = archive_failed(db.transport, db.q("error"), location, ArchiveSelection(cutoff=CUTOFF + timedelta(0)))
    assert result["rows"] == 12 and [m["id"] for m in archive_page(location, result["archive_id"])] == ids
    assert restore_archive(db.transport, location, result["archive_id"])["restored"] == 12
