"""Metrics through Airflow's OpenTelemetry client, read by an OTLP/HTTP receiver this test starts.

Airflow's ``[metrics]`` is set for OpenTelemetry (``otel_on``, ``otel_host``/``otel_port`` of the receiver, no SSL,
a 200 ms export interval) and the client is set up as a task process does (``stats.initialize``). The operators
and the health task run for real; the receiver decodes each ``ExportMetricsServiceRequest`` (opentelemetry-proto)
and the test finds every metric by its OTel name (``airflow.sqlqueue.<metric>``, no queue in the name) with the
attributes ``conn_id`` and ``queue`` and the value the component counted.
"""

from __future__ import annotations  # noqa: I001  (tests.airflow_env must be imported before airflow)

import tests.airflow_env as airflow_env
from tests.airflow_env import airflow_db  # noqa: F401  (fixture)

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from airflow_sqlqueue import metrics
from airflow_sqlqueue.transport import OutgoingMessage, SqlQueueTransport
from airflow_sqlqueue.transport.wire import headers as h

pytest.importorskip("opentelemetry.proto", reason="opentelemetry-proto is not installed (apache-airflow[otel])")


class Receiver:
    """An OTLP/HTTP metrics receiver in miniature: every data point received, by (name, attributes)."""

    def __init__(self) -> None:
        self.points: dict[tuple[str, tuple[tuple[str, str], ...]], list[float]] = {}
        self.requests = 0
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
                    ExportMetricsServiceRequest,
                    ExportMetricsServiceResponse,
                )

                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                request = ExportMetricsServiceRequest()
                request.ParseFromString(body)
                receiver.add(request, self.path)
                reply = ExportMetricsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def add(self, request: Any, path: str) -> None:
        assert path == "/v1/metrics", path
        with self.lock:
            self.requests += 1
            for resource in request.resource_metrics:
                for scope in resource.scope_metrics:
                    for metric in scope.metrics:
                        kind = metric.WhichOneof("data")
                        for point in getattr(metric, kind).data_points:
                            attributes = tuple(sorted((a.key, a.value.string_value) for a in point.attributes))
                            value = point.as_int if point.WhichOneof("value") == "as_int" else point.as_double
                            self.points.setdefault((metric.name, attributes), []).append(value)

    def last(self, name: str, **attributes: str) -> float | None:
        """The last value received for a metric with exactly these attributes (None: not received)."""
        with self.lock:
            values = self.points.get((name, tuple(sorted(attributes.items()))))
        return values[-1] if values else None

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def otel(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    from airflow.sdk.observability import stats
    from airflow.sdk.observability.metrics import stats_utils
    from opentelemetry import metrics as otel_metrics

    receiver = Receiver()
    for key, value in (("STATSD_ON", "False"), ("STATSD_DATADOG_ENABLED", "False"), ("OTEL_ON", "True"),
                       ("OTEL_HOST", "127.0.0.1"), ("OTEL_PORT", str(receiver.port)), ("OTEL_SSL_ACTIVE", "False"),
                       ("OTEL_INTERVAL_MILLISECONDS", "200"), ("OTEL_PREFIX", "airflow")):
        monkeypatch.setenv(f"AIRFLOW__METRICS__{key}", value)
    for key in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_METRICS_EXPORTER"):
        monkeypatch.delenv(key, raising=False)
    stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=False)
    try:
        yield receiver
    finally:
        provider = otel_metrics.get_meter_provider()
        if hasattr(provider, "shutdown"):
            provider.shutdown()  # stops its exporting thread (a final export goes to the receiver)
        monkeypatch.undo()
        stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=False)
        receiver.close()


def test_metrics_reach_an_otlp_receiver_named_without_the_queue_and_tagged_with_it(
        otel: Receiver, airflow_db: None, tmp_path: Path) -> None:  # noqa: F811
    from airflow_sqlqueue.maintenance import tasks
    from airflow_sqlqueue.operators import SqlQueueDrainOperator, SqlQueueSendOperator

    assert metrics.keeps_tags()
    path = tmp_path / "queues.db"
    conn = airflow_env.sqlite_connection("sqlqueue_otel", path)
    with SqlQueueTransport.from_url(f"sqlite:///{path}") as transport:
        transport.create_queues(["sales.orders", "error"])
        transport.send_many("error", [OutgoingMessage(body=b"x", headers={h.FAILED_Q: "sales.orders"})] * 2)
    SqlQueueSendOperator(task_id="send", sqlqueue_conn_id=conn, queue_name="sales.orders",
                         messages=[{"body": "a"}, {"body": "b"}, {"body": "c"}]).execute({})
    for queue in ("sales.orders", "error"):
        tasks.sample_queue({"conn_id": conn, "queue": queue, "error_queue": "error"})

    def handler(message: Any, context: Any) -> None:
        if message.body == b"b":
            raise ValueError("no")

    SqlQueueDrainOperator(task_id="process", sqlqueue_conn_id=conn, queue_name="sales.orders", handler=handler,
                          immediate_retries=0).execute({})
    expected = {("airflow.sqlqueue.sent", "sales.orders"): 3, ("airflow.sqlqueue.queue_depth", "sales.orders"): 3,
                ("airflow.sqlqueue.queue_depth", "error"): 2, ("airflow.sqlqueue.error_queue_size", "error"): 2,
                ("airflow.sqlqueue.processed", "sales.orders"): 2, ("airflow.sqlqueue.failed", "sales.orders"): 1}
    deadline = time.monotonic() + 60  # a bound on the wait for the periodic export, not a speed assertion
    found: dict[tuple[str, str], float | None] = {}
    while time.monotonic() < deadline:
        found = {key: otel.last(key[0], conn_id=conn, queue=key[1]) for key in expected}
        if found == expected:
            break
        time.sleep(0.2)
    assert found == expected, (found, sorted(otel.points))
    assert otel.last("airflow.sqlqueue.oldest_message_age_seconds", conn_id=conn, queue="sales.orders") is not None
    names = {name for name, _ in otel.points}
    assert not [n for n in names if n.startswith("airflow.sqlqueue.") and n.count(".") != 2], names
