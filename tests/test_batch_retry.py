"""Retry in controlled batches: every message back exactly once, the rate limit held (from the batches' own
timestamps), the ramp, redirects, the allow-list, cancellation; and the operator in a real ``dag.test()`` run."""

from __future__ import annotations  # noqa: I001  (tests.airflow_env must be imported before airflow)

import tests.airflow_env as airflow_env
from tests.airflow_env import airflow_db  # noqa: F401  (fixture)

import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from airflow_sqlqueue.transport import OutgoingMessage
from airflow_sqlqueue.transport.wire import headers as h
from airflow_sqlqueue.transport.errorqueue.batches import BatchPlan
from tests.conftest import Db


def fail_into_error(db: Db, counts: dict[str, int]) -> dict[str, list[str]]:
    """``counts[queue]`` messages in the error queue that failed in ``queue``; their native Ids by queue."""
    made: dict[str, list[str]] = {}
    for queue, count in counts.items():
        ids = db.transport.send_many(db.q("error"), [OutgoingMessage(body=f"{queue}-{i}".encode(), headers={
            h.FAILED_Q: db.transport.name(db.q(queue)), h.EXCEPTION_TYPE: "Boom"}) for i in range(count)])
        made[queue] = [str(i) for i in ids]
    return made


def rate_held(summary: dict[str, Any], rate: float) -> list[float]:
    """Observed rates at each batch end, from the batches' own timestamps; each must be within ``rate``."""
    done, observed = 0, []
    for batch in summary["batches"]:
        done += batch["total_returned"]
        observed.append(done / (batch["finished_at"] - summary["started_at"]))
    assert all(r <= rate * (1 + 1e-9) for r in observed), observed
    return observed


def test_ten_thousand_failed_messages_come_back_once_within_the_rate_limit(db: Db) -> None:
    db.transport.create_queues([db.q("orders"), db.q("error")])
    made = fail_into_error(db, {"orders": 10_000})
    rate = 5_000.0
    plan = BatchPlan(batch_size=1_000, ramp_start=100, rate_per_second=rate)
    records: list[Any] = []
    errors = db.transport.errors(db.q("error"), allowed=[db.q("orders")])
    summary = errors.retry_in_batches(plan, on_batch=records.append).as_dict()
    back = Counter(str(r.id) for r in db.transport.browse(db.q("orders"), limit=20_000))
    assert set(back) == set(made["orders"]) and set(back.values()) == {1}  # each one, exactly once
    assert db.transport.count(db.q("error")) == 0 and summary["total_returned"] == 10_000
    assert [b["looked_at"] for b in summary["batches"]][:5] == [100, 200, 400, 800, 1_000]  # the ramp
    assert sum(b["looked_at"] for b in summary["batches"]) == 10_000 and len(records) == len(summary["batches"])
    observed = rate_held(summary, rate)
    assert observed[-1] > 0 and not summary["cancelled"] and summary["left"] == []


def test_redirects_allow_list_and_cancel(db: Db) -> None:
    db.transport.create_queues([db.q(q) for q in ("orders", "orders_v2", "billing", "audit", "error")])
    made = fail_into_error(db, {"orders": 30, "billing": 5, "audit": 5})
    allowed = [db.q(q) for q in ("orders_v2", "billing")]
    errors = db.transport.errors(db.q("error"), allowed=allowed, redirects={db.q("orders"): db.q("orders_v2")})
    summary = errors.retry_in_batches(BatchPlan(batch_size=10)).as_dict()
    assert summary["returned"] == {db.transport.name(db.q("orders_v2")): 30, db.transport.name(db.q("billing")): 5}
    assert db.transport.count(db.q("orders")) == 0 and db.transport.count(db.q("orders_v2")) == 30
    left = summary["left"]
    assert sorted(x["id"] for x in left) == sorted(made["audit"])  # not allowed: stays, with the reason
    assert all("not one of the queues" in x["reason"] for x in left) and db.transport.count(db.q("error")) == 5

    more = fail_into_error(db, {"billing": 50})
    stops = iter([False, False, True])
    cancelled = db.transport.errors(db.q("error"), allowed=allowed).retry_in_batches(
        BatchPlan(batch_size=10), should_stop=lambda: next(stops)).as_dict()
    assert cancelled["cancelled"] and len(cancelled["batches"]) == 2
    assert db.transport.count(db.q("error")) == 5 + 50 - cancelled["total_returned"]
    assert cancelled["total_returned"] == 15  # 5 audit rows looked at and left, then 15 billing ones
    assert len(more["billing"]) == 50


