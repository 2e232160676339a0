"""Operators for SQL queue tables, one module per job: ``drain``, ``partition``, ``send``, ``publish``, ``maintenance``,
``retry``, ``archive``;
``base`` holds what they share, ``messages`` how messages are handed on, ``parquet`` the drain's file writer."""

from __future__ import annotations

from airflow_sqlqueue.extras import needs_airflow  # noqa: F401  (Airflow installed, at its floor, or the fix)

from .archive import SqlQueueArchiveFailedOperator, SqlQueueRestoreArchiveOperator
from .drain import SqlQueueDrainOperator
from .maintenance import (
    SqlQueueCheckSchemaOperator,
    SqlQueueCreateQueuesOperator,
    SqlQueuePurgeExpiredOperator,
    SqlQueueRetryErrorsOperator,
)
from .messages import message_from_dict, message_to_dict, outgoing_message
from .partition import SqlQueuePartitionDrainOperator, SqlQueuePlanPartitionsOperator
from .publish import SqlQueuePublishOperator
from .retry import SqlQueueBatchRetryOperator
from .send import SqlQueueSendOperator

__all__ = [
    "SqlQueueArchiveFailedOperator",
    "SqlQueueBatchRetryOperator",
    "SqlQueueCheckSchemaOperator",
    "SqlQueueCreateQueuesOperator",
    "SqlQueueDrainOperator",
    "SqlQueuePublishOperator",
    "SqlQueuePartitionDrainOperator",
    "SqlQueuePlanPartitionsOperator",
    "SqlQueuePurgeExpiredOperator",
    "SqlQueueRestoreArchiveOperator",
    "SqlQueueRetryErrorsOperator",
    "SqlQueueSendOperator",
    "message_from_dict",
    "message_to_dict",
    "outgoing_message",
]
