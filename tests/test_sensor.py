"""SqlQueueSensor: poke, deferral to SqlQueueTrigger, and resuming, on SQLite and PostgreSQL."""

from __future__ import annotations

import tests.airflow_env  # noqa: F401  (sets AIRFLOW_HOME before any airflow import)

# isort: split

import logging

import pytest
from airflow.sdk import PokeReturnValue
from airflow.sdk.exceptions import AirflowException, TaskDeferred

from airflow_sqlqueue.sensors.sqlqueue import SqlQueueSensor
from airflow_sqlqueue.triggers.sqlqueue import SqlQueueTrigger
from tests.conftest import Db
from tests.test_triggers import airflow_conn, send


def sensor(db: Db, conn_id: str, **kwargs: object) -> SqlQueueSensor:
    return SqlQueueSensor(task_id="wait", queue_name=db.q("orders"), sqlqueue_conn_id=conn_id, **kwargs)


def test_poke_is_done_at_min_messages_and_pushes_the_depth(queues: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    task = sensor(queues, airflow_conn(queues, monkeypatch), min_messages=3)
    send(queues, 2)
    result = task.poke({})
    assert isinstance(result, PokeReturnValue) and not result.is_done and result.xcom_value == 2
    send(queues, 1)
    result = task.poke({})
    assert result.is_done and result.xcom_value == 3
    assert queues.transport.peek(queues.q("orders")) == 3  # poking takes nothing


def test_templated_min_messages_text(queues: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    task = sensor(queues, airflow_conn(queues, monkeypatch), min_messages="2")
    send(queues, 2)
    assert task.poke({}).is_done
    assert set(SqlQueueSensor.template_fields) >= {"queue_name", "min_messages", "sqlqueue_conn_id"}


def test_deferrable_defers_to_the_trigger(queues: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    conn_id = airflow_conn(queues, monkeypatch)
    task = sensor(queues, conn_id, min_messages=2, deferrable=True, poll_interval=0.5, timeout=120)
    send(queues, 1)
    with pytest.raises(TaskDeferred) as deferred:
        task.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, SqlQueueTrigger)
    assert trigger.serialize()[1] == {"conn_id": conn_id, "queue": queues.q("orders"), "min_messages": 2,
                                      "poll_interval": 0.5, "max_poll_interval": None}
    assert deferred.value.method_name == "execute_complete"
    assert deferred.value.timeout.total_seconds() == 120


def test_deferrable_returns_at_once_when_already_deep(queues: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    task = sensor(queues, airflow_conn(queues, monkeypatch), min_messages=2, deferrable=True)
    send(queues, 2)
    assert task.execute({}) == 2


def test_execute_complete() -> None:
    task = SqlQueueSensor(task_id="wait", queue_name="orders", sqlqueue_conn_id="c")
    assert task.execute_complete({}, {"status": "success", "queue": "orders", "depth": 7}) == 7
    with pytest.raises(AirflowException, match="table missing"):
        task.execute_complete({}, {"status": "error", "message": "table missing"})


def test_poll_interval_bounds(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ValueError, match="0.1"):
        SqlQueueSensor(task_id="a", queue_name="orders", poll_interval=0.01)
    with caplog.at_level(logging.WARNING):
        task = SqlQueueSensor(task_id="b", queue_name="orders", poll_interval=20)
    assert "over 10" in caplog.text
    assert task.poke_interval == 20  # the poll interval is also the poke interval unless given
    assert SqlQueueSensor(task_id="c", queue_name="orders", poll_interval=1, poke_interval=30).poke_interval == 30


def test_bad_min_messages_is_refused_when_poking(queues: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    task = sensor(queues, airflow_conn(queues, monkeypatch), min_messages="zero")
    with pytest.raises(ValueError, match="min_messages"):
        task.poke({})
