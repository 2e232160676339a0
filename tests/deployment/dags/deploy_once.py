"""Deployment test DAGs of the crash scenarios (issue 29): each message handled once through ``handle_once``.

``deploy_once`` watches one queue with ``HoldingMessageTrigger`` (the test can stop the triggerer between "event
stored" and "rows deleted") and retries its task (a killed worker's messages are handled by the next attempt).
While ``$SQLQUEUE_DEPLOY_HOLD_DIR/hold-worker`` exists, an attempt stops at its 60th message (in its second
transaction of 50) and writes its PID to ``worker.pid`` for the test to kill. ``deploy_once_serial`` has
``max_active_runs=1``; its runs stay in progress while ``hold-serial`` exists (``deploy_once_serial_control``: the
same without ``later_events``, to measure what Airflow alone leaves waiting). ``deploy_once_sqlite`` (only when
``$SQLQUEUE_DEPLOY_SQLITE_QUEUE`` is set) is ``deploy_once`` on a queue in a SQLite file (connection
``sqlqueue_sqlite``), its inbox and handled table in that file. They record each message they handle in the
handled table, in the transaction that marks it handled.
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG, Asset, AssetWatcher, task
from sqlqueue_deploy_hooks import HoldingMessageTrigger

from airflow_sqlqueue.triggers.once import handle_once
from airflow_sqlqueue.triggers.sqlqueue import SqlQueueMessageTrigger

QUEUE = os.environ["SQLQUEUE_DEPLOY_QUEUE"]
SERIAL_QUEUE = os.environ["SQLQUEUE_DEPLOY_SERIAL_QUEUE"]
CONTROL_QUEUE = os.environ["SQLQUEUE_DEPLOY_CONTROL_QUEUE"]
HANDLED = os.environ["SQLQUEUE_DEPLOY_HANDLED"]
INBOX = os.environ["SQLQUEUE_DEPLOY_INBOX"]  # in the test's schema: dropped with it
HOLD_DIR = Path(os.environ["SQLQUEUE_DEPLOY_HOLD_DIR"])
ERROR_QUEUE = QUEUE.rsplit(".", 1)[0] + '."error"'
SQLITE_QUEUE = os.environ.get("SQLQUEUE_DEPLOY_SQLITE_QUEUE")
HOLD_AT = 60


def record(message: dict, once, context: dict, table: str = HANDLED) -> None:
    mark = "?" if once.transport.dialect.name == "sqlite" else "%s"
    once.cursor.execute(f"INSERT INTO {table} (id, body, run_id, try_number) "  # noqa: S608
                        f"VALUES ({mark}, {mark}, {mark}, {mark})",
                        (str(message["id"]), message["body"], context["run_id"], context["ti"].try_number))


trigger = HoldingMessageTrigger(conn_id="sqlqueue_default", queue_name=QUEUE, poll_interval=1.0,
                                error_queue=ERROR_QUEUE)
events = Asset("sqlqueue-deploy-once", watchers=[AssetWatcher(name="deploy_once_watcher", trigger=trigger)])

with DAG("deploy_once", schedule=[events], start_date=datetime(2024, 1, 1), catchup=False,
         default_args={"retries": 3, "retry_delay": timedelta(seconds=2)}):

    @task
    def handle(**context) -> dict:
        seen = 0

        def handler(message: dict, once) -> None:
            nonlocal seen
            seen += 1
            if seen == HOLD_AT and (HOLD_DIR / "hold-worker").exists():  # the test removes it after the kill
                (HOLD_DIR / "worker.pid").write_text(str(os.getpid()))
                time.sleep(600)  # the test kills this process here, mid-transaction
            record(message, once, context)

        return handle_once(context, handler, inbox_table=INBOX)

    handle()


def serial_dag(dag_id: str, queue: str, later_events: bool) -> None:
    """A ``max_active_runs=1`` consumer of ``queue``; ``later_events=False`` is the control (Airflow's own
    behaviour: the messages of events no run consumed wait for the next message)."""
    watcher_trigger = SqlQueueMessageTrigger(conn_id="sqlqueue_default", queue_name=queue, poll_interval=1.0,
                                             error_queue=ERROR_QUEUE)
    asset = Asset(f"sqlqueue-{dag_id}", watchers=[AssetWatcher(name=f"{dag_id}_watcher", trigger=watcher_trigger)])
    with DAG(dag_id, schedule=[asset], start_date=datetime(2024, 1, 1), catchup=False, max_active_runs=1,
             default_args={"retries": 3, "retry_delay": timedelta(seconds=2)}):

        @task
        def handle_serially(**context) -> dict:
            deadline = time.monotonic() + 900
            while (HOLD_DIR / "hold-serial").exists() and time.monotonic() < deadline:
                time.sleep(0.5)  # the run stays in progress while the test sends the next bursts
            return handle_once(context, lambda message, once: record(message, once, context),
                               later_events=later_events, inbox_table=INBOX)

        handle_serially()


serial_dag("deploy_once_serial", SERIAL_QUEUE, later_events=True)
serial_dag("deploy_once_serial_control", CONTROL_QUEUE, later_events=False)


if SQLITE_QUEUE:
    sqlite_trigger = HoldingMessageTrigger(conn_id="sqlqueue_sqlite", queue_name=SQLITE_QUEUE, poll_interval=1.0,
                                           error_queue="error")
    sqlite_events = Asset("sqlqueue-deploy-once-sqlite",
                          watchers=[AssetWatcher(name="deploy_once_sqlite_watcher", trigger=sqlite_trigger)])
    with DAG("deploy_once_sqlite", schedule=[sqlite_events], start_date=datetime(2024, 1, 1), catchup=False,
             default_args={"retries": 3, "retry_delay": timedelta(seconds=2)}):

        @task
        def handle_sqlite(**context) -> dict:
            return handle_once(context, lambda message, once: record(message, once, context, "handled"),
                               conn_id="sqlqueue_sqlite")

        handle_sqlite()
