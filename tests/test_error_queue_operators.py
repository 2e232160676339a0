"""The error queue's rules through the operators (the same ErrorQueue underneath): a required allow-list, a
collision that leaves the failed row, a FailedQ outside the list that stays with its reason."""

from __future__ import annotations  # noqa: I001  (tests.airflow_env must be imported before airflow)

import tests.airflow_env as airflow_env

from pathlib import Path

import pytest

from airflow_sqlqueue.transport import OutgoingMessage, SqlQueueTransport
from airflow_sqlqueue.transport.wire import headers as h


@pytest.fixture
def queues(tmp_path: Path):
    path = tmp_path / "queues.db"
    conn = airflow_env.sqlite_connection("sqlqueue_eq_ops", path)
    with SqlQueueTransport.from_url(f"sqlite:///{path}") as transport:
        transport.create_queues(["orders", "payroll", "error"])
        yield conn, transport


def rows(transport: SqlQueueTransport, queue: str) -> list[tuple[str, bytes]]:
    return sorted((str(r.id), r.body) for r in transport.browse(queue))


@pytest.mark.parametrize("operator", ["SqlQueueRetryErrorsOperator", "SqlQueueBatchRetryOperator"])
def test_an_operator_without_allowed_queues_is_refused_when_the_dag_is_parsed(operator: str) -> None:
    import airflow_sqlqueue.operators as operators

    with pytest.raises(ValueError, match="allowed_queues: name the queues a retry may write to"):
        getattr(operators, operator)(task_id="retry", sqlqueue_conn_id="x")


@pytest.mark.parametrize("operator", ["SqlQueueRetryErrorsOperator", "SqlQueueBatchRetryOperator"])
def test_operators_leave_collisions_and_foreign_targets_in_the_error_queue(queues, operator: str) -> None:
    import airflow_sqlqueue.operators as operators

    conn, t = queues
    collided = t.send("orders", OutgoingMessage(b"failed", {}))
    t.process("orders", lambda m, c: 1 / 0, immediate_retries=0)
    t.run(lambda cur: t.book.queue("orders").put(cur, collided, "{}", b"waiting"))  # the same Id arrives again
    foreign = t.send_many("error", [OutgoingMessage(b"p", {h.FAILED_Q: "payroll"}),
                                    OutgoingMessage(b"e", {h.FAILED_Q: "error"})])
    good = t.send("error", OutgoingMessage(b"good", {h.FAILED_Q: "orders"}))
    before = {q: rows(t, q) for q in ("orders", "payroll", "error")}
    result = getattr(operators, operator)(task_id="retry", sqlqueue_conn_id=conn,
                                          allowed_queues=["orders"]).execute({})
    assert result["returned"] == {"orders": 1} and result["total_returned"] == 1
    left = {x["id"]: x["reason"] for x in result["left"]}
    assert set(left) == {str(collided), *map(str, foreign)}
    assert "already in orders" in left[str(collided)]
    assert "is the error queue itself" in left[str(foreign[1])]
    assert "not one of the queues a retry may write to" in left[str(foreign[0])]
    assert rows(t, "payroll") == before["payroll"]
    assert rows(t, "orders") == sorted([*before["orders"], (str(good), b"good")])
    assert rows(t, "error") == [r for r in before["error"] if r[0] != str(good)]


@pytest.mark.parametrize("operator", ["SqlQueueRetryErrorsOperator", "SqlQueueBatchRetryOperator"])
def test_operators_follow_a_stored_retry_redirect(queues, operator: str) -> None:
    import airflow_sqlqueue.operators as operators

    conn, t = queues
    sent = t.send("error", OutgoingMessage(b"to payroll", {h.FAILED_Q: "orders"}))
    t.errors().retry_redirects.create("orders", "payroll", created_by="op")
    result = getattr(operators, operator)(task_id="retry", sqlqueue_conn_id=conn,
                                          allowed_queues=["orders", "payroll"]).execute({})
    assert result["returned"] == {"payroll": 1}
    assert rows(t, "payroll") == [(str(sent), b"to payroll")] and rows(t, "orders") == []
