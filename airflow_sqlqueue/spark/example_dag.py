"""The example DAGs "drain to Spark" (shown in ``example_dags/example_drain_to_spark.py``, run by ``sqlqueue demo``).

They live in the package so that an installed copy can run them; a DAGs folder only needs
``from airflow_sqlqueue.spark.example_dag import drain_to_spark_dag`` and ``dag = drain_to_spark_dag()``.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from datetime import datetime
from typing import Any

from airflow.sdk import DAG, Param, task

from airflow_sqlqueue.operators.sqlqueue import SqlQueueDrainOperator
from airflow_sqlqueue.sensors.sqlqueue import SqlQueueSensor

DEFAULT_CONN_ID = os.environ.get("SQLQUEUE_EXAMPLE_CONN_ID", "sqlqueue_default")
DEFAULT_QUEUE = os.environ.get("SQLQUEUE_EXAMPLE_QUEUE", "audit")
DEFAULT_OUTPUT = os.environ.get("SQLQUEUE_SPARK_OUTPUT", os.path.join(tempfile.gettempdir(), "sqlqueue-spark"))
DEFAULT_SPARK_CONN_ID = os.environ.get("SQLQUEUE_SPARK_CONN_ID", "spark_default")

DOC = """
### Drain a queue to Parquet, process it with Spark

1. `wait` (`SqlQueueSensor`, deferrable) succeeds once the queue holds `min_messages` messages.
2. `prepare` creates the run's folder `<output>/<run>/batches/`.
3. `drain` (`SqlQueueDrainOperator`) receives up to `max_messages` (empty: until the queue is empty) with at
   most `max_concurrency` receivers, `batch_size` messages per transaction. Each batch is written to
   `<output>/<run>/batches/` as a Parquet file, fsync'ed, *before* its receive commits: nothing is lost, and a
   message seen twice after a crash keeps its Id. Expired messages are dropped, poison ones go to `error_queue`.
4. `spark` runs the job of `airflow_sqlqueue.spark.job`: `<output>/<run>/results/summary.json` (counts per
   type, endpoint and date, latency) and, with `dataset` (default on), NServiceBus headers as typed columns,
   JSON bodies parsed, duplicates removed, written to `<output>/<run>/results/messages/message_type=.../date=.../`.
   This DAG runs Spark in the worker (`spark_master`, default `local[*]`);
   `example_sqlqueue_drain_to_spark_submit` sends the same job to a cluster with `SparkSubmitOperator`.
5. `summary` logs counts per message type, latency (time sent -> drained) and the depth left in both queues.

**Configure** with the params when triggering (defaults: the environment variables `SQLQUEUE_EXAMPLE_CONN_ID`,
`SQLQUEUE_EXAMPLE_QUEUE`, `SQLQUEUE_SPARK_OUTPUT`). The connection is any `mssql`, `odbc`, `postgres` or
`sqlite` connection. See docs/spark.md.
"""

SUBMIT_DOC = DOC.replace("### Drain a queue to Parquet, process it with Spark",
                         "### Drain a queue to Parquet, process it with spark-submit") + """
**This DAG** submits the job with `SparkSubmitOperator` on the Spark connection `SQLQUEUE_SPARK_CONN_ID`
(default `spark_default`; its host is the master: `local[*]`, `spark://host:7077`, `yarn`, `k8s://...`).
Without that connection Airflow targets `yarn`. `spark-submit` must be on the worker's PATH (pip's `pyspark`
installs it). `<output>` must be readable by the cluster (a shared or object-store path).
"""


def run_folder(params: dict[str, Any], run_id: str) -> str:
    """``<output>/<run id made safe for file names>``: the folder of one run's batches and results."""
    return f"{str(params['output']).rstrip('/')}/{re.sub(r'[^A-Za-z0-9_.-]+', '_', run_id).strip('._')}"


def drain_to_spark_params() -> dict[str, Param]:
    """The params of both example DAGs."""
    return {
        "conn_id": Param(DEFAULT_CONN_ID, type="string", minLength=1, title="Queue connection",
                         description="An mssql, odbc, postgres or sqlite Airflow connection."),
        "queue": Param(DEFAULT_QUEUE, type="string", minLength=1, title="Queue"),
        "error_queue": Param("error", type="string", minLength=1, title="Error queue"),
        "output": Param(DEFAULT_OUTPUT, type="string", minLength=1, title="Output folder",
                        description="Batches and results go to <output>/<run>/ (a path the worker can write)."),
        "min_messages": Param(1, type="integer", minimum=1, title="Wait for at least this many messages"),
        "max_messages": Param(None, type=["null", "integer"], minimum=1, title="Drain at most",
                              description="Empty: until the queue is empty."),
        "max_concurrency": Param(2, type="integer", minimum=1, maximum=32, title="Receivers at once"),
        "batch_size": Param(500, type="integer", minimum=1, title="Messages per receive transaction"),
        "spark_master": Param("local[*]", type="string", minLength=1, title="Spark master (in-process DAG)"),
        "dataset": Param(True, type="boolean", title="Write the typed messages",
                         description="Also write the typed, deduplicated messages (bodies decoded) partitioned by "
                                     "type and date; off: the summary only (reads no bodies, much faster)."),
    }


@task
def prepare(params: dict[str, Any] | None = None, run_id: str | None = None) -> str:
    """Create ``<output>/<run>/batches`` (the Spark step reads it even when nothing was drained); return it."""
    batches = f"{run_folder(params, run_id)}/batches"
    if "://" not in batches:
        os.makedirs(batches, exist_ok=True)
    return batches


