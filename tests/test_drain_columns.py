"""The Parquet drain's receive as columns (``transport.drain(..., columns=True)``, issue 33) writes the same file
as the receive of ``ReceivedMessage`` objects, and settles the same rows the same way, on a batch mixing plain,
expired, poison, forwarded-to-itself, binary and oddly written rows."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from airflow_sqlqueue.operators.parquet import ParquetBatchWriter
from airflow_sqlqueue.transport import OutgoingMessage, ReceivedColumns
from airflow_sqlqueue.transport.wire.headers import FORWARD_DESTINATION, RAW_HEADERS, serialize_headers
from tests.conftest import Db

BINARY = bytes(range(256))


def _table(db: Db, name: str) -> str:
    return db.transport.dialect.qualified(db.transport.address(db.q(name)))


def _insert(db: Db, name: str, native_id: str, headers: Any, body: Any, expires: str | None = None) -> None:
    """A row written by another program (plain INSERT)."""
    p = "%s" if db.kind == "postgres" else "?"
    db.sql(f"INSERT INTO {_table(db, name)} (id, expires, headers, body) VALUES ({p}, {p}, {p}, {p})",  # noqa: S608
           (native_id, expires, headers, body))


def _fill(db: Db, name: str, ids: list[str]) -> None:
    """The mixed batch, the same rows (and Ids) in every queue it fills."""
    t, q = db.transport, db.q(name)
    rows: list[tuple[Any, Any]] = [
        (serialize_headers({"k": "v", "Text": "caf\u00e9 \U0001f600 /x"}), b"plain"),
        (serialize_headers({"ContentType": "application/octet-stream"}), BINARY),
        ('{"k":"v"}', b"raw"),
        ("not json", b"poison: text"),
        ("null", b"poison: null"),
        ("[1, 2]", b"poison: array"),
        ('{"n": 1}', b"poison: a number"),
        ("   ", b"poison: whitespace"),
        ('{"lone":"\\ud800","esc":"\\u00e9\\/"}', b"lone surrogate escape"),
        (' { "spaced" : "v" } ', b"whitespace around"),
        ('{"a":"1"} trailing', b"poison: text after the object"),
        ("", b"empty headers"),
        (serialize_headers({FORWARD_DESTINATION: t.name(q)}), b"forwarded to itself"),
        ('{"k":"v"}', b""),
    ]
    for native_id, (headers, body) in zip(ids, rows, strict=True):
        _insert(db, name, native_id, headers, body)
    _insert(db, name, str(uuid.UUID(int=1)), '{"k":"v"}', b"expired", expires="2000-01-01 00:00:00")
    _insert(db, name, str(uuid.UUID(int=2)), "not json", b"poison: expired", expires="2000-01-01 00:00:00")


def _drain(db: Db, name: str, out: Path, columns: bool) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    writer = ParquetBatchWriter(out)
    seen: list[Any] = []

    def sink(batch: Any) -> int:
        seen.append(batch)
        writer.write(batch, f"{name}.parquet")
        return len(batch)

    summary = db.transport.drain(db.q(name), sink, batch_size=100, columns=columns).as_dict()
    assert len(seen) == 1 and isinstance(seen[0], ReceivedColumns) is columns
    summary.pop("seconds")
    return summary, pq.read_table(out / f"{name}.parquet").to_pydict()


def test_columns_write_the_same_file_and_settle_the_same_rows(db: Db, tmp_path: Path) -> None:
    t = db.transport
    t.create_queues([db.q("by_message"), db.q("by_column"), db.q("error")])
    ids = [str(uuid.uuid4()) for _ in range(14)]
    if db.kind == "sqlite":  # loose types: an Id that is no UUID, one in upper case
        ids[0], ids[1] = "order-17", ids[1].upper()
    _fill(db, "by_message", ids)
    _fill(db, "by_column", ids)

    summary_m, file_m = _drain(db, "by_message", tmp_path / "m", columns=False)
    summary_c, file_c = _drain(db, "by_column", tmp_path / "c", columns=True)

    assert summary_c == summary_m
    assert summary_m["expired"] == 1 and summary_m["poison"] == 7  # an expired poison row is dead-lettered
    assert file_c["queue"] == [t.name(db.q("by_column"))] * len(file_c["id"])
    assert file_m["queue"] == [t.name(db.q("by_message"))] * len(file_m["id"])
    for column in ("id", "seq", "headers", "body"):
        assert file_c[column] == file_m[column], column
    assert BINARY in file_c["body"] and b"forwarded to itself" in file_c["body"]
    assert not any(body.startswith(b"poison") or body == b"expired" for body in file_c["body"])
    errors = t.receive(db.q("error"), 100)
    failed = {queue: sorted((m.body, m.headers.get(RAW_HEADERS)) for m in errors
                            if queue in (m.headers.get("NServiceBus.FailedQ") or ""))
              for queue in ("by_message", "by_column")}
    assert len(failed["by_column"]) == 7 and failed["by_column"] == failed["by_message"]
    assert t.count(db.q("by_message")) == 0 and t.count(db.q("by_column")) == 0


def test_columns_claim_still_shows_its_messages(db: Db) -> None:
    """A claim opened with ``columns=True`` makes its ``messages`` from the columns when asked for."""
    from airflow_sqlqueue.transport import Claim

    t, q = db.transport, db.q("orders")
    t.create_queues([q, db.q("error")])
    t.send_many(q, [OutgoingMessage(b"a", {"k": "1"}), OutgoingMessage(BINARY, {"k": "2"})])
    with Claim(t.session, t.book.queue(q), take=True, columns=True).open(10) as claim:
        assert claim.batch is not None and len(claim.batch) == 2
        assert [(m.body, m.headers["k"]) for m in claim.messages] == [(b"a", "1"), (BINARY, "2")]
    assert t.count(q) == 0
