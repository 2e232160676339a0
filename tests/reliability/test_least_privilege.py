"""Least privilege on PostgreSQL: a role with only the rights to run (no DDL) sends, receives, peeks and
processes; creating queues and repairing indexes say clearly that more rights are needed, and change nothing.

PostgreSQL needs UPDATE besides SELECT/INSERT/DELETE for the row locks of FOR UPDATE SKIP LOCKED (documented;
the refusal without UPDATE is tested in tests/test_operations.py::test_postgres_least_privilege).
"""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit

import pytest

from airflow_sqlqueue.transport import PermissionDeniedError, SqlQueueTransport

from .helpers import catalog, count


@pytest.fixture
def limited(queues):
    if queues.kind != "postgres":
        pytest.skip("database roles: PostgreSQL")
    role = "sqlqueue_rel_" + uuid.uuid4().hex[:10]
    schema = f'"{queues.schema}"'
    queues.sql(f'CREATE ROLE "{role}" LOGIN')
    try:
        queues.sql(f'GRANT USAGE ON SCHEMA {schema} TO "{role}"')
        queues.sql(f'GRANT SELECT, INSERT, DELETE, UPDATE ON ALL TABLES IN SCHEMA {schema} TO "{role}"')
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
    t.send_many(q, [b"1", b"2", b"3"])
    assert t.peek(q) == 3
    assert [m.body for m in t.receive(q)] == [b"1"]
    assert t.process(q, lambda m, c: c.send(db.q("replies"), m.body)).succeeded == 2
    assert count(db, "replies") == 2 and count(db, "orders") == 0
    assert t.purge_expired(q) == 0 and t.check(q) == []


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
    print(f"\n[reliability] repair refusal: {text}")
    assert "repair" in text and "lacks a right" in text and "owner" in text, text
    assert catalog(db) == before
