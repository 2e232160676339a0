"""Deployment test DAG: messages of one queue schedule runs; each run records the messages it handled."""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG, Asset, AssetWatcher, task

from airflow_sqlqueue.hooks.sqlqueue import SqlQueueHook
from airflow_sqlqueue.triggers.sqlqueue import SqlQueueMessageTrigger, event_messages

QUEUE = os.environ["SQLQUEUE_DEPLOY_QUEUE"]
HANDLED = os.environ["SQLQUEUE_DEPLOY_HANDLED"]

#: The error queue beside the queue (the test's schema): the trigger refuses to start without an existing one.
ERROR_QUEUE = QUEUE.rsplit(".", 1)[0] + '."error"' if QUEUE.startswith('"') else "error"

trigger = SqlQueueMessageTrigger(conn_id="sqlqueue_default", queue_name=QUEUE, poll_interval=1.0,
                                 error_queue=ERROR_QUEUE)
events = Asset("sqlqueue-deploy-events", watchers=[AssetWatcher(name="deploy_events_watcher", trigger=trigger)])

with DAG("deploy_events", schedule=[events], start_date=datetime(2024, 1, 1), catchup=False):

    @task
    def handle(**context) -> int:
        messages = event_messages(context)
        run_id = context["run_id"]
        with SqlQueueHook().get_conn() as conn:
            with conn.cursor() as cur:
                cur.executemany(f"INSERT INTO {HANDLED} (id, body, run_id) VALUES (%s, %s, %s)",  # noqa: S608
                                [(m["id"], m["body"], run_id) for m in messages])
            conn.commit()
        print(f"handled {len(messages)} messages")
        return len(messages)

    handle()
