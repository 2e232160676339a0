"""Effectively once on a real deployment with the CeleryExecutor (issue 29): a Celery worker killed while its
task is inside ``handle_once``, and the triggerer killed after the event was stored on a queue in a SQLite file.

One deployment (CeleryExecutor, two workers of two slots on the local Redis, metadata on a fresh PostgreSQL
database) runs ``dags/deploy_once.py``: ``deploy_once`` on a PostgreSQL queue and ``deploy_once_sqlite`` on a
SQLite file (its inbox and handled table in that file). Each scenario counts per message Id, as
``test_once_deployment.py`` does (its ``Messages``), and adds a row to its figures table.
"""

from __future__ import annotations

import json
import signal
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from airflow_sqlqueue.transport import SqlQueueTransport
from tests.deployment import test_once_deployment as once
from tests.deployment.harness import AIRFLOW_FALSE_ALARMS, PG_URL, Deployment, wait_for

pytestmark = [pytest.mark.deployment, pytest.mark.timeout(1200)]

HERE = Path(__file__).resolve().parent
SQLITE_DAG_ID = "deploy_once_sqlite"
#: ERROR lines the scenarios cause on purpose, each with its cause (``check_logs``).
ALLOWED_ERRORS = [
    # the killed worker's task sends no heartbeat: the scheduler fails the try (then retries it)
    r"Detected a task instance without a heartbeat: .*'DAG Id': 'deploy_once', 'Task Id': 'handle'",
    # ... and the Celery result of the killed try says failed while the task instance still said running
    r"Executor CeleryExecutor\(.*\) reported that the task instance <TaskInstance: deploy_once\.handle .* finished "
    r"with state failed, but the task instance's state attribute is running",
    *AIRFLOW_FALSE_ALARMS,
]
#: Bodies an allowed ERROR line may hold: Airflow's heartbeat-timeout line prints the callback request, with the
#: DAG run's consumed asset events and so their payloads (message bodies). Airflow's, at ERROR, only when a task
#: misses its heartbeats; see docs/deployment.md.
ALLOWED_BODIES = [r"Detected a task instance without a heartbeat: "]


