"""``sqlqueue demo``: the whole mission on a SQLite file, timed phase by phase, counted message by message.

Phases: provision queues; send NServiceBus-shaped messages (some short-lived, some poison); the maintenance
purge of expired messages; the example DAG ``example_sqlqueue_drain_to_spark`` with ``dag.test()`` (sensor ->
drain with bounded concurrency -> Spark -> summary) in a child process with a throw-away ``AIRFLOW_HOME``
inside the output folder; the schema and index check; then every message is accounted for.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow_sqlqueue.extras import require
from airflow_sqlqueue.transport import SqlQueueTransport

from . import messages as m

QUEUE = "audit"
ERROR_QUEUE = "error"
CONN_ID = "sqlqueue_demo"
DAG_ID = "example_sqlqueue_drain_to_spark"
MIN_MESSAGES = 10
#: What the demo owns in its output folder (removed at the start of a run, so running twice works).
OWNED = ("queues.db", "queues.db-journal", "airflow-home", "runs", "demo.log", "tmp", "report.json")
DAG_SHIM = '''"""The example DAG of airflow-sqlqueue, put here by `sqlqueue demo` (the code lives in the package)."""
from airflow_sqlqueue.spark.example_dag import drain_to_spark_dag

dag = drain_to_spark_dag()
'''
CHILD_TIMEOUT = 600


class _Clock:
    """Seconds per phase."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}
        self.started = time.monotonic()
        self._mark = self.started

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.phases[name] = round(now - self._mark, 3)
        self._mark = now

    @property
    def total(self) -> float:
        return round(time.monotonic() - self.started, 3)


