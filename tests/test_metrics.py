"""Metrics through Airflow's metrics client, read by a StatsD listener (a UDP socket) this test starts.

The client is set up the way a task process does it (``stats.initialize`` from ``[metrics]``), pointed at the
listener; the health task, the drain (to a list and with a handler), the send, the batched retry and the
trigger each emit their metrics, and every expected line is found in what the listener received.
"""

from __future__ import annotations  # noqa: I001  (tests.airflow_env must be imported before airflow)

import tests.airflow_env as airflow_env
from tests.airflow_env import airflow_db  # noqa: F401  (fixture)

import asyncio
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_sqlqueue import metrics
from airflow_sqlqueue.maintenance import throughput
from airflow_sqlqueue.transport import OutgoingMessage, SqlQueueTransport
from airflow_sqlqueue.transport.wire import headers as h
from tests.conftest import make_db


class Listener:
    """A StatsD server in miniature: every datagram received, split into lines."""

    def __init__(self) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.bind(("127.0.0.1", 0))
        self.socket.settimeout(0.2)
        self.port = self.socket.getsockname()[1]
        self.lines: list[str] = []

    def read(self) -> list[str]:
        while True:
            try:
                data = self.socket.recv(65536)
            except TimeoutError:
                return self.lines
            self.lines += data.decode().splitlines()


@pytest.fixture
def statsd(monkeypatch: pytest.MonkeyPatch) -> Iterator[Listener]:
    from airflow.sdk.observability import stats
    from airflow.sdk.observability.metrics import stats_utils

    listener = Listener()
    for key, value in (("STATSD_ON", "True"), ("STATSD_HOST", "127.0.0.1"), ("STATSD_PORT", str(listener.port)),
                       ("STATSD_PREFIX", "airflow")):
        monkeypatch.setenv(f"AIRFLOW__METRICS__{key}", value)
    stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=False)
    try:
        yield listener
    finally:
        monkeypatch.undo()
        stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=False)
        listener.socket.close()


def test_names_are_statsd_safe() -> None:
    assert metrics.name("queue_depth", "conn", "sales.orders") == "sqlqueue.queue_depth.conn.sales__orders"
    assert metrics.name("sent", "c", '"x y"."a:b|c@d#e"') == "sqlqueue.sent.c._x_y____a_b_c_d_e_"


def test_each_component_emits_its_metrics(statsd: Listener, airflow_db: None, tmp_path: Path) -> None:  # noqa: F811
    from airflow_sqlqueue.maintenance import tasks
    from airflow_sqlqueue.operators import (
        SqlQueueBatchRetryOperator,
        SqlQueueDrainOperator,
        SqlQueuePartitionDrainOperator,
        SqlQueuePublishOperator,
        SqlQueueRetryErrorsOperator,
        SqlQueueSendOperator,
    )
    from airflow_sqlqueue.triggers.sqlqueue import SqlQueueMessageTrigger, SqlQueueTrigger

    path = tmp_path / "queues.db"
    conn = airflow_env.sqlite_connection("sqlqueue_metrics", path)
    with SqlQueueTransport.from_url(f"sqlite:///{path}") as transport:
        transport.create_queues(["orders", "billing", "events", "error"])
        transport.send_many("error", [OutgoingMessage(body=b"x", headers={h.FAILED_Q: "billing"})] * 4)
        transport.send_many("error", [OutgoingMessage(body=b"y", headers={h.FAILED_Q: "orders"})] * 2)
        SqlQueueSendOperator(task_id="send", sqlqueue_conn_id=conn, queue_name="orders",
                             messages=[{"body": "a"}, {"body": "b"}, {"body": "c"}]).execute({})
        for queue in ("orders", "error"):
            tasks.sample_queue({"conn_id": conn, "queue": queue, "error_queue": "error"})
        trigger = SqlQueueTrigger(conn_id=conn, queue="orders", min_messages=1, poll_interval=0.1)
        assert asyncio.run(first_event(trigger)).payload["status"] == "success"
        assert len(SqlQueueDrainOperator(task_id="drain", sqlqueue_conn_id=conn, queue_name="orders",
                                         max_messages=2).execute({})) == 2

        def handler(message: Any, context: Any) -> None:
            if message.body == b"c":
                raise ValueError("no")

        SqlQueueSendOperator(task_id="send2", sqlqueue_conn_id=conn, queue_name="orders", body="d").execute({})
        SqlQueueDrainOperator(task_id="process", sqlqueue_conn_id=conn, queue_name="orders", handler=handler,
                              immediate_retries=0).execute({})
        SqlQueueBatchRetryOperator(task_id="retry", sqlqueue_conn_id=conn, batch_size=2, failed_q="billing",
                                   allowed_queues=["billing"]).execute({})
        SqlQueueRetryErrorsOperator(task_id="retry_errors", sqlqueue_conn_id=conn, failed_q="orders",
                                    allowed_queues="orders").execute({})
        [part] = transport.plan_partitions("billing", partitions=1)
        SqlQueuePartitionDrainOperator(task_id="part", sqlqueue_conn_id=conn, queue_name="billing",
                                       partition=part.as_dict(), output_path=str(tmp_path / "p")).execute({})
        transport.create_subscription_table()
        transport.subscribe("events", ["Sales.OrderPlaced"])
        transport.subscribe("billing", ["Sales.OrderPlaced"])
        SqlQueuePublishOperator(task_id="publish", sqlqueue_conn_id=conn, event_type="Sales.OrderPlaced",
                                body={"n": 1}).execute({})
        message_trigger = SqlQueueMessageTrigger(conn_id=conn, queue_name="events", poll_interval=0.1,
                                                 event_interval=0, allow_delete_before_stored=True)
        assert asyncio.run(first_event(message_trigger)).payload["count"] == 1
    lines = statsd.read()
    expected = {f"airflow.sqlqueue.sent.{conn}.orders:3|c", f"airflow.sqlqueue.queue_depth.{conn}.orders:3|g",
                f"airflow.sqlqueue.queue_depth.{conn}.error:6|g", f"airflow.sqlqueue.error_queue_size.{conn}.error:6|g",
                f"airflow.sqlqueue.trigger_events.{conn}.orders:1|c", f"airflow.sqlqueue.drained.{conn}.orders:2|c",
                f"airflow.sqlqueue.processed.{conn}.orders:1|c", f"airflow.sqlqueue.failed.{conn}.orders:1|c",
                f"airflow.sqlqueue.retried.{conn}.billing:2|c", f"airflow.sqlqueue.retried.{conn}.orders:3|c",
                f"airflow.sqlqueue.drained.{conn}.billing:4|c",
                f"airflow.sqlqueue.published.{conn}.events:1|c", f"airflow.sqlqueue.published.{conn}.billing:1|c",
                f"airflow.sqlqueue.trigger_events.{conn}.events:1|c",
                f"airflow.sqlqueue.trigger_messages.{conn}.events:1|c"}
    assert expected <= set(lines), sorted(expected - set(lines))
    assert sum(1 for line in lines if line == f"airflow.sqlqueue.retried.{conn}.billing:2|c") == 2  # 2 batches
    names = {line.split(":")[0] for line in lines if line.startswith("airflow.sqlqueue.")}
    assert not [n for n in names if n.count(".") != 4], names  # airflow.sqlqueue.<metric>.<conn>.<queue>


