"""Retry redirects kept in the database: made, listed and removed with their rules, and honoured by every retry path
(selected retry, one batch, the whole queue, batched retries, edit and retry, the command line), on SQLite and
PostgreSQL. A redirect's destination is a queue that exists, never a header's text."""

from __future__ import annotations

import json

import pytest

from airflow_sqlqueue.transport.errorqueue.batches import BatchPlan
from airflow_sqlqueue.transport.errorqueue.redirects import (
    RedirectExistsError,
    RedirectNotFoundError,
    RedirectRefusedError,
)
from tests.conftest import Db
from tests.reliability.helpers import run_cli
from tests.test_error_queue import failed, failed_with, position, rows


@pytest.fixture
def qs(db: Db) -> Db:
    db.transport.create_queues([db.q(n) for n in ("orders", "orders_v2", "billing", "error")])
    return db


def name(db: Db, queue: str) -> str:
    """The canonical name the page and the redirect table give a queue (default schema filled in)."""
    from airflow_sqlqueue.transport.errorqueue.redirects import canonical_name

    return canonical_name(db.transport.dialect, db.transport.address(db.q(queue)))


def redirects(db: Db) -> object:
    return db.transport.errors(db.q("error")).retry_redirects


def test_a_redirect_is_stored_listed_in_canonical_names_and_removed(qs: Db) -> None:
    store = redirects(qs)
    assert store.list() == []  # no table yet: nothing, and no error
    spelled = qs.transport.wire_address(qs.q("orders"))  # another spelling of the same queue
    made = store.create(spelled, qs.q("orders_v2"), created_by="op")
    assert (made.source, made.target, made.created_by) == (name(qs, "orders"), name(qs, "orders_v2"), "op")
    [listed] = store.list()
    assert (listed.source, listed.target, listed.created_by) == (made.source, made.target, "op")
    assert listed.created_at and listed.created_at[:4].isdigit()
    with pytest.raises(RedirectExistsError, match="already has a redirect"):
        store.create(qs.q("orders"), qs.q("billing"))
    assert store.remove(qs.q("orders")).target == name(qs, "orders_v2")
    assert store.list() == []
    with pytest.raises(RedirectNotFoundError):
        store.remove(qs.q("orders"))


@pytest.mark.parametrize("source, target, match", [
    ("orders", "gone", "does not exist"),
    ("orders", "orders", "to itself"),
    ("error", "orders", "the error queue itself"),
    ("orders", "error", "the error queue itself"),
    ("orders", "", "name the destination"),
])
def test_a_redirect_that_breaks_a_rule_is_refused_and_nothing_is_stored(qs: Db, source: str, target: str,
                                                                        match: str) -> None:
    store = redirects(qs)
    with pytest.raises(RedirectRefusedError, match=match):
        store.create(qs.q(source), qs.q(target) if target else "")
    assert store.list() == []


def test_redirects_do_not_chain(qs: Db) -> None:
    store = redirects(qs)
    store.create(qs.q("orders"), qs.q("orders_v2"))
    with pytest.raises(RedirectRefusedError, match="do not chain"):
        store.create(qs.q("billing"), qs.q("orders"))  # the destination is redirected itself
    with pytest.raises(RedirectRefusedError, match="do not chain"):
        store.create(qs.q("orders_v2"), qs.q("billing"))  # the source is another redirect's destination
    assert [r.source for r in store.list()] == [name(qs, "orders")]


def test_a_redirect_from_a_queue_that_no_longer_exists_is_allowed(qs: Db) -> None:
    made = redirects(qs).create(qs.q("retired_endpoint"), qs.q("orders_v2"))
    assert made.source == name(qs, "retired_endpoint")


@pytest.mark.parametrize("path", ["retry", "retry_batch", "retry_all", "retry_in_batches", "edit_and_retry",
                                  "cli"])
def test_every_retry_path_honours_a_stored_redirect(qs: Db, path: str) -> None:
    native_id = failed(qs, "orders", b"to the new queue")
    redirects(qs).create(qs.q("orders"), qs.q("orders_v2"), created_by="op")
    errors = qs.transport.errors(qs.q("error"), allowed=[qs.q("orders"), qs.q("orders_v2")])
    if path == "retry":
        returned = errors.retry([position(qs, native_id)])
    elif path == "retry_batch":
        returned, _ = errors.retry_batch([position(qs, native_id)])
    elif path == "retry_all":
        returned = errors.retry_all().returned
    elif path == "retry_in_batches":
        returned = errors.retry_in_batches(BatchPlan(batch_size=10)).as_dict()["returned"]
    elif path == "edit_and_retry":
        returned = {errors.edit_and_retry(position(qs, native_id))["queue"]: 1}
    else:
        code, out, err = run_cli(qs, "--json", "retry-errors", "--allow", qs.q("orders"), "--allow",
                                 qs.q("orders_v2"))
        assert code == 0, err
        returned = json.loads(out)["returned"]
    assert returned == {qs.transport.name(qs.q("orders_v2")): 1}
    assert rows(qs, "orders") == [] and rows(qs, "error") == []
    assert [b for _, b in rows(qs, "orders_v2")] == [b"to the new queue"]


def test_a_stored_redirect_to_a_queue_the_retry_may_not_write_to_leaves_the_message_with_the_reason(qs: Db) -> None:
    native_id = failed(qs, "orders", b"stays")
    redirects(qs).create(qs.q("orders"), qs.q("billing"))
    summary = qs.transport.errors(qs.q("error"), allowed=[qs.q("orders")]).retry_all()
    assert summary.returned == {}
    assert "redirected to" in summary.left[0]["reason"] and "not one of the queues" in summary.left[0]["reason"]
    assert [i for i, _ in rows(qs, "error")] == [native_id]


def test_a_header_naming_a_queue_is_never_a_destination_a_redirect_decides(qs: Db) -> None:
    """A FailedQ header in another spelling of the redirected queue follows the redirect; the header's own text
    never picks the destination."""
    failed_with(qs, qs.transport.wire_address(qs.q("orders")), b"hostile spelling")
    redirects(qs).create(qs.q("orders"), qs.q("orders_v2"))
    summary = qs.transport.errors(qs.q("error"), allowed=[qs.q("orders_v2")]).retry_all()
    assert summary.returned == {qs.transport.name(qs.q("orders_v2")): 1}


def test_a_run_redirect_comes_before_a_stored_one(qs: Db) -> None:
    failed(qs, "orders", b"run decides")
    redirects(qs).create(qs.q("orders"), qs.q("orders_v2"))
    errors = qs.transport.errors(qs.q("error"), allowed=[qs.q("orders_v2"), qs.q("billing")],
                                 redirects={qs.q("orders"): qs.q("billing")})
    assert errors.retry_all().returned == {qs.transport.name(qs.q("billing")): 1}


def test_a_redirect_removed_is_no_longer_followed(qs: Db) -> None:
    failed(qs, "orders", b"back home")
    store = redirects(qs)
    store.create(qs.q("orders"), qs.q("orders_v2"))
    store.remove(qs.q("orders"))
    assert qs.transport.errors(qs.q("error"), allowed=[qs.q("orders"), qs.q("orders_v2")]).retry_all().returned == {
        qs.transport.name(qs.q("orders")): 1}
