"""``dag.test()`` on a SQLite metadata database: sensor -> drain -> mapped tasks, in poke and deferrable mode.

The DAGs are in ``tests/dags/sqlqueue_sensor_flow.py``. The queue starts below the sensor's threshold; the rest
of the messages are sent right after a peek saw too few (by wrapping ``SqlQueueTransport.peek``), so the sensor
really waits: in poke mode it pokes again, in deferrable mode the deferral goes to ``SqlQueueTrigger``, which
``dag.test()`` runs in process, and the sensor resumes in ``execute_complete``.
"""

from __future__ import annotations  # noqa: I001  (tests.airflow_env must be imported before airflow)

import tests.airflow_env as airflow_env
from tests.airflow_env import airflow_db  # noqa: F401  (fixture)

import threading
from pathlib import Path
from typing import Any

import pytest

from airflow_sqlqueue.transport import OutgoingMessage, SqlQueueTransport
from airflow_sqlqueue.triggers.sqlqueue import SqlQueueTrigger

DAG_FILE = "sqlqueue_sensor_flow.py"
CONN_ID = "sqlqueue_flow"
QUEUE = "flow_orders"
MIN_MESSAGES = 12
FIRST = 4  # sent before the run: below MIN_MESSAGES


class PeekSpy:
    """Wraps ``SqlQueueTransport.peek``: records each depth seen; after peek number ``send_after`` sends the rest."""

    def __init__(self, transport: SqlQueueTransport, send_after: int, rest: list[OutgoingMessage]) -> None:
        self.transport = transport
        self.send_after = send_after
        self.rest = rest
        self.depths: list[int] = []
        self.sent: list[str] = []
        self.lock = threading.Lock()
        self.active = True

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        original = SqlQueueTransport.peek
        spy = self

        def peek(transport: SqlQueueTransport, queue: Any, *args: Any, **kwargs: Any) -> int:
            depth = original(transport, queue, *args, **kwargs)
            if not spy.active:
                return depth
            with spy.lock:
                spy.depths.append(depth)
                if len(spy.depths) == spy.send_after:
                    spy.sent = [str(i) for i in spy.transport.send_many(QUEUE, spy.rest)]
            return depth

        monkeypatch.setattr(SqlQueueTransport, "peek", peek)


@pytest.fixture
def flow_queue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A SQLite queue database behind connection ``sqlqueue_flow``, holding ``FIRST`` messages."""
    db_path = tmp_path / "flow.db"
    airflow_env.sqlite_connection(CONN_ID, db_path)
    monkeypatch.setenv("SQLQUEUE_FLOW_OUT", str(tmp_path / "out"))
    transport = SqlQueueTransport.from_url(f"sqlite:///{db_path}")
    transport.create_queues([QUEUE, "error"])
    first = [str(i) for i in transport.send_many(QUEUE, [OutgoingMessage(body=f"early-{i}", headers={"n": str(i)})
                                                         for i in range(FIRST)])]
    rest = [OutgoingMessage(body=f"late-{i}", headers={"n": str(FIRST + i)}) for i in range(MIN_MESSAGES - FIRST)]
    yield transport, first, rest, tmp_path / "out"
    transport.close()


def _run_and_check(dag_id: str, flow_queue, monkeypatch: pytest.MonkeyPatch, send_after: int) -> PeekSpy:
    transport, first, rest, out = flow_queue
    spy = PeekSpy(transport, send_after, rest)
    dag = airflow_env.load_dag(dag_id, DAG_FILE)
    spy.install(monkeypatch)
    dr = dag.test()
    spy.active = False  # stop spying before checking the queue
    assert str(dr.state) == "success", airflow_env.task_states(dr)

    sent = first + spy.sent
    assert len(spy.sent) == MIN_MESSAGES - FIRST and len(set(sent)) == MIN_MESSAGES
    assert spy.depths[0] == FIRST and MIN_MESSAGES in spy.depths  # it waited, then saw them all
    assert airflow_env.xcom_value(dr, "wait") == MIN_MESSAGES  # the depth the sensor pushed
    drained = airflow_env.xcom_value(dr, "drain")
    assert sorted(item["id"] for item in drained) == sorted(sent)
    # one mapped task instance per message, each message seen exactly once
    handled = airflow_env.xcom_value(dr, "handle")
    assert len(handled) == MIN_MESSAGES and sorted(handled) == sorted(sent)
    states = airflow_env.task_states(dr)
    assert sorted(k for k in states if k.startswith("handle[")) == sorted(f"handle[{i}]" for i in range(MIN_MESSAGES))
    assert all(state == "success" for state in states.values()), states
    seen = [p.name.split(".")[0] for p in (out / dag_id / "seen").iterdir()]
    assert sorted(seen) == sorted(sent)
    bodies = sorted(p.read_text() for p in (out / dag_id / "seen").iterdir())
    assert bodies == sorted([f"early-{i}" for i in range(FIRST)] + [f"late-{i}" for i in range(MIN_MESSAGES - FIRST)])
    # the queue is empty and nothing went to the error queue
    assert transport.peek(QUEUE) == 0 and transport.browse(QUEUE) == []
    assert transport.browse("error") == []
    return spy


def test_sensor_poke_drain_and_mapped_tasks(airflow_db, flow_queue, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    spy = _run_and_check("sqlqueue_sensor_flow_poke", flow_queue, monkeypatch, send_after=1)
    assert spy.depths[:2] == [FIRST, MIN_MESSAGES]  # first poke too few, second poke done


def test_deferrable_sensor_runs_the_trigger_then_drains(airflow_db, flow_queue,  # noqa: F811
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[dict[str, Any]] = []
    original_run = SqlQueueTrigger.run

    async def run(self: SqlQueueTrigger):
        runs.append(self.serialize()[1])
        async for event in original_run(self):
            yield event

    monkeypatch.setattr(SqlQueueTrigger, "run", run)
    # peek 1: the sensor's own check before deferring; peek 2: the trigger's first poll; then the rest arrive
    spy = _run_and_check("sqlqueue_sensor_flow_deferrable", flow_queue, monkeypatch, send_after=2)
    assert spy.depths[:3] == [FIRST, FIRST, MIN_MESSAGES]
    assert runs == [{"conn_id": CONN_ID, "queue": QUEUE, "min_messages": MIN_MESSAGES, "poll_interval": 0.2,
                     "max_poll_interval": None}]
