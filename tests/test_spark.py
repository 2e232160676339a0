"""The PySpark job on ``local[2]``: typed header columns, decoded bodies, deduplication, partitioning, summary;
the job through ``SparkSubmitOperator`` in ``dag.test()``; and ``sqlqueue demo`` end to end.

Batches are Parquet files in the drain operator's own schema (``batch_schema``), written with chosen
``received_at`` times so that latencies are exact. One Spark session serves the whole module.
"""

from __future__ import annotations  # noqa: I001  (tests.airflow_env must be imported before airflow)

import tests.airflow_env as airflow_env
from tests.airflow_env import airflow_db  # noqa: F401  (fixture)

import json
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_sqlqueue.operators.parquet import batch_schema
from airflow_sqlqueue.spark import columns
from airflow_sqlqueue.spark.job import run
from airflow_sqlqueue.spark.summary import read_summary
from airflow_sqlqueue.transport.wire import headers as h

BASE = datetime(2024, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
PLACED = "Sales.Messages.Events.OrderPlaced"
PLACED_TYPES = (f"{PLACED}, Sales.Messages, Version=1.0.0.0, Culture=neutral, PublicKeyToken=null;"
                "NServiceBus.IMessage, NServiceBus.Core, Version=9.0.0.0")


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One ``local[2]`` session for the module (the job's own settings, warehouse in a temp folder)."""
    from airflow_sqlqueue.spark.session import local_session

    session = local_session("local[2]", "sqlqueue-tests", conf={
        "spark.sql.warehouse.dir": str(tmp_path_factory.mktemp("warehouse"))})
    yield session
    session.stop()
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its connection close logs after pytest closed the logs


def row(headers: dict[str, str] | str, body: bytes | None, *, received_at: datetime = BASE, seq: int = 1,
        native_id: str | None = None) -> dict[str, Any]:
    """One drained row as the drain operator writes it."""
    return {"id": native_id or str(uuid.uuid4()), "seq": seq, "queue": "audit",
            "headers": headers if isinstance(headers, str) else json.dumps(headers), "body": body,
            "received_at": received_at}


def nsb_headers(message_id: str | None = None, *, sent: datetime = BASE, types: str = PLACED_TYPES,
                **extra: str) -> dict[str, str]:
    headers = {h.MESSAGE_ID: message_id or str(uuid.uuid4()), h.ENCLOSED_MESSAGE_TYPES: types,
               h.TIME_SENT: h.format_wire_time(sent), h.CONTENT_TYPE: "application/json"}
    headers.update(extra)
    return headers


def write_batch(folder: Path, rows: list[dict[str, Any]], name: str | None = None) -> str:
    """A batch file in the drain's Parquet schema."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (name or f"batch-{uuid.uuid4().hex}.parquet")
    pq.write_table(pa.Table.from_pylist(rows, schema=batch_schema()), path)
    return str(path)


def output_rows(spark: Any, output: Path) -> dict[str, Any]:
    """The job's output read back, by message id."""
    return {r["message_id"]: r for r in spark.read.parquet(str(output / "messages")).collect()}


# -- columns -------------------------------------------------------------------------------------------
def test_headers_become_typed_columns(spark: Any, tmp_path: Path) -> None:
    full = nsb_headers("m-full", sent=BASE - timedelta(seconds=2, microseconds=250),
                       **{h.CONVERSATION_ID: "conv-1", h.CORRELATION_ID: "corr-1",
                          h.ORIGINATING_ENDPOINT: "Sales", h.MESSAGE_INTENT: "Publish"})
    native = str(uuid.uuid4())
    bare = {h.ENCLOSED_MESSAGE_TYPES: "Billing.OrderBilled"}  # no MessageId, no TimeSent
    untyped = {h.MESSAGE_ID: "m-untyped", h.TIME_SENT: "yesterday"}  # no type, unreadable time
    write_batch(tmp_path / "in", [row(full, b"{}", seq=1), row(bare, b"{}", seq=2, native_id=native),
                                  row(untyped, b"{}", seq=3)])

    summary = run(spark, str(tmp_path / "in"), str(tmp_path / "out"), dataset=True)
    rows = output_rows(spark, tmp_path / "out")

    assert set(rows) == {"m-full", native, "m-untyped"}
    m = rows["m-full"]
    assert (m.message_type, m.enclosed_message_types) == (PLACED, PLACED_TYPES)
    assert (m.conversation_id, m.correlation_id, m.originating_endpoint, m.message_intent, m.content_type) == \
           ("conv-1", "corr-1", "Sales", "Publish", "application/json")
    assert m.time_sent.replace(tzinfo=timezone.utc) == BASE - timedelta(seconds=2, microseconds=250)
    assert m.latency_ms == pytest.approx(2000.25)
    assert (m.queue, m.seq, m.deliveries) == ("audit", 1, 1)
    assert m.headers[h.ORIGINATING_ENDPOINT] == "Sales"
    assert rows[native].native_id == native and rows[native].message_type == "Billing.OrderBilled"
    assert rows["m-untyped"].message_type == columns.UNKNOWN_TYPE
    assert rows["m-untyped"].time_sent is None and rows["m-untyped"].latency_ms is None
    assert summary["without_time_sent"] == 2


def test_json_bodies_are_parsed(spark: Any, tmp_path: Path) -> None:
    order = {"OrderId": "ORD-1", "Amount": 12.5, "Lines": [{"Sku": "A", "Qty": 2}]}
    write_batch(tmp_path / "in", [
        row(nsb_headers("json"), json.dumps(order).encode()),
        row(nsb_headers("no-content-type", **{h.CONTENT_TYPE: ""}), b'{"a": 1}'),
        row(nsb_headers("xml", **{h.CONTENT_TYPE: "text/xml"}), b"<Order Id='1'/>"),
        row(nsb_headers("json-not-json"), b"not json, but text"),
    ])
    run(spark, str(tmp_path / "in"), str(tmp_path / "out"), dataset=True)
    out = spark.read.parquet(str(tmp_path / "out" / "messages")).selectExpr(
        "message_id", "body_kind", "variant_get(body_json, '$.OrderId', 'string') AS order_id",
        "variant_get(body_json, '$.Lines[0].Qty', 'int') AS qty", "body_text", "body_binary")
    rows = {r["message_id"]: r for r in out.collect()}

    assert (rows["json"].body_kind, rows["json"].order_id, rows["json"].qty) == ("json", "ORD-1", 2)
    assert rows["json"].body_text is None and rows["json"].body_binary is None
    assert rows["xml"].body_kind == "text" and rows["xml"].body_text == "<Order Id='1'/>"
    assert rows["json-not-json"].body_kind == "text" and rows["json-not-json"].body_text == "not json, but text"
    assert rows["no-content-type"].body_kind == "json"


def test_binary_bodies_are_kept(spark: Any, tmp_path: Path) -> None:
    pdf = b"%PDF-1.7\n\xe2\xe3\xcf\xd3\x00\xff"
    write_batch(tmp_path / "in", [row(nsb_headers("pdf", **{h.CONTENT_TYPE: "application/pdf"}), pdf),
                                  row(nsb_headers("empty"), b""), row(nsb_headers("null"), None)])
    summary = run(spark, str(tmp_path / "in"), str(tmp_path / "out"), dataset=True)
    rows = output_rows(spark, tmp_path / "out")

    assert rows["pdf"].body_kind == "binary" and bytes(rows["pdf"].body_binary) == pdf
    assert rows["pdf"].body_json is None and rows["pdf"].body_text is None
    assert rows["empty"].body_kind == rows["null"].body_kind == "empty"
    assert summary["body_kinds"] == {"json": 0, "text": 0, "binary": 1, "empty": 2}


def test_duplicates_are_removed(spark: Any, tmp_path: Path) -> None:
    """At-least-once input: a batch delivered again (same Ids) counts once; the first receipt is kept."""
    first = [row(nsb_headers(f"m{i}"), b'{"n": %d}' % i, seq=i, received_at=BASE + timedelta(seconds=1))
             for i in range(10)]
    again = [{**r, "received_at": BASE + timedelta(seconds=30)} for r in first[:4]]
    write_batch(tmp_path / "in", first)
    write_batch(tmp_path / "in", again)

    summary = run(spark, str(tmp_path / "in"), str(tmp_path / "out"), dataset=True)
    rows = output_rows(spark, tmp_path / "out")

    assert len(rows) == 10 and summary["messages"] == 10
    assert (summary["input_rows"], summary["duplicates_removed"]) == (14, 4)
    assert [rows[f"m{i}"].deliveries for i in range(10)] == [2] * 4 + [1] * 6
    assert all(r.received_at.replace(tzinfo=timezone.utc) == BASE + timedelta(seconds=1) for r in rows.values())


def test_output_is_partitioned_by_type_and_utc_date(spark: Any, tmp_path: Path) -> None:
    late = datetime(2024, 3, 1, 23, 30, tzinfo=timezone.utc)  # still March 1st in UTC, March 2nd in Tokyo
    write_batch(tmp_path / "in", [
        row(nsb_headers("a", sent=late), b"{}", received_at=late + timedelta(seconds=1)),
        row(nsb_headers("b", sent=late + timedelta(hours=1)), b"{}", received_at=late + timedelta(hours=1)),
        row(nsb_headers("c", sent=late, types="Billing.OrderBilled, Billing"), b"{}", received_at=late),
    ])
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "Asia/Tokyo")
    try:
        run(spark, [str(tmp_path / "in")], str(tmp_path / "out"), dataset=True)
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)

    folders = {str(p.parent.relative_to(tmp_path / "out" / "messages"))
               for p in (tmp_path / "out" / "messages").rglob("*.parquet")}
    assert folders == {f"message_type={PLACED}/date=2024-03-01", f"message_type={PLACED}/date=2024-03-02",
                       "message_type=Billing.OrderBilled/date=2024-03-01"}
    placed = pq.read_table(tmp_path / "out" / "messages" / f"message_type={PLACED}" / "date=2024-03-01")
    assert placed.column("message_id").to_pylist() == ["a"]