async def first_event(trigger: Any) -> Any:
    """The first event of a trigger (its generator closed after it)."""
    events = trigger.run()
    try:
        return await asyncio.wait_for(anext(events), 20)
    finally:
        await events.aclose()


def test_every_metric_is_documented_with_its_kind() -> None:
    text = (Path(__file__).parent.parent / "docs" / "metrics.md").read_text(encoding="utf-8")
    rows = {line.split("|")[1].strip(" `"): line.split("|")[2].strip() for line in text.splitlines()
            if line.startswith("| `")}
    assert {name: kind for name, (kind, _) in metrics.METRICS.items()} == {n: rows.get(n) for n in metrics.METRICS}


def test_the_name_carries_the_queue_only_for_plain_statsd(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("STATSD_ON", "STATSD_DATADOG_ENABLED", "OTEL_ON"):
        monkeypatch.setenv(f"AIRFLOW__METRICS__{key}", "False")
    assert not metrics.keeps_tags()
    monkeypatch.setenv("AIRFLOW__METRICS__OTEL_ON", "True")
    assert metrics.keeps_tags()
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_ON", "True")  # Airflow picks StatsD first
    assert not metrics.keeps_tags()
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_DATADOG_ENABLED", "True")
    assert metrics.keeps_tags()
    assert metrics.tagged_name("queue_depth") == "sqlqueue.queue_depth"


# -- throughput ----------------------------------------------------------------------------------------------
def test_throughput_is_the_send_rate_never_negative() -> None:
    assert throughput.per_minute((100, 0.0), (160, 120.0)) == 30.0
    assert throughput.per_minute((100, 0.0), (100, 60.0)) == 0.0  # nothing sent, however much was received
    assert throughput.per_minute((100, 0.0), (5, 60.0)) is None  # the table was created again
    assert throughput.per_minute((100, 60.0), (110, 60.0)) is None
    samples = [{"conn_id": "c", "queue": "a", "sent_position": 50, "sampled_at": 120.0},
               {"conn_id": "c", "queue": "b", "sent_position": 7, "sampled_at": 120.0},
               {"conn_id": "c", "queue": "empty", "sent_position": None, "sampled_at": 120.0}]
    found, stored = throughput.update(samples, {"c": {"a": [20, 60.0], "gone": [1, 1.0]}})
    assert [s["throughput_per_minute"] for s in found] == [30.0, None, None]
    assert stored == {"c": {"a": [50, 120.0], "b": [7, 120.0], "gone": [1, 1.0]}}


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_sent_position_counts_sends_and_ignores_receives(kind: str, tmp_path: Path) -> None:
    for db in make_db(kind, tmp_path):
        t = db.transport
        t.create_queues([db.q("orders")])
        assert t.sent_position(db.q("orders")) is None
        t.send_many(db.q("orders"), [b"a", b"b", b"c"])
        assert t.sent_position(db.q("orders")) == 3
        t.drain(db.q("orders"), len)
        assert t.peek(db.q("orders")) == 0 and t.sent_position(db.q("orders")) == 3
        t.send(db.q("orders"), b"d")
        assert t.sent_position(db.q("orders")) == 4


def test_health_dag_sends_throughput_from_two_runs(statsd: Listener, airflow_db: None, tmp_path: Path,  # noqa: F811
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.models import Variable  # the metadata database, where the tasks stored it

    airflow_env.use_project_dags()
    path = tmp_path / "queues.db"
    conn = airflow_env.sqlite_connection("sqlqueue_throughput", path)
    monkeypatch.setenv("AIRFLOW_VAR_SQLQUEUE_MAINTENANCE", json.dumps({"connections": [conn]}))
    dag = airflow_env.load_project_dag("sqlqueue_queue_health", "maintenance_queue_health.py")
    Variable.delete(throughput.VARIABLE)
    with SqlQueueTransport.from_url(f"sqlite:///{path}") as transport:
        transport.create_queues(["orders", "error"])
        transport.send_many("orders", [b"m"] * 5)
        assert str(dag.test().state) == "success"
        first = Variable.get(throughput.VARIABLE, deserialize_json=True)[conn]
        assert first["orders"][0] == 5 and "error" not in first  # never sent to: no position yet
        transport.send_many("orders", [b"m"] * 7)
        transport.drain("orders", len)  # the queue drained: depth 0, still 7 sent
        assert str(dag.test().state) == "success"
    second = Variable.get(throughput.VARIABLE, deserialize_json=True)[conn]
    assert second["orders"][0] == 12
    rate = 7 / ((second["orders"][1] - first["orders"][1]) / 60)
    gauges = [line for line in statsd.read() if line.startswith(f"airflow.sqlqueue.throughput_per_minute.{conn}.")]
    assert gauges == [f"airflow.sqlqueue.throughput_per_minute.{conn}.orders:{round(rate, 2)}|g"], gauges


TRIGGERER = """
import asyncio, os, sys

from airflow.configuration import conf
from airflow.jobs.triggerer_job_runner import TriggerRunner  # the triggerer's imports
from airflow.observability import stats
from airflow.observability.metrics import stats_utils

from airflow_sqlqueue.triggers.sqlqueue import SqlQueueTrigger

# TriggererJobRunner._execute sets its client up, then forks the trigger runner (TriggerRunnerSupervisor.start)
stats.initialize(factory=stats_utils.get_stats_factory(),
                 export_legacy_names=conf.getboolean("metrics", "legacy_names_on"))


async def run_one():
    runner = TriggerRunner()
    trigger = SqlQueueTrigger(conn_id=sys.argv[1], queue="orders", min_messages=1, poll_interval=0.1)
    trigger.task_instance = None
    runner.triggers[1] = {"task": None, "is_watcher": False, "name": "sqlqueue", "events": 0}
    await asyncio.wait_for(runner.run_trigger(1, trigger), 30)
    return len(runner.events)


pid = os.fork()
if pid == 0:
    code = 0
    try:
        code = 0 if asyncio.run(run_one()) == 1 else 3
    except BaseException as exc:
        print("trigger runner failed:", repr(exc), file=sys.stderr)
        code = 4
    finally:
        sys.stderr.flush()
        os._exit(code)
sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def test_the_triggerer_sends_the_trigger_metrics(tmp_path: Path) -> None:
    """A process set up as the triggerer is (its imports, its client, the forked runner) sends the trigger's metric.

    The trigger runs in Airflow's own ``TriggerRunner.run_trigger`` in a fresh interpreter, so nothing this test
    session set up (the ``statsd`` fixture) helps it: the metric reaches the listener only through the client
    Airflow sets up in the triggerer.
    """
    import os
    import subprocess
    import sys

    listener = Listener()
    path = tmp_path / "queues.db"
    with SqlQueueTransport.from_url(f"sqlite:///{path}") as transport:
        transport.create_queues(["orders"])
        transport.send("orders", b"m")
    env = {**os.environ, "AIRFLOW__METRICS__STATSD_ON": "True", "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
           "AIRFLOW__METRICS__STATSD_PORT": str(listener.port), "AIRFLOW__METRICS__STATSD_PREFIX": "triggerer",
           "AIRFLOW_CONN_SQLQUEUE_TRIGGERER": json.dumps({"conn_type": "sqlite", "host": str(path.resolve())})}
    try:
        done = subprocess.run([sys.executable, "-c", TRIGGERER, "sqlqueue_triggerer"], env=env, capture_output=True,
                              text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        lines = listener.read()
        assert "triggerer.sqlqueue.trigger_events.sqlqueue_triggerer.orders:1|c" in lines, lines
    finally:
        listener.socket.close()