@pytest.mark.parametrize("plan, message", [
    ({"batch_size": 0}, "batch_size"), ({"batch_size": 10_001}, "batch_size"), ({"ramp_start": -1}, "ramp_start"),
    ({"rate_per_second": math.nan}, "rate_per_second"), ({"rate_per_second": math.inf}, "rate_per_second"),
    ({"rate_per_second": 0}, "rate_per_second"), ({"max_messages": 0}, "max_messages"),
    ({"batch_size": True}, "batch_size")])
def test_bad_plans_are_refused_with_the_reason(plan: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BatchPlan(**plan)


def test_the_operator_in_a_dag_run_redirects_within_the_rate_and_reports_each_batch(
        airflow_db: None, tmp_path: Path) -> None:  # noqa: F811
    from airflow_sqlqueue.transport import SqlQueueTransport

    path = tmp_path / "queues.db"
    airflow_env.sqlite_connection("sqlqueue_batch", path)
    with SqlQueueTransport.from_url(f"sqlite:///{path}") as transport:
        transport.create_queues(["orders", "orders_v2", "billing", "secret", "error"])
        db = Db("sqlite", f"sqlite:///{path}", None, transport)
        made = fail_into_error(db, {"orders": 1_500, "billing": 300, "secret": 2})
        dag = airflow_env.load_dag("sqlqueue_batch_retry", "sqlqueue_batch_retry_dag.py")
        run = dag.test()
        assert str(run.state) == "success", airflow_env.task_states(run)
        result = airflow_env.xcom_value(run, "retry")
        assert result["returned"] == {"orders_v2": 1_500, "billing": 300}
        assert sorted(str(r.id) for r in transport.browse("orders_v2", limit=5_000)) == sorted(made["orders"])
        assert [x["id"] for x in result["left"]] == made["secret"] and transport.count("error") == 2
        assert [b["looked_at"] for b in result["batches"]][:4] == [50, 100, 200, 400]
        rate_held(result, 1_000.0)


def test_a_cancel_during_a_rate_limit_wait_stops_before_the_next_batch(db: Db) -> None:
    """Issue 31: the cancel asked while the run waits for the rate limit is honoured at the end of that wait's
    next slice (never after the batch the wait was for); a wait of hours is cut into half-second slices."""
    from airflow_sqlqueue.transport.errorqueue.error_queue import STOP_CHECK_SECONDS

    db.transport.create_queues([db.q("orders"), db.q("error")])
    fail_into_error(db, {"orders": 6})
    now = [1_000.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    cancel_at = [math.inf]
    errors = db.transport.errors(db.q("error"), allowed=[db.q("orders")])
    records: list[Any] = []

    def on_batch(record: Any) -> None:  # the cancel comes 1 s into the wait for the second batch
        records.append(record)
        cancel_at[0] = now[0] + 1.0

    summary = errors.retry_in_batches(BatchPlan(batch_size=2, rate_per_second=0.01), on_batch=on_batch,
                                      should_stop=lambda: now[0] >= cancel_at[0], clock=lambda: now[0],
                                      sleep=sleep)
    assert summary.cancelled and len(records) == 1 and summary.total_returned == 2
    assert db.transport.count(db.q("error")) == 4 and db.transport.count(db.q("orders")) == 2
    assert max(slept) <= STOP_CHECK_SECONDS
    assert now[0] - records[0].finished_at <= 1.0 + STOP_CHECK_SECONDS  # not the 200 s the rate asked


@pytest.mark.parametrize("rate", [1e-9, 0.009, 1e300])
def test_a_rate_outside_the_bounds_is_refused_naming_them(rate: float) -> None:
    with pytest.raises(ValueError, match=r"from 0\.01 \(one every 100 s\) to 1,000,000"):
        BatchPlan(rate_per_second=rate)