def test_summary_counts_and_latency(spark: Any, tmp_path: Path) -> None:
    rows = [row(nsb_headers(f"p{i}", sent=BASE - timedelta(seconds=i)), b"{}", seq=i) for i in range(1, 21)]
    rows += [row(nsb_headers(f"b{i}", sent=BASE - timedelta(milliseconds=100), types="Billing.OrderBilled"), b"{}",
                 seq=100 + i) for i in range(5)]
    write_batch(tmp_path / "in", rows[:12])
    write_batch(tmp_path / "in", rows[12:])

    summary = run(spark, str(tmp_path / "in"), str(tmp_path / "out"), dataset=True)

    assert read_summary(str(tmp_path / "out")) == {k: v for k, v in summary.items() if k != "summary_file"}
    assert (summary["messages"], summary["input_rows"], summary["duplicates_removed"]) == (25, 25, 0)
    assert list(summary["types"]) == [PLACED, "Billing.OrderBilled"]  # most messages first
    placed = summary["types"][PLACED]
    assert placed["count"] == 20
    assert placed["latency_ms"] == {"min": 1000.0, "avg": 10500.0, "p50": 10000.0, "p95": 19000.0, "max": 20000.0}
    assert summary["types"]["Billing.OrderBilled"] == {
        "count": 5, "latency_ms": {"min": 100.0, "avg": 100.0, "p50": 100.0, "p95": 100.0, "max": 100.0}}
    assert summary["latency_ms"]["min"] == 100.0 and summary["latency_ms"]["max"] == 20000.0
    assert summary["dates"] == ["2024-03-01"]


