"""Hostile rows: what other programs (or attackers with INSERT on a queue table) can write, and where each must end.

Each row is written straight into the table between two good messages and is known by its position (seq), so a
test can tell where every row went whatever the receive path did to its columns: ``deliver`` (handed over exactly
once), ``error`` (moved to the error queue intact, failure headers added) or ``drop`` (expired).
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from dataclasses import dataclass
from typing import Any

from airflow_sqlqueue.transport import OutgoingMessage
from airflow_sqlqueue.transport.wire import headers as h
from airflow_sqlqueue.transport.wire.failures import failure_headers
from airflow_sqlqueue.transport.wire.messages import as_body, as_text

from .helpers import table

FORWARD = h.FORWARD_DESTINATION
#: Failure headers every error-queue row gets (so ServicePulse can show it).
FAILURE_NAMES = {h.FAILED_Q, h.TIME_OF_FAILURE, h.EXCEPTION_TYPE, h.EXCEPTION_MESSAGE, h.EXCEPTION_STACK_TRACE}
#: Characters a terminal acts on (never printed raw by the CLI).
TERMINAL_ATTACK = "\x1b]0;owned\x07\x1b[2J\u202etxt.exe\u2066\x9b31m"


@dataclass
class Hostile:
    """One row as another program writes it. ``id``/``expires`` None: a fresh UUID / no expiry."""

    name: str
    headers: Any
    body: Any
    outcome: str  # deliver | error | drop
    id: Any = None
    expires: Any = None
    sqlite_only: bool = False
    seq: int | None = None  # explicit position (SQLite)
    raw_sql_headers: str | None = None  # an SQL expression for the headers column (SQLite: text that is no UTF-8)


def rows(db, missing_queue: str) -> list[Hostile]:
    """The hostile rows for this database (``missing_queue``: a queue the transport may forward to, never made)."""
    deep = "[" * 1000  # about 1 KB: more nesting than the JSON parser's recursion allows
    found = [
        Hostile("deep-array", deep, b"deep-array", "error"),
        Hostile("deep-object", '{"a":' * 600 + '"x"' + "}" * 600, b"deep-object", "error"),
        Hostile("deep-in-value", '{"a":' + "[" * 5000 + "]" * 5000 + "}", b"deep-in-value", "error"),
        Hostile("lone-surrogate-value", '{"x":"\\ud800","y":"\\udfff\\ud800"}', b"surrogate", "deliver"),
        Hostile("lone-surrogate-name", '{"\\udc00":"v"}', b"surrogate-name", "deliver"),
        Hostile("nul-escape", '{"x":"a\\u0000b"}', b"nul\x00body", "deliver"),
        Hostile("terminal", json.dumps({"NServiceBus.EnclosedMessageTypes": TERMINAL_ATTACK, "k": TERMINAL_ATTACK}),
                TERMINAL_ATTACK.encode(), "deliver"),
        Hostile("forward-missing", json.dumps({FORWARD: missing_queue}), b"forward-missing", "error"),
        Hostile("forward-elsewhere", json.dumps({FORWARD: db.q("not_allowed")}), b"forward-elsewhere", "error"),
        Hostile("forward-garbage", json.dumps({FORWARD: '"unbalanced'}), b"forward-garbage", "error"),
        Hostile("forward-number", '{"' + FORWARD + '":5}', b"forward-number", "error"),
        Hostile("json-null", "null", b"json-null", "error"),
        Hostile("whitespace-headers", " \n\t ", b"whitespace-headers", "error"),
        Hostile("huge-number", '{"a":1e999}', b"huge-number", "error"),
        Hostile("long-int", '{"a":' + "9" * 5000 + "}", b"long-int", "error"),
        Hostile("duplicate-names", '{"a":"1","a":"2"}', b"duplicate-names", "deliver"),
        Hostile("null-body", "{}", None, "deliver"),
        Hostile("invalid-utf8-body", "{}", b"\xff\xfe\x00", "deliver"),
    ]
    if db.kind == "sqlite":
        found += [
            Hostile("id-not-uuid", "{}", b"id-not-uuid", "deliver", id="not-a-uuid"),
            Hostile("id-integer", "{}", b"id-integer", "deliver", id=12345),
            Hostile("id-blob", "{}", b"id-blob", "deliver", id=b"\x00\xff\x10"),
            Hostile("id-text", "{}", b"id-text", "deliver", id="same-id"),  # ids are UNIQUE on SQLite since 0.2
            Hostile("body-text", "{}", "text body \u2603", "deliver"),
            Hostile("body-integer", "{}", 10**12, "deliver"),  # never 10**12 zero bytes
            Hostile("body-float", "{}", 1.5, "deliver"),
            Hostile("headers-blob", b'{"a":"b"}', b"headers-blob", "deliver"),
            Hostile("headers-blob-not-utf8", b"\xff\xfe", b"headers-blob-not-utf8", "error"),
            Hostile("headers-integer", 42, b"headers-integer", "error"),
            Hostile("headers-text-not-utf8", None, b"headers-text-not-utf8", "deliver",
                    raw_sql_headers="CAST(x'7b2261223a22ff227d' AS TEXT)"),  # {"a":"<0xff>"}
            Hostile("expires-iso-future", "{}", b"expires-iso-future", "deliver", expires="2999-01-01T00:00:00Z"),
            Hostile("expires-offset-future", "{}", b"expires-offset", "deliver", expires="2999-01-01 00:00:00+02:00"),
            Hostile("expires-us-format", "{}", b"expires-us-format", "deliver", expires="01/01/2999"),
            Hostile("expires-garbage", "{}", b"expires-garbage", "deliver", expires="tomorrow, maybe"),
            Hostile("expires-integer", "{}", b"expires-integer", "deliver", expires=4102444800),
            Hostile("expires-iso-past", "{}", b"expires-iso-past", "drop", expires="2001-01-01T00:00:00Z"),
            Hostile("seq-negative", '{"a":"b"}', b"seq-negative", "deliver", seq=-5),
        ]
    return found


def insert(db, name: str, row: Hostile) -> int:
    """Write one hostile row into the queue ``name`` of this test as another program would; return its seq."""
    row_id = str(uuid.uuid4()) if row.id is None else row.id
    tbl = table(db, name)
    if db.kind == "sqlite":
        conn = sqlite3.connect(db.url[len("sqlite:///"):])
        try:
            headers_sql = row.raw_sql_headers or "?"
            params = [row_id, row.expires] + ([] if row.raw_sql_headers else [row.headers]) + [row.body]
            if row.seq is not None:
                cur = conn.execute(f"INSERT INTO {tbl} (id, expires, headers, body, seq) "  # noqa: S608
                                   f"VALUES (?, ?, {headers_sql}, ?, ?)", [*params, row.seq])
            else:
                cur = conn.execute(f"INSERT INTO {tbl} (id, expires, headers, body) "  # noqa: S608
                                   f"VALUES (?, ?, {headers_sql}, ?)", params)
            conn.commit()
            return row.seq if row.seq is not None else cur.lastrowid
        finally:
            conn.close()
    [(seq,)] = db.sql(f"INSERT INTO {tbl} (id, expires, headers, body) VALUES (%s, %s, %s, %s) RETURNING seq",  # noqa: S608
                      (row_id, row.expires, row.headers, row.body))
    return seq


@dataclass
class Filled:
    """A queue filled with good messages around every hostile row."""

    good: dict[int, bytes]  # seq -> body
    hostile: dict[int, Hostile]  # seq -> row

    def expected(self, outcome: str) -> set[int]:
        return {seq for seq, row in self.hostile.items() if row.outcome == outcome}

    @property
    def delivered(self) -> set[int]:
        """Every position that must be handed over exactly once."""
        return set(self.good) | self.expected("deliver")

    def stored_body(self, seq: int) -> bytes:
        """The body an error-queue copy of this row must hold (NULL written as empty bytes)."""
        body = as_body(self.hostile[seq].body) if seq in self.hostile else self.good[seq]
        return b"" if body is None else body


def fill(db, name: str, missing_queue: str, *, good_around: int = 2) -> Filled:
    """``good_around`` good messages before and after each hostile row, in the queue ``name`` of this test."""
    queue = db.q(name)
    t = db.transport
    good: dict[int, bytes] = {}
    hostile: dict[int, Hostile] = {}

    def send_good(tag: str) -> None:
        bodies = [f"good-{tag}-{i}".encode() for i in range(good_around)]
        t.send_many(queue, [OutgoingMessage(b, {h.ENCLOSED_MESSAGE_TYPES: "Good"}) for b in bodies])
        for seq, body in db.sql(f"SELECT seq, body FROM {table(db, name)} ORDER BY seq DESC "  # noqa: S608
                                f"LIMIT {good_around}"):
            good[seq] = bytes(body)

    for row in rows(db, missing_queue):
        send_good(row.name + "-before")
        hostile[insert(db, name, row)] = row
    send_good("last")
    return Filled(good, hostile)


def error_rows(db) -> list[tuple[Any, str, bytes]]:
    """(id as stored, headers text, body) of the error queue."""
    conn_rows = db.sql(f"SELECT id, headers, body FROM {table(db, 'error')} ORDER BY seq")  # noqa: S608
    return [(i, as_text(hd), as_body(b)) for i, hd, b in conn_rows]


def check_error_queue(db, filled: Filled, moved: set[int], source: str) -> None:
    """The error queue holds exactly the rows ``moved``, each intact (id, body; raw headers kept when they could
    not be read, else the original headers) with the failure headers naming ``source``."""
    found = error_rows(db)
    by_body: dict[bytes, list] = {}
    for row in found:
        by_body.setdefault(row[2], []).append(row)
    assert len(found) == len(moved), (len(found), sorted(filled.hostile[s].name for s in moved if s in filled.hostile))
    for seq in moved:
        [(error_id, text, _)] = by_body[filled.stored_body(seq)]
        parsed = h.parse_headers(text)
        assert FAILURE_NAMES <= set(parsed), (seq, parsed.keys())
        assert parsed[h.FAILED_Q] == source
        if seq in filled.hostile:
            row = filled.hostile[seq]
            if row.id is not None and db.kind == "sqlite":
                assert as_text(error_id) == as_text(row.id), (row.name, error_id)  # the loose id as it was
            if h.RAW_HEADERS in parsed:
                assert parsed[h.RAW_HEADERS] == as_text(row.headers), row.name
            elif row.raw_sql_headers is None:
                original = h.parse_headers(as_text(row.headers))
                original.pop(FORWARD, None)
                # the error row adds the failure headers, and the native Id as MessageId when the row had none
                added = set(failure_headers("q", Exception())) | ({h.MESSAGE_ID} - set(original))
                assert {k: v for k, v in parsed.items() if k not in added} == original, row.name
