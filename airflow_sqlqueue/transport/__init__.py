"""Core transport for SQL queue tables (no Airflow import): usable from scripts, the CLI and tests."""

from .address import QueueAddress
from .claim import Claim
from .dialects import Finding, RawRow, get_dialect
from .drain import DrainSummary
from .errors import (
    CircuitBreakerOpenError,
    CrossDatabaseTransactionError,
    DatabaseConnectionError,
    ForwardRefusedError,
    InvalidAddressError,
    InvalidMessageError,
    PermissionDeniedError,
    QueueNotFoundError,
    SqlQueueError,
    UnsupportedConnectionError,
)
from .messages import OutgoingMessage, ReceivedMessage
from .modes import TransactionMode
from .partitions import Partition
from .pubsub import PublishResult, Subscription
from .pump import HandlerContext, ProcessSummary
from .queue import ReceiveStats
from .transport import ReceivedBatch, SqlQueueTransport, ddl_script

__all__ = [
    "CircuitBreakerOpenError",
    "Claim",
    "CrossDatabaseTransactionError",
    "DatabaseConnectionError",
    "DrainSummary",
    "Finding",
    "ForwardRefusedError",
    "HandlerContext",
    "InvalidAddressError",
    "InvalidMessageError",
    "OutgoingMessage",
    "Partition",
    "PermissionDeniedError",
    "ProcessSummary",
    "PublishResult",
    "QueueAddress",
    "RawRow",
    "ReceiveStats",
    "ReceivedBatch",
    "QueueNotFoundError",
    "ReceivedMessage",
    "SqlQueueError",
    "SqlQueueTransport",
    "Subscription",
    "TransactionMode",
    "UnsupportedConnectionError",
    "ddl_script",
    "get_dialect",
]