def _prepare(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name in OWNED:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def _count_rows(transport: SqlQueueTransport, queue: str, page: int = 5000) -> int:
    """Exact number of rows in a queue (paged reads that take nothing)."""
    total, after = 0, 0
    while True:
        rows = transport.browse(queue, after_seq=after, limit=page)
        total += len(rows)
        if len(rows) < page:
            return total
        after = rows[-1].seq


def _child_env(out: Path, database: Path) -> dict[str, str]:
    """This environment without any Airflow setting, plus the demo's own (home, DAGs, connection, temp dirs)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    home = out / "airflow-home"
    tmp = out / "tmp"
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps([{
            "name": "dags-folder", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
            "kwargs": {}}]),
        f"AIRFLOW_CONN_{CONN_ID.upper()}": json.dumps({"conn_type": "sqlite", "host": str(database)}),
        "TMPDIR": str(tmp),
        "SPARK_LOCAL_DIRS": str(tmp / "spark"),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    })
    return env


def _run_dag(out: Path, database: Path, conf: dict[str, Any]) -> dict[str, Any]:
    """Run the example DAG with ``dag.test()`` in a child process; its log goes to ``<out>/demo.log``."""
    home = out / "airflow-home"
    (home / "dags").mkdir(parents=True)
    (out / "tmp" / "spark").mkdir(parents=True)
    dag_file = home / "dags" / "example_drain_to_spark.py"
    dag_file.write_text(DAG_SHIM, encoding="utf-8")
    spec = {"dag_file": str(dag_file), "dag_id": DAG_ID, "conf": conf, "result_file": str(out / "tmp" / "dag.json")}
    spec_file = out / "tmp" / "spec.json"
    spec_file.write_text(json.dumps(spec), encoding="utf-8")
    with open(out / "demo.log", "wb") as log:
        code = subprocess.run([sys.executable, "-m", "airflow_sqlqueue.demo.dag_run", str(spec_file)],
                              env=_child_env(out, database), cwd=out, stdout=log, stderr=subprocess.STDOUT,
                              timeout=CHILD_TIMEOUT, check=False).returncode
    result_file = Path(spec["result_file"])
    if code != 0 or not result_file.exists():
        state = json.loads(result_file.read_text())["state"] if result_file.exists() else f"exit code {code}"
        raise RuntimeError(f"the example DAG run failed ({state}); see {out / 'demo.log'}")
    return json.loads(result_file.read_text(encoding="utf-8"))


def _parquet_rows(folder: Path) -> int:
    """Rows in the Parquet files under ``folder`` (counted from the files, not from Spark's summary)."""
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(p).metadata.num_rows for p in folder.rglob("*.parquet"))


def run_demo(output_dir: str | os.PathLike[str] = "demo-output", *, messages: int = 10_000, seed: int = 7,
             progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the demo in ``output_dir`` (made if missing; only the demo's own entries are replaced).

    Returns the report: what was sent, processed, expired, moved to the error queue and left, per type, the
    throughput and time of each phase, and where the files are. ``adds_up`` says whether
    ``sent == processed + expired + error_queue + left_in_queue``. ``progress`` gets a line as each phase starts.
    """
    say = progress or (lambda text: None)
    if isinstance(messages, bool) or not isinstance(messages, int) or messages < MIN_MESSAGES:
        raise ValueError(f"--messages must be an integer of at least {MIN_MESSAGES}, got {messages!r}")
    require("pyspark", "the demo (it runs the Spark job)")
    require("pyarrow", "the demo (it drains to Parquet)")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise RuntimeError("the demo runs Spark, which needs Java 17 or later: install it (e.g. apt-get install "
                           "openjdk-17-jre-headless) or set JAVA_HOME")
    clock = _Clock()
    out = Path(output_dir).resolve()
    _prepare(out)
    database = out / "queues.db"
    runs = out / "runs"
    clock.lap("prepare")
    rng = random.Random(seed)
    traffic = m.Traffic()
    regular, expiring, poison = m.plan(messages)
    with SqlQueueTransport.from_url(f"sqlite:///{database}", error_queue=ERROR_QUEUE) as transport:
        say(f"provisioning queues {QUEUE} and {ERROR_QUEUE} in {database}")
        transport.create_queues([QUEUE, ERROR_QUEUE])
        clock.lap("provision")
        say(f"sending {messages:,} messages ({expiring:,} short-lived, {poison:,} poison)")
        m.send_expiring(transport, QUEUE, expiring, traffic, rng)
        expiring_sent = time.monotonic()
        m.send_regular(transport, QUEUE, regular // 2, traffic, rng)
        m.insert_poison(transport, QUEUE, poison, traffic)
        m.send_regular(transport, QUEUE, regular - regular // 2, traffic, rng, first_order=regular // 2)
        clock.lap("send")
        time.sleep(max(0.0, expiring_sent + m.EXPIRING_TTBR + 0.2 - time.monotonic()))
        clock.lap("wait_for_expiry")
        say("maintenance: purging expired messages")
        purged = transport.purge_expired(QUEUE)
        clock.lap("purge_expired")

        conf = {"conn_id": CONN_ID, "queue": QUEUE, "error_queue": ERROR_QUEUE, "output": str(runs),
                "min_messages": 1, "max_messages": None, "max_concurrency": 2, "batch_size": 500,
                "spark_master": "local[2]"}
        say(f"running {DAG_ID} with dag.test() (log: {out / 'demo.log'})")
        dag = _run_dag(out, database, conf)
        clock.phases["airflow_db"] = round(dag["phases"]["airflow_db"], 3)
        clock.lap("dag_run")
        clock.phases["dag_run"] = round(clock.phases["dag_run"] - clock.phases["airflow_db"], 3)

        say("maintenance: schema and index check; counting")
        findings = [{"queue": f.queue, "code": f.code, "message": f.message}
                    for q in (QUEUE, ERROR_QUEUE) for f in transport.check(q) if not f.not_checked]
        clock.lap("check")
        in_error = _count_rows(transport, ERROR_QUEUE)
        left = _count_rows(transport, QUEUE)
    summary = dag["summary"]
    run_dir = Path(summary["output"]).parent.parent  # <runs>/<run>/results/messages
    processed = _parquet_rows(Path(summary["output"]))
    shutil.rmtree(out / "tmp", ignore_errors=True)
    clock.lap("count")
    tasks = dag["tasks"]
    drain_seconds = sum(t["seconds"] for k, t in tasks.items() if k.startswith("drain["))
    spark_seconds = tasks.get("spark", {}).get("seconds", 0.0)
    report = {
        "output_dir": str(out),
        "database": str(database),
        "sent": traffic.total,
        "sent_detail": {"regular": traffic.regular, "expiring": traffic.expiring, "poison": traffic.poison,
                        "time_to_be_received_seconds": m.EXPIRING_TTBR},
        "processed": processed,
        "expired": purged,
        "error_queue": in_error,
        "left_in_queue": left,
        "duplicates_removed": summary["duplicates_removed"],
        "adds_up": traffic.total == processed + purged + in_error + left and processed == summary["messages"],
        "per_type": {name: {"sent": traffic.by_type.get(name, 0),
                            "processed": summary["types"].get(name, {}).get("count", 0),
                            "latency_ms": summary["types"].get(name, {}).get("latency_ms")}
                     for name in sorted(traffic.by_type, key=lambda n: (-traffic.by_type[n], n))},
        "latency_ms": summary["latency_ms"],
        "body_kinds": summary["body_kinds"],
        "findings": findings,
        "throughput_per_second": {
            "send": round(traffic.total / clock.phases["send"], 1) if clock.phases["send"] else None,
            "drain": round(summary["input_rows"] / drain_seconds, 1) if drain_seconds else None,
            "spark": round(summary["input_rows"] / spark_seconds, 1) if spark_seconds else None,
            "end_to_end": round(traffic.total / clock.total, 1),
        },
        "dag_run": {"dag_id": dag["dag_id"], "run_id": dag["run_id"], "state": dag["state"], "tasks": tasks},
        "phases_seconds": clock.phases,
        "total_seconds": clock.total,
        "files": {
            "queues": str(database),
            "batches": str(run_dir / "batches"),
            "batch_files": len(list((run_dir / "batches").glob("*.parquet"))),
            "messages": summary["output"],
            "summary": summary["summary_file"],
            "airflow_home": str(out / "airflow-home"),
            "log": str(out / "demo.log"),
            "report": str(out / "report.json"),
        },
    }
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report