@task
def spark(files: list[str], params: dict[str, Any] | None = None, run_id: str | None = None) -> dict[str, Any]:
    """Run the Spark job in this worker on the files the drain wrote; return its summary."""
    from airflow_sqlqueue.spark.job import run
    from airflow_sqlqueue.spark.session import spark_session
    from airflow_sqlqueue.spark.settings import driver_memory, input_size

    dataset = bool(params.get("dataset", True))
    memory = driver_memory(input_size(files), dataset=dataset)  # used when this task starts the JVM
    with spark_session(params["spark_master"], "sqlqueue-drain-to-spark", driver_memory=memory) as session:
        return run(session, files, f"{run_folder(params, run_id)}/results", dataset=dataset)


@task
def read_results(params: dict[str, Any] | None = None, run_id: str | None = None) -> dict[str, Any]:
    """The summary the submitted job wrote (``<output>/<run>/results/summary.json``, local or object storage)."""
    from airflow_sqlqueue.spark.summary import is_local, read_summary

    results = f"{run_folder(params, run_id)}/results"
    if is_local(results):
        return read_summary(results)
    from airflow.sdk import ObjectStoragePath  # a remote output: a one-line text dataset

    part = next(p for p in (ObjectStoragePath(results) / "summary.json").iterdir() if p.name.startswith("part-"))
    return json.loads(part.read_text())


@task
def summary(result: dict[str, Any], params: dict[str, Any] | None = None) -> dict[str, Any]:
    """Log counts per type, latency and the depth left in the queue and the error queue; return it all."""
    from airflow_sqlqueue.hooks.sqlqueue import SqlQueueHook
    from airflow_sqlqueue.maintenance.tasks import format_table

    hook = SqlQueueHook(params["conn_id"], error_queue=params["error_queue"])
    try:
        depth = {"queue_depth": hook.transport.peek(params["queue"]),
                 "error_queue_depth": hook.transport.peek(params["error_queue"])}
    finally:
        hook.close()
    rows = [{"message_type": name, "count": t["count"], **{f"{k}_ms": v for k, v in t["latency_ms"].items()}}
            for name, t in result["types"].items()]
    print(f"{result['messages']} messages ({result['duplicates_removed']} duplicates removed) in {result['output']}")
    print(format_table(rows, ("message_type", "count", "min_ms", "avg_ms", "p50_ms", "p95_ms", "max_ms")))
    print(f"left in {params['queue']}: {depth['queue_depth']}; in {params['error_queue']}: "
          f"{depth['error_queue_depth']}")
    return {**result, **depth}


def _wait_and_drain() -> Any:
    """``wait >> prepare >> drain``, inside the current DAG; returns the drain."""
    wait = SqlQueueSensor(task_id="wait", sqlqueue_conn_id="{{ params.conn_id }}", queue_name="{{ params.queue }}",
                          min_messages="{{ params.min_messages }}", deferrable=True, poll_interval=2,
                          timeout=3600)
    drain = SqlQueueDrainOperator(
        task_id="drain", sqlqueue_conn_id="{{ params.conn_id }}", queue_name="{{ params.queue }}",
        error_queue="{{ params.error_queue }}", output_path="{{ ti.xcom_pull(task_ids='prepare') }}",
        max_messages="{{ params.max_messages }}", max_concurrency="{{ params.max_concurrency }}",
        batch_size="{{ params.batch_size }}")
    wait >> prepare() >> drain
    return drain


def drain_to_spark_dag(dag_id: str = "example_sqlqueue_drain_to_spark", **dag_args: Any) -> DAG:
    """sensor -> drain to Parquet -> Spark in the worker -> summary."""
    with DAG(dag_id, schedule=dag_args.pop("schedule", None), start_date=datetime(2024, 1, 1), catchup=False,
             max_active_runs=1, tags=["sqlqueue", "example", "spark"], doc_md=DOC, params=drain_to_spark_params(),
             **dag_args) as dag:
        drain = _wait_and_drain()
        summary(spark(drain.output))
    return dag


def drain_to_spark_submit_dag(dag_id: str = "example_sqlqueue_drain_to_spark_submit",
                              spark_conn_id: str = DEFAULT_SPARK_CONN_ID, spark_conf: dict[str, Any] | None = None,
                              **dag_args: Any) -> DAG:
    """sensor -> drain to Parquet -> ``SparkSubmitOperator`` (any master) -> summary.

    ``spark_conf`` is added to the job's Spark settings (executor memory and cores on a cluster, say).
    """
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from airflow_sqlqueue.spark.submit import spark_submit_arguments

    folder = "{{ run_folder(params, run_id) }}"
    with DAG(dag_id, schedule=dag_args.pop("schedule", None), start_date=datetime(2024, 1, 1), catchup=False,
             max_active_runs=1, tags=["sqlqueue", "example", "spark"], doc_md=SUBMIT_DOC,
             params=drain_to_spark_params(), user_defined_macros={"run_folder": run_folder}, **dag_args) as dag:
        drain = _wait_and_drain()
        submit = SparkSubmitOperator(task_id="spark", **spark_submit_arguments(
            f"{folder}/batches", f"{folder}/results", conn_id=spark_conn_id, conf=spark_conf,
            dataset="{{ params.dataset }}"))
        results = read_results()
        drain >> submit >> results
        summary(results)
    return dag
