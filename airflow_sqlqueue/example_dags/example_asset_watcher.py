"""Example: event-driven scheduling; a DAG run per burst of messages through ``AssetWatcher``."""

from __future__ import annotations

import logging
import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, Asset, AssetWatcher, task

from airflow_sqlqueue.triggers.once import handle_once
from airflow_sqlqueue.triggers.sqlqueue import SqlQueueMessageTrigger

log = logging.getLogger(__name__)

CONN_ID = os.environ.get("SQLQUEUE_EXAMPLE_CONN_ID", "sqlqueue_default")
QUEUE = os.environ.get("SQLQUEUE_EXAMPLE_EVENTS_QUEUE", "events")

DOC = """
### Event-driven: messages schedule DAG runs (`AssetWatcher`)

The triggerer watches the queue with `SqlQueueMessageTrigger`. Each claimed batch of messages (up to 500; the
first message after a quiet spell goes out at once, then events keep 0.5 s apart for a trickle and 5 s under load)
becomes one asset event carrying the messages (`id`, `seq`, `headers`, `body`); an event close behind another that
no message follows gets an empty sweep event 5 s later (a run with no messages: on Airflow 3.3 the scheduler can
leave the event before out of a run, and the sweep's run takes it along); they
are deleted only after Airflow stored the event, so none is lost if the triggerer dies. `handle` passes the run's
messages to `handle_once`: a message that an earlier successful run already handled (a batch the triggerer
emitted again after a crash) is skipped, through the inbox table `SqlQueueInbox` it creates in the queue's
database. Writes a handler makes through `once.cursor` / `once.send` count exactly once; writes elsewhere are
at-least-once (make them idempotent by `id`). `handle` is retried (3 times, 30 s apart): a worker killed mid-task
commits nothing of its open batch, and the retry handles those messages (the run's events are its only copy: the
queue no longer holds them). It also takes the messages of events stored after its run was triggered, so with
`max_active_runs=1` none waits for the next message (Airflow 3.3 can leave such events in no run).

**Fast by default**: on SQLite the trigger notices a send within 0.02 s by watching the database's files (no
query); on PostgreSQL create the queue with the wake-up trigger (`sqlqueue create events error --notify`) and a
send wakes it at once. Otherwise it polls every 2 s, backing off to 8 s while idle.

**Configure**: `SQLQUEUE_EXAMPLE_CONN_ID` (default `sqlqueue_default`) and `SQLQUEUE_EXAMPLE_EVENTS_QUEUE`
(default `events`) in the environment of the DAG processor, the workers and the triggerer; the queue and the
error queue `error` must exist. The watcher starts when the DAG processor next parses this file after the DAG is
unpaused (up to `[dag_processor] min_file_process_interval`, 30 s, plus the parse), and it keeps claiming after a
pause until the triggerer cancels it: stop the senders, or pause when the queue is idle.
"""

trigger = SqlQueueMessageTrigger(conn_id=CONN_ID, queue_name=QUEUE, poll_interval=2.0)
queue_asset = Asset(f"sqlqueue-{QUEUE}", watchers=[AssetWatcher(name=f"sqlqueue_{QUEUE}_watcher", trigger=trigger)])

with DAG(
    "example_sqlqueue_asset_watcher",
    schedule=[queue_asset],
    start_date=datetime(2024, 1, 1),
    catchup=False,
    tags=["sqlqueue", "example"],
    doc_md=DOC,
) as dag:

    @task(multiple_outputs=False, retries=3, retry_delay=timedelta(seconds=30))
    def handle(**context) -> dict:
        def handler(message: dict, once) -> None:
            # ids and sizes at INFO, never bodies: they may hold personal data
            log.info("message %s (seq %s, %s bytes)", message["id"], message["seq"], message.get("body_size"))

        return handle_once(context, handler, conn_id=CONN_ID)  # {"handled": n, "skipped": m}

    handle()
