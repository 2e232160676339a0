"""Benchmark DAGs of ``bench.asset_latency``: one DAG per set-up, each scheduled by an ``AssetWatcher`` on the
provider's event trigger for its own PostgreSQL queue.

Configured by the environment the benchmark gives the deployment: ``SQLQUEUE_BENCH_QUEUES`` (JSON, set-up name ->
queue table), ``SQLQUEUE_BENCH_POLL_INTERVAL`` and ``SQLQUEUE_BENCH_EVENT_INTERVAL`` (seconds). The only task is an
``EmptyOperator``, which the scheduler marks done without running it: the DAG runs cost the machine nothing while
the latency of the asset events is measured.
"""

from __future__ import annotations

import json
import os
from datetime import datetime

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Asset, AssetWatcher

from airflow_sqlqueue.triggers.sqlqueue import SqlQueueMessageTrigger

CONN_ID = "sqlqueue_bench"
QUEUES: dict[str, str] = json.loads(os.environ["SQLQUEUE_BENCH_QUEUES"])
POLL_INTERVAL = float(os.environ["SQLQUEUE_BENCH_POLL_INTERVAL"])
EVENT_INTERVAL = float(os.environ["SQLQUEUE_BENCH_EVENT_INTERVAL"])

for setup, queue in QUEUES.items():
    trigger = SqlQueueMessageTrigger(conn_id=CONN_ID, queue_name=queue, poll_interval=POLL_INTERVAL,
                                     event_interval=EVENT_INTERVAL,  # the error queue the bench creates beside it
                                     error_queue=queue.rsplit(".", 1)[0] + '."error"')
    asset = Asset(f"sqlqueue-bench-{setup}", watchers=[AssetWatcher(name=f"bench_{setup}_watcher", trigger=trigger)])
    with DAG(f"bench_asset_{setup}", schedule=[asset], start_date=datetime(2024, 1, 1), catchup=False):
        EmptyOperator(task_id="noop")