def test_no_batches_gives_an_empty_result(spark: Any, tmp_path: Path) -> None:
    summary = run(spark, [], str(tmp_path / "out"), dataset=True)
    assert (summary["messages"], summary["input_rows"], summary["types"]) == (0, 0, {})
    assert (tmp_path / "out" / "messages" / "_SUCCESS").exists()
    assert not list((tmp_path / "out" / "messages").rglob("*.parquet"))


def test_bad_write_mode_is_refused(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="mode must be one of overwrite, append, error"):
        run(spark, [], str(tmp_path / "out"), mode="replace")
    assert not (tmp_path / "out").exists()


# -- the summary without the dataset, from a drain's own files ------------------------------------------
def test_summary_from_a_drains_parquet_files_counts_every_message(spark: Any, tmp_path: Path) -> None:
    """A real drain (SQLite queue -> ``ParquetBatchWriter`` files, one per batch) then the job without the dataset:
    every message counted per type, endpoint and date, a duplicate batch counted once, no bodies written."""
    from airflow_sqlqueue.operators.parquet import ParquetBatchWriter
    from airflow_sqlqueue.transport import OutgoingMessage, SqlQueueTransport

    sent = {PLACED: 23, "Billing.OrderBilled": 11, "Shipping.ShipOrder": 7}
    endpoints = {PLACED: "Sales", "Billing.OrderBilled": "Billing", "Shipping.ShipOrder": "Sales"}
    writer = ParquetBatchWriter(str(tmp_path / "batches"))
    files: list[str] = []
    with SqlQueueTransport.from_url(f"sqlite:///{tmp_path / 'queues.db'}") as transport:
        transport.create_queue("audit")
        transport.send_many("audit", [
            OutgoingMessage(body=b'{"n": 1}', headers=nsb_headers(types=f"{name}, Asm", **{
                h.ORIGINATING_ENDPOINT: endpoints[name]})) for name, n in sent.items() for _ in range(n)])
        delivered = transport.drain("audit", lambda batch: len(
            files.append(writer.write(batch, f"b-{uuid.uuid4().hex}.parquet")) or batch), batch_size=10).delivered
    assert delivered == 41 and len(files) == 5
    # a batch stored twice (a crash between its file and its commit): the same Ids again
    duplicate = tmp_path / "batches" / "again.parquet"
    duplicate.write_bytes(Path(files[0]).read_bytes())

    summary = run(spark, [str(tmp_path / "batches")], str(tmp_path / "out"))

    assert (summary["input_rows"], summary["messages"], summary["duplicates_removed"]) == (51, 41, 10)
    assert {name: t["count"] for name, t in summary["types"].items()} == sent
    assert summary["endpoints"] == {"Sales": 30, "Billing": 11}
    assert summary["per_date"] == {"2024-03-01": 41} and summary["dates"] == ["2024-03-01"]
    assert summary["without_time_sent"] == 0 and summary["latency_ms"]["min"] > 0
    assert summary["output"] is None and summary["body_kinds"] is None
    assert {**read_summary(str(tmp_path / "out")), "summary_file": summary["summary_file"]} == summary
    assert not (tmp_path / "out" / "messages").exists()


