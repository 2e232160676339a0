"""Archive then restore as tasks (tests/test_archive_operators.py): failures older than a day, to the location the
test names in $SQLQUEUE_TEST_ARCHIVE_LOCATION; the restore takes the archive id from the archive task's XCom."""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG

from airflow_sqlqueue.operators import SqlQueueArchiveFailedOperator, SqlQueueRestoreArchiveOperator

with DAG("sqlqueue_archive", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         params={"restore_ids": None}):
    archive = SqlQueueArchiveFailedOperator(
        task_id="archive", sqlqueue_conn_id="sqlqueue_archive", location=os.environ.get(
            "SQLQUEUE_TEST_ARCHIVE_LOCATION", "/tmp/sqlqueue-archive-test"), older_than="{{ 1 }}",
        exception_type="Boom", batch_size=7)
    restore = SqlQueueRestoreArchiveOperator(
        task_id="restore", sqlqueue_conn_id="sqlqueue_archive", location=archive.location,
        archive_id="{{ ti.xcom_pull(task_ids='archive')['archive_id'] }}", ids="{{ params.restore_ids or '' }}",
        batch_size=3)
    archive >> restore