@pytest.fixture(scope="module")
def celery_once(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    with once.handled_schema("oc_") as schema:
        yield from _celery_once(tmp_path_factory, schema)


def _celery_once(tmp_path_factory: pytest.TempPathFactory, schema: str) -> Iterator[Deployment]:
    queue, handled = f'"{schema}"."events"', f'"{schema}"."handled"'
    hold = tmp_path_factory.mktemp("hold")
    figures_before = len(once.FIGURES)
    lite = tmp_path_factory.mktemp("sqlite") / "queues.db"
    with SqlQueueTransport.from_url(f"sqlite:///{lite}") as transport:
        transport.create_queues(["events", "error"])
    with closing(sqlite3.connect(lite)) as conn:
        conn.execute("CREATE TABLE handled (id text, body text, run_id text, try_number int, "
                     "at text DEFAULT CURRENT_TIMESTAMP)")
        conn.commit()
    deployment = Deployment(tmp_path_factory.mktemp("deploy"), [HERE / "dags" / "deploy_once.py"],
                            executor="CeleryExecutor", workers=2, concurrency=2,
                            pylib=[HERE / "sqlqueue_deploy_hooks.py"],
                            env={"SQLQUEUE_DEPLOY_QUEUE": queue,
                                 # the serial DAGs stay paused in this deployment
                                 "SQLQUEUE_DEPLOY_SERIAL_QUEUE": f'"{schema}"."serial"',
                                 "SQLQUEUE_DEPLOY_CONTROL_QUEUE": f'"{schema}"."control"',
                                 "SQLQUEUE_DEPLOY_SQLITE_QUEUE": "events",
                                 "SQLQUEUE_DEPLOY_HANDLED": handled, "SQLQUEUE_DEPLOY_HOLD_DIR": str(hold),
                                 "SQLQUEUE_DEPLOY_INBOX": f'"{schema}"."SqlQueueInbox"'},
                            connections={"sqlqueue_default": PG_URL,
                                         "sqlqueue_sqlite": json.dumps({"conn_type": "sqlite", "host": str(lite)})})
    deployment.handled, deployment.hold, deployment.sqlite = handled, hold, lite  # type: ignore[attr-defined]
    try:
        with SqlQueueTransport.from_url(PG_URL) as transport:
            transport.create_queues([queue, f'"{schema}"."serial"', f'"{schema}"."control"', f'"{schema}"."error"'])
        with deployment:
            deployment.wait_parsed([once.DAG_ID, SQLITE_DAG_ID])
            for dag_id in (once.DAG_ID, SQLITE_DAG_ID):
                deployment.set_paused(dag_id, False)
            yield deployment
    finally:
        print("\n" + once.table(once.FIGURES[figures_before:]))


def test_celery_worker_sigkill_inside_handle_once(celery_once: Deployment) -> None:
    """The Celery worker running the task is killed (SIGKILL of every process of its session: the worker, its pool,
    the task's supervisor and the task process, which runs in a process group of its own) in handle_once's second
    transaction, 50 committed and 9 marked uncommitted.
    The scheduler fails the try once its heartbeat is older than ``task_instance_heartbeat_timeout``; the retry runs
    on the other worker, skips the 50 and handles the other 50."""
    deployment, hold = celery_once, celery_once.hold  # type: ignore[attr-defined]
    messages = once.Messages(deployment, "Celery worker SIGKILL inside handle_once (100)",
                             once.queue_of(deployment, "SQLQUEUE_DEPLOY_QUEUE"), once.DAG_ID)
    (hold / "hold-worker").touch()
    try:
        messages.send(100)
        wait_for("the task to stop at its 60th message", lambda: (hold / "worker.pid").exists()
                 and (hold / "worker.pid").read_text(), 300, hint=deployment.where_logs())
        committed = len(messages.rows())
        assert committed == 50, f"{committed} rows committed before the kill, expected the first transaction's 50"
        hosts = deployment.query("SELECT hostname FROM task_instance WHERE dag_id = %s AND state = 'running'",
                                 (once.DAG_ID,))
        assert len(hosts) == 1 and hosts[0][0] in deployment.processes, hosts
        worker = hosts[0][0]
        pids = deployment.kill_session(worker, signal.SIGKILL)  # the worker, its pool and the task process
        assert int((hold / "worker.pid").read_text()) in pids, "the task process is not in the worker's session"
    finally:
        (hold / "hold-worker").unlink(missing_ok=True)
        (hold / "worker.pid").unlink(missing_ok=True)
    row = messages.wait_and_count(timeout=360)  # the heartbeat timeout, then the retry on the other worker
    run_ids = list({r for _, _, r, _ in messages.rows()})
    tries = deployment.query("SELECT max(try_number) FROM task_instance WHERE dag_id = %s AND run_id = ANY(%s)",
                             (once.DAG_ID, run_ids))
    assert tries[0][0] >= 2, "the killed task was not retried"
    retried_on = deployment.query("SELECT hostname FROM task_instance WHERE dag_id = %s AND run_id = ANY(%s)",
                                  (once.DAG_ID, run_ids))
    assert {h for (h,) in retried_on} and worker not in {h for (h,) in retried_on}, retried_on
    once.check_once(row)
    deployment.restart(worker)  # the deployment whole again for what follows
    wait_for(f"Celery {worker} to be ready again", lambda: deployment.log_text(worker).count("ready.") >= 2, 240,
             hint=deployment.where_logs())


def test_sqlite_triggerer_sigkill_between_event_stored_and_rows_deleted(celery_once: Deployment) -> None:
    """The triggerer-SIGKILL scenario on a queue in a SQLite file: the triggerer dies after Airflow stored the event,
    before the batch's delete (its claim holds the file's write lock until it dies); the next triggerer emits the
    same batch again; handle_once hands that run nothing."""
    deployment = celery_once
    lite = deployment.sqlite  # type: ignore[attr-defined]
    messages = once.Messages(deployment, "SQLite: triggerer SIGKILL after event stored, before delete (100)", "events",
                             SQLITE_DAG_ID, url=f"sqlite:///{lite}", handled="handled", conn_id="sqlqueue_sqlite")
    once.triggerer_sigkill_after_event_stored(deployment, messages, stored_timeout=180)
    once.check_once(messages.wait_and_count())


def test_no_message_body_and_no_unexplained_error_in_the_logs(celery_once: Deployment) -> None:
    """Issue 29: no message body in any log (components, Celery workers, task attempts), no ERROR line that is not
    an error. Allowed: the errors the scenarios cause on purpose (the killed worker's task)."""
    celery_once.check_logs(once.TAGS, allow=ALLOWED_ERRORS, allow_bodies=ALLOWED_BODIES)