def test_settings_derive_partitions_from_the_input(spark: Any, tmp_path: Path) -> None:
    """No fixed shuffle partition count anywhere: not in the session or submit settings; per run it follows the
    input size, adaptive execution is on, and the session's own value comes back after the run."""
    from airflow_sqlqueue.spark import settings
    from airflow_sqlqueue.spark.submit import spark_submit_arguments

    assert "spark.sql.shuffle.partitions" not in settings.SESSION_CONF
    assert "spark.sql.shuffle.partitions" not in spark_submit_arguments("in", "out")["conf"]
    assert spark.conf.get("spark.sql.adaptive.enabled") == "true"
    small, large = settings.InputSize(10, 1_000_000), settings.InputSize(20_000, 2_000_000_000)
    assert int(settings.run_conf(small, 2, dataset=False)["spark.sql.shuffle.partitions"]) == 2  # one per core
    assert int(settings.run_conf(large, 2, dataset=True)["spark.sql.shuffle.partitions"]) > 200
    assert settings.run_conf(large, 2, dataset=True)["spark.sql.files.openCostInBytes"] == str(100_000)
    assert settings.run_conf(None, 2, dataset=True) == {}  # remote input: Spark's own, merged by AQE
    assert settings.driver_memory(large, dataset=False) == "1024m"
    assert settings.driver_memory(large, dataset=True) == "4839m"  # 1 GB + 2 bytes per input byte
    assert settings.driver_memory(settings.InputSize(1, 10**10), dataset=True) == "8192m"  # at most

    before = spark.conf.get("spark.sql.shuffle.partitions")
    write_batch(tmp_path / "in", [row(nsb_headers(), b"{}")])
    seen: dict[str, str] = {}
    with pytest.MonkeyPatch.context() as patch:
        original = settings.run_conf
        patch.setattr(settings, "run_conf", lambda *a, **k: seen.update(original(*a, **k)) or seen)
        assert run(spark, [str(tmp_path / "in")], str(tmp_path / "out"))["messages"] == 1
    assert seen["spark.sql.shuffle.partitions"] == "2"
    assert spark.conf.get("spark.sql.shuffle.partitions") == before


