"""Competing Celery workers on one queue (issue 18): two ``airflow celery worker`` processes (concurrency 2 each)
run four mapped drain tasks (two receivers each) on one PostgreSQL queue into Parquet while a sender adds more;
then one worker is killed with SIGKILL mid-drain.

Every message is counted by identity (a unique body, and the Id the queue gave it) in the Parquet files.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow.parquet as pq
import pytest

from airflow_sqlqueue.transport import OutgoingMessage, SqlQueueTransport
from tests.deployment.harness import PG_URL, Deployment, wait_for

pytestmark = [pytest.mark.deployment, pytest.mark.timeout(900)]

DAGS = Path(__file__).resolve().parent / "dags"
DAG_ID = "deploy_drain"
BACKLOG, EXTRA, TASKS = 20_000, 5_000, 4
FIGURES: list[dict[str, Any]] = []


@pytest.fixture(scope="module")
def celery_deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    schema = "c_" + uuid.uuid4().hex[:10]
    queue = f'"{schema}"."work"'
    root = tmp_path_factory.mktemp("celery")
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    with SqlQueueTransport.from_url(PG_URL) as transport:
        transport.create_queues([queue, f'"{schema}"."error"'])
    deployment = Deployment(root, [DAGS / "deploy_drain.py"], executor="CeleryExecutor", workers=2, concurrency=2,
                            env={"SQLQUEUE_DEPLOY_DRAIN_QUEUE": queue, "SQLQUEUE_DEPLOY_DRAIN_OUT": str(root / "out"),
                                 "SQLQUEUE_DEPLOY_DRAIN_TASKS": str(TASKS)},
                            connections={"sqlqueue_default": PG_URL})
    deployment.queue = queue  # type: ignore[attr-defined]
    try:
        with deployment:
            deployment.wait_parsed([DAG_ID])
            deployment.set_paused(DAG_ID, False)
            yield deployment
    finally:
        print("\n| workers | messages | faults | lost | duplicates | mapped tasks on | seconds |")
        print("|---|---|---|---|---|---|---|")
        for row in FIGURES:
            print("| " + " | ".join(str(row[k]) for k in ("workers", "messages", "faults", "lost", "duplicates",
                                                          "hosts", "seconds")) + " |")
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def fill(queue: str, tag: str, start: int, n: int, chunk: int = 1000) -> None:
    with SqlQueueTransport.from_url(PG_URL) as transport:
        for first in range(start, start + n, chunk):
            transport.send_many(queue, [OutgoingMessage(body=f"{tag}-{i}") for i in range(first, min(first + chunk,
                                                                                                   start + n))])


def trigger_run(deployment: Deployment) -> str:
    run_id = "drain_" + uuid.uuid4().hex[:8]
    deployment.airflow("dags", "trigger", DAG_ID, "--run-id", run_id)
    return run_id


def run_state(deployment: Deployment, run_id: str) -> str:
    deployment.check_running()
    rows = deployment.query("SELECT state FROM dag_run WHERE dag_id = %s AND run_id = %s", (DAG_ID, run_id))
    return rows[0][0] if rows else ""


def running_on(deployment: Deployment, run_id: str) -> set[str]:
    """The workers that ran (or run) a try of the run's drain tasks (task_instance and its history)."""
    rows = deployment.query(
        "SELECT hostname FROM task_instance WHERE dag_id = %s AND run_id = %s AND hostname <> '' "
        "UNION SELECT hostname FROM task_instance_history WHERE dag_id = %s AND run_id = %s AND hostname <> ''",
        (DAG_ID, run_id, DAG_ID, run_id))
    return {r[0] for r in rows}


def stored(deployment: Deployment, run_id: str) -> list[tuple[str, str]]:
    """(id, body) of every message in the run's Parquet files, once per file it is in."""
    out = Path(deployment.env["SQLQUEUE_DEPLOY_DRAIN_OUT"]) / run_id
    rows: list[tuple[str, str]] = []
    for path in sorted(out.rglob("*.parquet")):
        table = pq.read_table(path, columns=["id", "body"])
        ids, bodies = table["id"].to_pylist(), table["body"].to_pylist()
        rows += [(str(i), b.decode()) for i, b in zip(ids, bodies, strict=True)]
    return rows


