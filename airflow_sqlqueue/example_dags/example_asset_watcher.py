"""Example: event-driven scheduling; a DAG run per burst of messages through ``AssetWatcher``."""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG, Asset, AssetWatcher, task

from airflow_sqlqueue.triggers.sqlqueue import SqlQueueMessageTrigger, event_messages

CONN_ID = os.environ.get("SQLQUEUE_EXAMPLE_CONN_ID", "sqlqueue_default")
QUEUE = os.environ.get("SQLQUEUE_EXAMPLE_EVENTS_QUEUE", "events")

DOC = """
### Event-driven: messages schedule DAG runs (`AssetWatcher`)

The triggerer watches the queue with `SqlQueueMessageTrigger`. Each claimed batch of messages (up to 500, at
most one event every 5 s) becomes one asset event carrying the messages (`id`, `seq`, `headers`, `body`); they
are deleted only after Airflow stored the event, so none is lost if the triggerer dies. `event_messages(context)`
gives the run's messages in queue order, each `id` once. After a triggerer crash a message can come again in a
later run, with the same `id`: make `handle` idempotent by `id`.

**Configure**: `SQLQUEUE_EXAMPLE_CONN_ID` (default `sqlqueue_default`) and `SQLQUEUE_EXAMPLE_EVENTS_QUEUE`
(default `events`) in the environment of the DAG processor and the triggerer. The watcher starts when the DAG
is unpaused.
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

    @task
    def handle(**context) -> int:
        messages = event_messages(context)
        for message in messages:  # log ids and sizes, not bodies: they may hold personal data
            print(f"message {message['id']} (seq {message['seq']}, {message.get('body_size')} bytes)")
        return len(messages)

    handle()