# -- spark-submit --------------------------------------------------------------------------------------
def test_spark_submit_operator_runs_the_job(airflow_db: None, tmp_path: Path,  # noqa: F811
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The example DAG's cluster form in ``dag.test()``: sensor -> drain -> ``SparkSubmitOperator`` on a
    ``local[2]`` Spark connection -> summary, on a SQLite queue with poison rows."""
    from airflow_sqlqueue.demo import messages as demo_messages
    from airflow_sqlqueue.transport import OutgoingMessage, SqlQueueTransport

    database = tmp_path / "queues.db"
    with SqlQueueTransport.from_url(f"sqlite:///{database}") as transport:
        transport.create_queues(["audit", "error"])
        transport.send_many("audit", [OutgoingMessage(body=b'{"n": 1}', headers=nsb_headers(f"p{i}"))
                                      for i in range(25)])
        demo_messages.insert_poison(transport, "audit", 2, demo_messages.Traffic())
        transport.send_many("audit", [OutgoingMessage(body=b"\xff\xfe\x00", headers=nsb_headers(
            f"b{i}", types="Billing.OrderBilled", **{h.CONTENT_TYPE: "application/octet-stream"})) for i in range(15)])
    airflow_env.sqlite_connection("sqlqueue_spark_q", database)
    airflow_env.set_connection("sqlqueue_spark_test", {"conn_type": "spark", "host": "local[2]"})
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)

    dag = airflow_env.load_dag("sqlqueue_spark_submit", "sqlqueue_spark_submit.py")
    dag_run = dag.test(run_conf={"conn_id": "sqlqueue_spark_q", "queue": "audit", "output": str(tmp_path / "out"),
                                 "batch_size": 7, "max_concurrency": 2})

    assert str(dag_run.state) == "success", airflow_env.task_states(dag_run)
    summary = airflow_env.xcom_value(dag_run, "summary")
    assert (summary["messages"], summary["duplicates_removed"]) == (40, 0)
    assert {name: t["count"] for name, t in summary["types"].items()} == {PLACED: 25, "Billing.OrderBilled": 15}
    assert summary["body_kinds"] == {"json": 25, "text": 0, "binary": 15, "empty": 0}
    assert (summary["queue_depth"], summary["error_queue_depth"]) == (0, 2)
    assert len(airflow_env.xcom_value(dag_run, "drain")) == 6  # 42 rows in batches of 7
    assert airflow_env.xcom_value(dag_run, "drain", key="drain_summary")["poison"] == 2
    messages = Path(summary["output"])
    assert {p.parent.name for p in messages.rglob("*.parquet")} == {"date=2024-03-01"}
    assert {p.parent.parent.name for p in messages.rglob("*.parquet")} == {
        f"message_type={PLACED}", "message_type=Billing.OrderBilled"}


# -- the demo ------------------------------------------------------------------------------------------
def _demo(cwd: Path, output: Path, messages: int, env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "airflow_sqlqueue.cli", "demo", "--output", str(output),
                           "--messages", str(messages), "--json"], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=280, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_demo_end_to_end_adds_up_and_runs_twice(tmp_path: Path) -> None:
    """``sqlqueue demo`` in a clean directory: every message counted, files in place, nothing left elsewhere."""
    cwd, home, tmp = tmp_path / "cwd", tmp_path / "home", tmp_path / "tmp"
    for folder in (cwd, home, tmp):
        folder.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update({"HOME": str(home), "TMPDIR": str(tmp), "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    output = cwd / "demo-output"

    report = _demo(cwd, output, 1000, env)

    assert report["adds_up"] is True
    assert (report["sent"], report["processed"], report["expired"], report["error_queue"],
            report["left_in_queue"]) == (1000, 940, 50, 10, 0)
    assert sum(t["sent"] for t in report["per_type"].values()) + report["sent_detail"]["poison"] == 1000
    assert sum(t["processed"] for t in report["per_type"].values()) == 940
    assert report["per_type"]["Sales.Messages.Events.PriceQuoted"] == {"sent": 50, "processed": 0,
                                                                       "latency_ms": None}
    assert report["dag_run"]["state"] == "success" and report["findings"] == []
    messages = Path(report["files"]["messages"])
    assert sorted(p.name.split("=")[0] for p in messages.iterdir() if p.is_dir()) == ["message_type"] * 4
    assert all(p.name.startswith("date=") for p in messages.glob("message_type=*/*"))
    assert report["files"]["batch_files"] == len(list(Path(report["files"]["batches"]).glob("*.parquet"))) >= 2
    assert json.loads(Path(report["files"]["summary"]).read_text())["messages"] == 940
    assert sorted(p.name for p in output.iterdir()) == ["airflow-home", "demo.log", "queues.db", "report.json",
                                                        "runs"]
    assert sorted(p.name for p in cwd.iterdir()) == ["demo-output"]  # no spark-warehouse/, metastore_db/
    assert list(home.iterdir()) == [] and list(tmp.iterdir()) == []  # no ~/airflow, no stray temp dirs

    again = _demo(cwd, output, 200, env)  # the same folder again: starts from scratch
    assert again["adds_up"] is True and (again["sent"], again["processed"]) == (200, 188)
    assert len(list((output / "runs").iterdir())) == 1


def test_demo_refuses_too_few_messages_and_changes_nothing(tmp_path: Path) -> None:
    from airflow_sqlqueue.demo import run_demo

    with pytest.raises(ValueError, match="--messages must be an integer of at least 10, got 5"):
        run_demo(tmp_path / "demo-output", messages=5)
    assert list(tmp_path.iterdir()) == []