def depth(queue: str) -> int:
    with SqlQueueTransport.from_url(PG_URL) as transport:
        return transport.peek(queue)


def check_stored(deployment: Deployment, run_id: str, tag: str, total: int, *, faults: str,
                 started: float) -> dict[str, Any]:
    rows = stored(deployment, run_id)
    ids_by_body: dict[str, set[str]] = {}
    for message_id, body in rows:
        ids_by_body.setdefault(body, set()).add(message_id)
    expected = {f"{tag}-{i}" for i in range(total)}
    counts = Counter(body for _, body in rows)
    row = {"workers": 2, "messages": total, "faults": faults, "lost": len(expected - set(ids_by_body)),
           "duplicates": sum(c - 1 for c in counts.values()), "hosts": ",".join(sorted(running_on(deployment, run_id))),
           "seconds": round(time.monotonic() - started)}
    FIGURES.append(row)
    print(row)
    assert set(ids_by_body) == expected, f"lost {len(expected - set(ids_by_body))}, foreign " \
                                         f"{len(set(ids_by_body) - expected)}"
    assert all(len(ids) == 1 for ids in ids_by_body.values()), "a duplicate carried another Id"
    return row


def test_mapped_drains_compete_on_two_workers(celery_deployment: Deployment) -> None:
    deployment, queue, tag = celery_deployment, celery_deployment.queue, "c-" + uuid.uuid4().hex[:6]
    fill(queue, tag, 0, BACKLOG)
    started = time.monotonic()
    run_id = trigger_run(deployment)
    wait_for("a drain task to run", lambda: running_on(deployment, run_id), 180, hint=deployment.where_logs())
    sender = threading.Thread(target=fill, args=(queue, tag, BACKLOG, EXTRA, 250))
    sender.start()
    sender.join(120)
    wait_for(f"run {run_id} to finish", lambda: run_state(deployment, run_id) in ("success", "failed"), 300,
             interval=1, hint=deployment.where_logs())
    assert run_state(deployment, run_id) == "success"
    if depth(queue):  # the sender outlasted every drain: one more run takes the rest
        again = trigger_run(deployment)
        wait_for(f"run {again} to finish", lambda: run_state(deployment, again) in ("success", "failed"), 300,
                 interval=1)
    row = check_stored(deployment, run_id, tag, BACKLOG + EXTRA, faults="none", started=started)
    assert row["duplicates"] == 0
    assert running_on(deployment, run_id) == {"worker1", "worker2"}, "the mapped tasks did not run on both workers"
    assert depth(queue) == 0


def test_worker_sigkill_mid_drain(celery_deployment: Deployment) -> None:
    deployment, queue, tag = celery_deployment, celery_deployment.queue, "k-" + uuid.uuid4().hex[:6]
    fill(queue, tag, 0, BACKLOG)
    started = time.monotonic()
    run_id = trigger_run(deployment)
    out = Path(deployment.env["SQLQUEUE_DEPLOY_DRAIN_OUT"]) / run_id

    def worker1_mid_drain() -> bool:
        deployment.check_running()
        running = deployment.query(
            "SELECT 1 FROM task_instance WHERE dag_id = %s AND run_id = %s AND hostname = 'worker1' "
            "AND state = 'running'", (DAG_ID, run_id))
        return bool(running) and any(out.rglob("*.parquet"))
    wait_for("a drain task running on worker1 with batches stored", worker1_mid_drain, 180, interval=0.2,
             hint=deployment.where_logs())
    deployment.kill("worker1", signal.SIGKILL)
    wait_for(f"run {run_id} to finish after the kill", lambda: run_state(deployment, run_id) in ("success", "failed"),
             300, interval=1, hint=deployment.where_logs())
    tries = deployment.query("SELECT max(try_number) FROM task_instance WHERE dag_id = %s AND run_id = %s",
                             (DAG_ID, run_id))[0][0]
    assert run_state(deployment, run_id) == "success"
    assert tries >= 2, "no drain task was retried after its worker died"
    check_stored(deployment, run_id, tag, BACKLOG, faults="worker1 SIGKILL", started=started)
    assert depth(queue) == 0
