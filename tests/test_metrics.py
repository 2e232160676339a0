"""Metrics through Airflow's metrics client, read by a StatsD listener (a UDP socket) this test starts.

The client is set up the way a task process does it (``stats.initialize`` from ``[metrics]``), pointed at the
listener; the health task, the drain (to a list and with a handler), the send, the batched retry and the
trigger each emit their metrics, and every expected line is found in what the listener received.
"""

from __future__ import annotations  # noqa: I001  (tests.airflow_env must be imported before airflow)

import tests.airflow_env as airflow_env
from tests.airflow_env import airflow_db  # noqa: F401  (fixture)

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_sqlqueue import metrics
from airflow_sqlqueue.transport import OutgoingMessage, SqlQueueTransport
from airflow_sqlqueue.transport import headers as h


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
        SqlQueueSendOperator,
    )
    from airflow_sqlqueue.triggers.sqlqueue import SqlQueueTrigger

    path = tmp_path / "queues.db"
    conn = airflow_env.sqlite_connection("sqlqueue_metrics", path)
    with SqlQueueTransport.from_url(f"sqlite:///{path}") as transport:
        transport.create_queues(["orders", "billing", "error"])
        transport.send_many("error", [OutgoingMessage(body=b"x", headers={h.FAILED_Q: "billing"})] * 4)
        SqlQueueSendOperator(task_id="send", sqlqueue_conn_id=conn, queue_name="orders",
                             messages=[{"body": "a"}, {"body": "b"}, {"body": "c"}]).execute({})
        for queue in ("orders", "error"):
            tasks.sample_queue({"conn_id": conn, "queue": queue, "error_queue": "error"})
        trigger = SqlQueueTrigger(conn_id=conn, queue="orders", min_messages=1, poll_interval=0.1)

        async def first_event() -> Any:
            async for event in trigger.run():
                return event

        assert asyncio.run(first_event()).payload["status"] == "success"
        assert len(SqlQueueDrainOperator(task_id="drain", sqlqueue_conn_id=conn, queue_name="orders",
                                         max_messages=2).execute({})) == 2

        def handler(message: Any, context: Any) -> None:
            if message.body == b"c":
                raise ValueError("no")

        SqlQueueDrainOperator(task_id="process", sqlqueue_conn_id=conn, queue_name="orders", handler=handler,
                              immediate_retries=0).execute({})
        SqlQueueBatchRetryOperator(task_id="retry", sqlqueue_conn_id=conn, batch_size=2, failed_q="billing",
                                   allowed_queues=["billing"]).execute({})
    lines = statsd.read()
    expected = {f"airflow.sqlqueue.sent.{conn}.orders:3|c", f"airflow.sqlqueue.queue_depth.{conn}.orders:3|g",
                f"airflow.sqlqueue.queue_depth.{conn}.error:4|g", f"airflow.sqlqueue.error_queue_size.{conn}.error:4|g",
                f"airflow.sqlqueue.trigger_events.{conn}.orders:1|c", f"airflow.sqlqueue.drained.{conn}.orders:2|c",
                f"airflow.sqlqueue.failed.{conn}.orders:1|c", f"airflow.sqlqueue.retried.{conn}.billing:2|c"}
    assert expected <= set(lines), sorted(set(lines))
    assert sum(1 for line in lines if line == f"airflow.sqlqueue.retried.{conn}.billing:2|c") == 2  # 2 batches
