"""Operators for SQL queue tables, one module per job: ``drain``, ``partition``, ``send``, ``maintenance``;
``base`` holds what they share, ``messages`` how messages are handed on, ``parquet`` the drain's file writer."""

from __future__ import annotations

from .drain import SqlQueueDrainOperator
from .maintenance import (
    SqlQueueCheckSchemaOperator,
    SqlQueueCreateQueuesOperator,
    SqlQueuePurgeExpiredOperator,
    SqlQueueRetryErrorsOperator,
)
from .messages import message_from_dict, message_to_dict, outgoing_message
from .partition import SqlQueuePartitionDrainOperator, SqlQueuePlanPartitionsOperator
from .send import SqlQueueSendOperator

__all__ = [
    "SqlQueueCheckSchemaOperator",
    "SqlQueueCreateQueuesOperator",
    "SqlQueueDrainOperator",
    "SqlQueuePartitionDrainOperator",
    "SqlQueuePlanPartitionsOperator",
    "SqlQueuePurgeExpiredOperator",
    "SqlQueueRetryErrorsOperator",
    "SqlQueueSendOperator",
    "message_from_dict",
    "message_to_dict",
    "outgoing_message",
]
