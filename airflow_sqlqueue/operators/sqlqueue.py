"""The operators under the module path of the first releases (DAGs written for them keep working).

New code imports from ``airflow_sqlqueue.operators`` (or the module of each job: ``drain``, ``send``,
``maintenance``, ``publish``).
"""

from __future__ import annotations

from .drain import DEFAULT_BATCH_SIZE, DEFAULT_MAX_MESSAGES, DRAIN_SUMMARY_KEY, SPOOL_KEY, SqlQueueDrainOperator
from .maintenance import (
    SqlQueueCheckFailedError,
    SqlQueueCheckSchemaOperator,
    SqlQueueCreateQueuesOperator,
    SqlQueuePurgeExpiredOperator,
    SqlQueueRetryErrorsOperator,
)
from .messages import message_from_dict, message_to_dict, outgoing_message
from .send import SqlQueueSendOperator

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_MAX_MESSAGES",
    "DRAIN_SUMMARY_KEY",
    "SPOOL_KEY",
    "SqlQueueCheckFailedError",
    "SqlQueueCheckSchemaOperator",
    "SqlQueueCreateQueuesOperator",
    "SqlQueueDrainOperator",
    "SqlQueuePurgeExpiredOperator",
    "SqlQueueRetryErrorsOperator",
    "SqlQueueSendOperator",
    "message_from_dict",
    "message_to_dict",
    "outgoing_message",
]
