"""Shared helpers of the reliability suite: sizes, counting rows by body, catalog snapshots, summaries.

Every message of the suite carries a unique body (``m-000042``), so a test can count where each one ended:
still in the queue, processed (handler or durable store), or in the error queue. ``lost`` is always
``sent - (queue | processed | error)`` and must be 0.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from airflow_sqlqueue.transport import OutgoingMessage

#: Messages per competing-consumer run (the issue's size is 20,000; smaller runs: set the variable).
MESSAGES = int(os.environ.get("SQLQUEUE_RELIABILITY_MESSAGES", "20000"))
#: Seed of every random choice (failure decisions, kill delays); printed in each summary line.
SEED = int(os.environ.get("SQLQUEUE_RELIABILITY_SEED", "7"))
PYTHON = sys.executable
HERE = Path(__file__).resolve().parent
#: When set, every summary line is also appended to this file as JSON (for the CI report).
REPORT = os.environ.get("SQLQUEUE_RELIABILITY_REPORT")


def table(db, name: str) -> str:
    """The quoted table of a queue of this test (for raw SQL in assertions)."""
    return db.transport.dialect.qualified(db.transport.address(db.q(name)))


def ph(db) -> str:
    return "%s" if db.kind == "postgres" else "?"


def count(db, name: str) -> int:
    return db.sql(f"SELECT count(*) FROM {table(db, name)}")[0][0]  # noqa: S608


def bodies(db, name: str) -> list[bytes | None]:
    """Bodies of a queue in FIFO order."""
    return [None if b is None else bytes(b) for (b,) in db.sql(f"SELECT body FROM {table(db, name)} ORDER BY seq")]  # noqa: S608


def body_of(i: int) -> bytes:
    return f"m-{i:06d}".encode()


def fill(db, queue: str, n: int, chunk: int = 1000) -> set[bytes]:
    """Send ``n`` messages with unique bodies (batched inserts); return the bodies."""
    sent = [body_of(i) for i in range(n)]
    for start in range(0, n, chunk):
        db.transport.send_many(queue, [OutgoingMessage(b, {"NServiceBus.EnclosedMessageTypes": "Reliability.Test"})
                                       for b in sent[start:start + chunk]])
    return set(sent)


def insert_raw(db, name: str, headers: str | None, body: bytes | None) -> uuid.UUID:
    """Insert a row as a foreign (or broken) sender would: raw headers text, bound as a value."""
    row_id = uuid.uuid4()
    p = ph(db)
    db.sql(f"INSERT INTO {table(db, name)} (id, expires, headers, body) VALUES ({p}, NULL, {p}, {p})",  # noqa: S608
           (str(row_id), headers, body))
    return row_id


def error_rows(db) -> list[tuple[uuid.UUID, str, bytes | None]]:
    """(id, headers, body) of the error queue in FIFO order."""
    found = db.sql(f"SELECT id, headers, body FROM {table(db, 'error')} ORDER BY seq")  # noqa: S608
    return [(uuid.UUID(str(i)), hd, None if b is None else bytes(b)) for i, hd, b in found]


def duplicates(items: Iterable[bytes]) -> dict[bytes, int]:
    return {body: n for body, n in Counter(items).items() if n > 1}


def lost(sent: set[bytes], *places: Iterable[bytes | None]) -> set[bytes]:
    """Sent messages found in none of ``places``."""
    seen: set[bytes | None] = set()
    for place in places:
        seen.update(place)
    return sent - seen


#: The summaries of this session, printed as a table at the end by conftest.py.
RESULTS: list[dict[str, Any]] = []


def summary(test: str, kind: str, *, messages: int, faults: int, lost: int, **extra: Any) -> None:
    """Record the figures of one test: printed in pytest's terminal summary (conftest.py), as a line with
    ``pytest -s``, and appended to SQLQUEUE_RELIABILITY_REPORT if set."""
    fields = {"test": test, "db": kind, "messages": messages, "faults": faults, "lost": lost, **extra,
              "seed": SEED}
    RESULTS.append(fields)
    print("\n[reliability] " + " ".join(f"{k}={v}" for k, v in fields.items()), flush=True)
    if REPORT:
        with open(REPORT, "a", encoding="utf-8") as out:
            out.write(json.dumps(fields) + "\n")


# -- catalog snapshots (bad input must change nothing) --------------------------------------------
PUBLIC_WATCH = r"^(bad|br|dq|semi|dash|at|robert|ord|missing|new_queue|no_schema|xxxxx|error|orders|replies)"


def catalog(db) -> dict[str, Any]:
    """Everything a bad input could have changed: relations of the test schema (or sqlite_master), schemas
    with test-like names, and the rows of every queue table."""
    if db.kind == "sqlite":
        conn = sqlite3.connect(db.url[len("sqlite:///"):])
        try:
            objects = sorted(conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall(),
                             key=repr)
            contents = {}
            for kind, name, *_ in objects:
                if kind == "table" and not name.startswith("sqlite_"):
                    quoted = '"' + name.replace('"', '""') + '"'
                    contents[name] = sorted(conn.execute(f"SELECT * FROM {quoted}").fetchall(), key=repr)  # noqa: S608
            return {"objects": objects, "rows": contents}
        finally:
            conn.close()
    objects = db.sql("SELECT c.relname, c.relkind, c.relnatts FROM pg_class c JOIN pg_namespace n "
                     "ON n.oid = c.relnamespace WHERE n.nspname = %s ORDER BY c.relname", (db.schema,))
    # schemas and relations in public that a name escaping its quotes could have made (the names of the bad-input
    # tests and their first words); other engineers create objects at the same time, and never with these names
    schemas = db.sql("SELECT nspname FROM pg_namespace WHERE nspname ~* %s OR nspname IN ('a', 'b', 'unclosed') "
                     "ORDER BY nspname", (PUBLIC_WATCH,))
    public = db.sql("SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = 'public' AND c.relname ~* %s ORDER BY 1", (PUBLIC_WATCH,))
    contents = {}
    for name, kind, _ in objects:
        if kind == "r":
            quoted = '"' + db.schema + '"."' + name.replace('"', '""') + '"'
            contents[name] = sorted(db.sql(f"SELECT t::text FROM {quoted} AS t"))  # noqa: S608
    return {"objects": objects, "schemas": schemas, "public": public, "rows": contents}


# -- PostgreSQL backends of one test ---------------------------------------------------------------
def with_application_name(url: str, name: str) -> str:
    return url + ("&" if "?" in url else "?") + f"application_name={name}"


def backends(db, application_name: str) -> list[int]:
    return [pid for (pid,) in db.sql("SELECT pid FROM pg_stat_activity WHERE application_name = %s",
                                     (application_name,))]


def terminate(db, application_name: str) -> int:
    """pg_terminate_backend on every backend of this test's application_name (never anyone else's)."""
    rows = db.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s "
                  "AND pid <> pg_backend_pid()", (application_name,))
    return sum(1 for (ok,) in rows if ok)


def wait_gone(db, application_name: str, timeout: float = 30.0) -> None:
    """Wait until no backend of ``application_name`` is left (a killed client's transaction is rolled back)."""
    deadline = time.monotonic() + timeout
    while backends(db, application_name):
        if time.monotonic() > deadline:
            raise AssertionError(f"backends of {application_name} still alive after {timeout} s")
        time.sleep(0.05)


def run_cli(db, *args: str) -> tuple[int, str, str]:
    """Run ``sqlqueue`` in this process on ``db`` with its error queue; return (exit code, stdout as the UTF-8 it
    wrote, stderr text)."""
    import io
    from contextlib import redirect_stderr

    from airflow_sqlqueue.cli.main import main

    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    err = io.StringIO()
    saved, sys.stdout = sys.stdout, out
    try:
        with redirect_stderr(err):
            code = main(["--url", db.url, "--error-queue", db.q("error"), *args])
    finally:
        sys.stdout = saved
    return code, out.buffer.getvalue().decode("utf-8"), err.getvalue()
