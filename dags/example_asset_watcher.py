"""Example: event-driven scheduling; a DAG run per burst of messages through ``AssetWatcher``."""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG, Asset, AssetWatcher, task

from airflow_sqlqueue.triggers.sqlqueue import SqlQueueMessageTrigger

CONN_ID = os.environ.get("SQLQUEUE_EXAMPLE_CONN_ID", "sqlqueue_default")
QUEUE = os.environ.get("SQLQUEUE_EXAMPLE_EVENTS_QUEUE", "events")

DOC = """
### Event-driven: messages schedule DAG runs (`AssetWatcher`)

The triggerer watches the queue with `SqlQueueMessageTrigger`. Each message becomes an asset event (payload:
`queue`, `id`, `seq`, `headers`, `body`); the message is deleted only after Airflow stored the event, so none
is lost if the triggerer dies. Several events can be coalesced into one run and arrive out of order: `handle`
sorts them by `seq` and must be idempotent by `id`.

**Configure**: `SQLQUEUE_EXAMPLE_CONN_ID` (default `sqlqueue_default`) and `SQLQUEUE_EXAMPLE_EVENTS_QUEUE`
(default `events`) in the environment of the DAG processor and the triggerer. The watcher starts when the DAG
is unpaused.
"""

trigger = SqlQueueMessageTrigger(conn_id=CONN_ID, queue_name=QUEUE, batch_size=50, poll_interval=2.0)
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
    def handle(**context) -> list[str]:
        events = [e for evs in context["triggering_asset_events"].values() for e in evs]
        payloads = sorted((e.extra.get("payload", {}) for e in events), key=lambda p: p.get("seq", 0))
        for payload in payloads:
            print(f"message {payload.get('id')} (seq {payload.get('seq')}): {payload.get('body')!r}")
        return [p.get("id") for p in payloads]

    handle()
