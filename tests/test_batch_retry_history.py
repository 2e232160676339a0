"""A batched retry records each message it returned (one INSERT ... SELECT per batch, in the transaction of the
batch's progress row), so the message's history lists it: on real SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_sqlqueue.maintenance import retry_progress
from airflow_sqlqueue.transport import OutgoingMessage
from airflow_sqlqueue.transport.errorqueue.batches import BatchPlan, BatchRecord
from airflow_sqlqueue.transport.wire import headers as h
from tests.conftest import Db


def test_each_message_a_batch_returned_is_in_its_history_and_one_statement_per_batch(
        db: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    db.transport.create_queues([db.q("orders"), db.q("error")])
    orders = db.transport.name(db.q("orders"))
    ids = [str(i) for i in db.transport.send_many(db.q("error"), [OutgoingMessage(body=b"{}", headers={
        h.FAILED_Q: orders if i != 7 else "nowhere", h.EXCEPTION_TYPE: "Boom"}) for i in range(45)])]
    statements: list[str] = []
    real = retry_progress.ProgressTable.execute

    def counted(self: Any, cursor: Any, name: str, params: dict[str, Any] | None = None) -> Any:
        statements.append(name)
        return real(self, cursor, name, params)

    monkeypatch.setattr(retry_progress.ProgressTable, "execute", counted)

    def on_batch(record: BatchRecord) -> None:
        retry_progress.record(db.transport, "run-1", "conn", "error", "batch", batch=record.batch,
                              looked_at=record.looked_at, returned=record.returned, left=record.left,
                              user_name="alice", message_ids=record.returned_ids)

    errors = db.transport.errors(db.q("error"), allowed=[db.q("orders")])
    summary = errors.retry_in_batches(BatchPlan(batch_size=20), on_batch=on_batch)
    assert summary.total_returned == 44 and len(summary.batches) == 3
    assert statements.count("insert_retry_messages") == 3  # one per batch, never one per message
    assert statements.count("insert_retry_progress") == 3
    for n, message_id in enumerate(ids):
        found = retry_progress.message_retries(db.transport, "conn", message_id.upper())
        if n == 7:  # its FailedQ is not a queue a retry may write to: it stayed, no history
            assert found == []
            continue
        assert [(f["run_id"], f["batch"], f["by"]) for f in found] == [("run-1", 1 + n // 20, "alice")]
    assert retry_progress.message_retries(db.transport, "other-conn", ids[0]) == []
    assert "returned_ids" not in summary.as_dict()["batches"][0]  # the XCom stays small


def test_a_store_without_the_table_has_no_batched_history(db: Db) -> None:
    assert retry_progress.message_retries(db.transport, "conn", "3f2504e0-4f89-11d3-9a0c-0305e82c3301") == []
