"""The Spark job on a real Spark standalone cluster (a master and two workers on loopback), from real DAG runs:
``SparkSubmitOperator`` in client deploy mode to ``spark://127.0.0.1:<port>``, and ``PySparkOperator`` through a
Spark Connect server whose executors run on the same cluster. Both results are identical, row for row and in
their summary, to a ``local[2]`` run of the same job on the same drained batches.

Marked ``spark_cluster`` (15.5 minutes measured on 2 cores shared with other test runs, most of it JVM start-ups):
run alone with ``pytest -m spark_cluster``, leave out with ``-m "not spark_cluster"``. The cluster is started
by tests/spark_cluster.py and stopped by PID at the end.
"""

from __future__ import annotations  # noqa: I001  (tests.airflow_env must be imported before airflow)

import tests.airflow_env as airflow_env
from tests.airflow_env import airflow_db  # noqa: F401  (fixture)

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_sqlqueue.transport import OutgoingMessage, SqlQueueTransport
from airflow_sqlqueue.transport.wire import headers as h
from tests.spark_cluster import SparkCluster, spark_env
from tests.test_spark import PLACED, nsb_headers

#: JVM start-ups on 2 shared cores: 15.5 min seen under heavy load (the default timeout is 5 min).
pytestmark = [pytest.mark.spark_cluster, pytest.mark.timeout(1500)]
DAG_FILE = "sqlqueue_spark_cluster.py"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """A master and two workers (two cores each: room for the submitted job and the Connect server at once)."""
    running = SparkCluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        yield running.start(workers=2, cores=2, memory="1g")
    finally:
        running.stop()


def _queue_with_traffic(database: Path) -> set[str]:
    """A SQLite queue of JSON, binary and poison messages; returns the Ids of the deliverable ones."""
    from airflow_sqlqueue.demo import messages as demo_messages

    with SqlQueueTransport.from_url(f"sqlite:///{database}") as transport:
        transport.create_queues(["audit", "error"])
        sent = transport.send_many("audit", [OutgoingMessage(
            body=json.dumps({"OrderId": f"ORD-{i}", "Amount": i * 1.5}).encode(),
            headers=nsb_headers(f"p{i}")) for i in range(300)])
        demo_messages.insert_poison(transport, "audit", 3, demo_messages.Traffic())
        sent += transport.send_many("audit", [OutgoingMessage(body=bytes([255, 254, i % 256]), headers=nsb_headers(
            f"b{i}", types="Billing.OrderBilled", **{h.CONTENT_TYPE: "application/octet-stream"}))
            for i in range(120)])
    return {str(i) for i in sent}


def _forget_local_master() -> None:
    """An earlier local session of this test process (tests/test_spark.py) launched the Py4J gateway JVM with
    ``--master local[2]``, which stays a JVM system property: a later ``SparkConf()`` (the PySparkOperator's) would
    read it and Spark Connect refuses a master. A real worker process starts clean; clear it here."""
    from pyspark import SparkContext

    jvm = SparkContext._jvm
    if jvm is not None:
        jvm.java.lang.System.clearProperty("spark.master")


@pytest.mark.smoke  # the default run keeps this one test of the suite
def test_job_on_a_standalone_cluster_and_spark_connect_matches_local(
        airflow_db, cluster: SparkCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    # the Connect server starts while the first DAG runs (its executors take the workers' second cores)
    connect = start_connect_in_background(cluster)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")  # spark-submit
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")  # the client-mode driver listens on loopback only
    monkeypatch.delenv("SPARK_CONNECT_MODE_ENABLED", raising=False)  # restored after the Connect session
    _forget_local_master()
    database = tmp_path / "queues.db"
    delivered = _queue_with_traffic(database)
    airflow_env.sqlite_connection("sqlqueue_spark_cluster_q", database)
    airflow_env.set_connection("sqlqueue_spark_cluster", {
        "conn_type": "spark", "host": "spark://127.0.0.1", "port": cluster.master_port,
        "extra": json.dumps({"deploy-mode": "client"})})

    # 1. drain -> SparkSubmitOperator on spark://127.0.0.1:<port>
    dag = airflow_env.load_dag("sqlqueue_spark_cluster", DAG_FILE)
    submitted = dag.test(run_conf={"conn_id": "sqlqueue_spark_cluster_q", "queue": "audit",
                                   "output": str(tmp_path / "out"), "batch_size": 50, "max_concurrency": 2})
    assert str(submitted.state) == "success", airflow_env.task_states(submitted)
    summary = airflow_env.xcom_value(submitted, "summary")
    assert (summary["messages"], summary["duplicates_removed"]) == (420, 0)
    assert {name: t["count"] for name, t in summary["types"].items()} == {PLACED: 300, "Billing.OrderBilled": 120}
    assert (summary["queue_depth"], summary["error_queue_depth"]) == (0, 3)
    assert cluster.work_dirs_with_executors() == ["worker-0", "worker-1"]  # executors ran on both workers
    assert "sqlqueue-drained-messages" in cluster.log("master")  # the application the operator submitted
    run_folder = Path(summary["output"]).parent.parent
    batches, cluster_results = run_folder / "batches", run_folder / "results"
    assert len(list(batches.glob("*.parquet"))) == 9  # 423 rows in batches of 50 (3 poison rows: error queue)

    # 2. the same batches through PySparkOperator and Spark Connect (executors on the same cluster)
    connect.wait()
    airflow_env.set_connection("sqlqueue_spark_connect", {"conn_type": "spark_connect", "host": "127.0.0.1",
                                                          "port": cluster.connect_port})
    connect_results = tmp_path / "connect-results"
    connect_dag = airflow_env.load_dag("sqlqueue_spark_connect", DAG_FILE)
    through_connect = connect_dag.test(run_conf={"batches": str(batches), "output": str(connect_results)})
    assert str(through_connect.state) == "success", airflow_env.task_states(through_connect)
    assert airflow_env.xcom_value(through_connect, "spark")["messages"] == 420
    monkeypatch.delenv("SPARK_CONNECT_MODE_ENABLED", raising=False)  # set by the Connect session: not for local runs

    # 3. the local[2] run of the same job on the same batches: both results identical to it
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "spark_compare.py"), str(batches),
                           str(tmp_path / "reference"), str(cluster_results), str(connect_results)],
                          env={**spark_env(), "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.split("COMPARE ", 1)[1])
    assert report["reference_rows"] == 420 and set(report["reference_ids"]) == delivered  # every message, by Id
    for results in (cluster_results, connect_results):
        assert report[str(results)]["rows_identical"], report[str(results)]
        assert report[str(results)]["summary_identical"], report[str(results)]
    lost = len(delivered - set(report["reference_ids"]))
    print(f"figures: spark workers=2 messages={len(delivered)} faults=0 lost={lost} duplicates=0 "
          "(submit and connect identical to local[2])")


class _Background:
    """Something started in a thread, waited for later (re-raises its error)."""

    def __init__(self, work) -> None:
        import threading

        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(work,), daemon=True)
        self.thread.start()

    def _run(self, work) -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - re-raised by wait()
            self.error = exc

    def wait(self) -> None:
        self.thread.join()
        if self.error is not None:
            raise self.error


def start_connect_in_background(cluster: SparkCluster) -> _Background:
    """Start the cluster's Spark Connect server in the background (its executors: one core on each worker)."""
    return _Background(lambda: cluster.start_connect({"spark.executor.memory": "512m", "spark.executor.cores": "1",
                                                      "spark.cores.max": "2", "spark.sql.shuffle.partitions": "4",
                                                      "spark.sql.session.timeZone": "UTC"}))
