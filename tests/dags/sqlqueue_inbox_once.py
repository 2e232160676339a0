"""Test DAG: an event-driven consumer that handles each message once (run by tests/test_inbox.py).

Scheduled on an asset (its runs in the tests get asset events attached, as the scheduler would). The task hands
each message of its run to ``handle_once``; the handler sends the message's id to the ``done`` queue through
``once.send``, in the transaction that records the message in the inbox. The run's conf names the connection,
the queues and the inbox table (the tests give each database its own), and ``fail_at``: an id the handler
raises on (a run that fails mid-way).
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Asset, task

from airflow_sqlqueue.triggers.once import handle_once

ASSET_URI = "sqlqueue-inbox-once-events"

with DAG("sqlqueue_inbox_once", schedule=[Asset(ASSET_URI)], start_date=datetime(2024, 1, 1), catchup=False,
         doc_md="Handle each message of the run's asset events once, whatever delivered it twice."):

    @task(retries=0)
    def handle(**context) -> dict:
        conf = context["dag_run"].conf or {}

        def handler(message: dict, once) -> None:
            if message["id"] == conf.get("fail_at"):
                raise RuntimeError("the handler failed on purpose")
            once.send(conf["done_queue"], message["id"])

        return handle_once(context, handler, conn_id=conf["conn_id"], batch_size=conf.get("batch_size", 50),
                           inbox_table=conf["inbox_table"], later_events=conf.get("later_events", True))

    handle()
