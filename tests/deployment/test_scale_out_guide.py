"""docs/scale-out.md followed step by step (issue 33): the page's settings, ``worker_name.py``, commands and DAGs on a
CeleryExecutor deployment with two workers, on Redis and on RabbitMQ (tests/deployment/guide.py reads the page).

* section 1: the mapped drain ``.expand(max_concurrency=[2] * 4)`` to Parquet runs on both workers (their names
  from the page's ``hostname_callable``) and stores every message once;
* section 2: the exactly-once handler (``transaction-scope``, ``context.cursor``) records every message once in
  the page's ``processed`` table;
* section 3: the partitioned drain plans several partitions and stores every message.
"""

from __future__ import annotations

import shlex
import uuid
from collections import Counter
from collections.abc import Iterator

import psycopg
import pyarrow.parquet as pq
import pytest

from airflow_sqlqueue.transport import OutgoingMessage, SqlQueueTransport
from tests.deployment import guide
from tests.deployment.harness import BIN, PG_SERVER, Deployment, wait_for

pytestmark = [pytest.mark.deployment, pytest.mark.timeout(1200)]

#: Section 1 gets enough for four mapped tasks to overlap on two workers; 3 gets three partitions of 2,000.
MESSAGES = {"s1": 20_000, "s2": 3_000, "s3": 6_000}


@pytest.fixture(scope="module", params=["redis", "rabbitmq"])
def deployed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    database = "sqg_" + uuid.uuid4().hex[:10]
    with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{database}"')
    url = f"{PG_SERVER}/{database}"
    root = tmp_path_factory.mktemp(f"guide-{request.param}")
    deployment = guide.deployment(root, request.param, url)
    deployment.queue_db = url  # type: ignore[attr-defined]
    try:
        with deployment:
            text = guide.page_text()
            create = next(line for line in guide.block(text, "bash", "sqlqueue create").splitlines()
                          if line.startswith("sqlqueue create"))
            deployment.run([str(BIN / "sqlqueue"), *shlex.split(create)[1:]])
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(guide.block(text, "sql", "CREATE TABLE processed"))
            deployment.wait_parsed([guide.DRAIN_DAG, guide.HANDLE_DAG, guide.PARTITION_DAG])
            for dag_id in (guide.DRAIN_DAG, guide.HANDLE_DAG, guide.PARTITION_DAG):
                deployment.set_paused(dag_id, False)
            yield deployment
    finally:
        with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def send(d: Deployment, tag: str) -> set[str]:
    bodies = [f"{tag}-{i}" for i in range(MESSAGES[tag[:2]])]
    with SqlQueueTransport.from_url(d.queue_db) as transport:  # type: ignore[attr-defined]
        for first in range(0, len(bodies), 1000):
            transport.send_many("audit", [OutgoingMessage(body=b) for b in bodies[first:first + 1000]])
    return set(bodies)


def run(d: Deployment, dag_id: str) -> str:
    run_id = "guide_" + uuid.uuid4().hex[:8]
    d.airflow("dags", "trigger", dag_id, "--run-id", run_id)
    wait_for(f"{dag_id} run {run_id} to finish", lambda: state(d, dag_id, run_id) in ("success", "failed"), 600,
             interval=1, hint=d.where_logs())
    assert state(d, dag_id, run_id) == "success", d.where_logs()
    return run_id


def state(d: Deployment, dag_id: str, run_id: str) -> str:
    d.check_running()
    rows = d.query("SELECT state FROM dag_run WHERE dag_id = %s AND run_id = %s", (dag_id, run_id))
    return rows[0][0] if rows else ""


def hosts(d: Deployment, dag_id: str, run_id: str, task_id: str) -> set[str]:
    rows = d.query("SELECT hostname FROM task_instance WHERE dag_id = %s AND run_id = %s AND task_id = %s",
                   (dag_id, run_id, task_id))
    return {r[0] for r in rows}


def stored_bodies(d: Deployment, run_id: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    for path in (d.root / "lake" / "audit" / run_id).rglob("*.parquet"):
        counts.update(b.decode() for b in pq.read_table(path, columns=["body"])["body"].to_pylist())
    return counts


def depth(d: Deployment) -> int:
    with SqlQueueTransport.from_url(d.queue_db) as transport:  # type: ignore[attr-defined]
        return transport.peek("audit")


def test_section_1_mapped_drain_on_two_workers(deployed: Deployment) -> None:
    sent = send(deployed, "s1-" + uuid.uuid4().hex[:6])
    run_id = run(deployed, guide.DRAIN_DAG)
    stored = stored_bodies(deployed, run_id)
    assert set(stored) == sent and max(stored.values()) == 1
    assert hosts(deployed, guide.DRAIN_DAG, run_id, "drain") == {"worker1", "worker2"}
    assert depth(deployed) == 0


def test_section_2_exactly_once_handler(deployed: Deployment) -> None:
    sent = send(deployed, "s2-" + uuid.uuid4().hex[:6])
    run(deployed, guide.HANDLE_DAG)
    with psycopg.connect(deployed.queue_db) as conn:  # type: ignore[attr-defined]
        bodies = [bytes(r[0]).decode() for r in conn.execute("SELECT body FROM processed").fetchall()]
    assert len(bodies) == len(set(bodies)) and set(bodies) == sent
    assert depth(deployed) == 0


def test_section_3_partitioned_drain(deployed: Deployment) -> None:
    sent = send(deployed, "s3-" + uuid.uuid4().hex[:6])
    run_id = run(deployed, guide.PARTITION_DAG)
    mapped = deployed.query("SELECT count(*) FROM task_instance WHERE dag_id = %s AND run_id = %s "
                            "AND task_id = 'drain'", (guide.PARTITION_DAG, run_id))[0][0]
    assert mapped >= 2, "the plan made one partition"
    stored = stored_bodies(deployed, run_id)
    assert set(stored) == sent
    assert depth(deployed) == 0
