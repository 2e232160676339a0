"""Least privilege on PostgreSQL: a role with only the rights to run (no DDL) sends, receives, peeks and
processes; creating queues and repairing indexes say clearly that more rights are needed, and change nothing.

The role gets SELECT, INSERT and DELETE on the queue tables, plus what PostgreSQL strictly needs:
- UPDATE on one column (``seq``; ``id`` on a delayed store): ``FOR UPDATE SKIP LOCKED`` (receive, peek, purge)
  requires the UPDATE right on at least one column of the table; the role cannot change a message's headers or
  body with it;
- USAGE on the schema, and on the ``seq`` sequences (``serial``: an INSERT calls ``nextval``).
Without UPDATE at all, receiving is refused with an error naming it: tests/test_operations.py::
test_postgres_least_privilege. Roles are cluster-wide: each test makes a uniquely named one and drops it.
"""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit

import pytest

from airflow_sqlqueue.transport import OutgoingMessage, PermissionDeniedError, SqlQueueTransport

from .helpers import catalog, count, insert_raw, summary


@pytest.fixture
def limited(queues):
    if queues.kind != "postgres":
        pytest.skip("database roles: PostgreSQL")
    role = "sqlqueue_rel_" + uuid.uuid4().hex[:10]
    schema = f'"{queues.schema}"'
    queues.sql(f'CREATE ROLE "{role}" LOGIN')
    try:
        queues.sql(f'GRANT USAGE ON SCHEMA {schema} TO "{role}"')
        queues.sql(f'GRANT SELECT, INSERT, DELETE ON ALL TABLES IN SCHEMA {schema} TO "{role}"')
        for (table,) in queues.sql("SELECT tablename FROM pg_tables WHERE schemaname = %s", (queues.schema,)):
            column = "id" if table.endswith(".Delayed") else "seq"  # a delayed store has no seq: lock by id
            queues.sql(f'GRANT UPDATE ({column}) ON {schema}."{table.replace(chr(34), chr(34) * 2)}" TO "{role}"')
        queues.sql(f'GRANT USAGE ON ALL SEQUENCES IN SCHEMA {schema} TO "{role}"')
        parts = urlsplit(queues.url)
        url = f"postgresql://{role}@{parts.hostname}:{parts.port or 5432}{parts.path}"
        with SqlQueueTransport.from_url(url, error_queue=queues.q("error")) as transport:
            yield queues, transport
    finally:
        queues.sql(f'DROP OWNED BY "{role}"')
        queues.sql(f'DROP ROLE "{role}"')


def test_running_rights_send_receive_peek_process(limited):
    db, t = limited
    q = db.q("orders")
    t.send_many(q, [b"1", b"2", b"3", b"fails", b"5", b"6"])
    t.send(q, OutgoingMessage(b"later", delay=0.001), endpoint=q)  # into the endpoint's .Delayed table
    insert_raw(db, "orders", "not json", b"poison")
    assert t.peek(q) == 7 and t.exists(q) and len(t.browse(q)) == 7
    assert [m.body for m in t.receive(q)] == [b"1"]
    with t.receiving(q, 1) as batch:
        assert [m.body for m in batch.messages] == [b"2"]

    def handler(message, context):
        if message.body == b"fails":
            raise ValueError("refused")
        context.send(db.q("replies"), message.body)

    result = t.process(q, handler, immediate_retries=0)  # a failure and a poison row: moved to the error queue
    assert (result.succeeded, result.failed, result.poison) == (3, 1, 1)
    assert count(db, "replies") == 3 and count(db, "error") == 2
    assert t.retry_errors(select=lambda row: row.body == b"fails", allowed=[q]).total_returned == 1
    assert t.drain(q, len).delivered == 1
    assert t.move_due_delayed(q) == 1 and [m.body for m in t.receive(q)] == [b"later"]
    assert t.purge_expired(q) == 0 and t.check(q) == []
    summary("least_privilege_running", db.kind, messages=8, faults=2, lost=count(db, "orders"),
            rights="SELECT,INSERT,DELETE,UPDATE(seq),USAGE")


def test_creating_a_queue_needs_create_and_says_so(limited):
    db, t = limited
    before = catalog(db)
    with pytest.raises(PermissionDeniedError) as info:
        t.create_queue(db.q("new_queue"), delayed=True)
    text = str(info.value)
    assert "CREATE" in text and db.schema in text and "new_queue" in text
    assert catalog(db) == before


def test_repairing_an_index_needs_more_rights_and_says_so(limited):
    db, t = limited
    db.sql(f'DROP INDEX "{db.schema}"."{t.dialect.index_name(t.address(db.q("orders")), "expires")}"')
    before = catalog(db)
    codes = [f.code for f in t.check(db.q("orders"))]
    assert "missing_expires_index" in codes  # reading the catalog works with running rights
    with pytest.raises(PermissionDeniedError) as info:
        t.check(db.q("orders"), repair=True)
    text = str(info.value)
    assert "repair" in text and "lacks a right" in text and "owner" in text, text
    assert catalog(db) == before
