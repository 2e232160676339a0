"""Core transport for SQL queue tables (no Airflow import): usable from scripts, the CLI and tests."""

from .common.errors import (
    CircuitBreakerOpenError,
    CrossDatabaseTransactionError,
    DatabaseConnectionError,
    ForwardRefusedError,
    InvalidAddressError,
    InvalidMessageError,
    OutcomeUnknownError,
    PermissionDeniedError,
    QueueNotFoundError,
    SendOutcomeUnknownError,
    SqlQueueError,
    UnsupportedConnectionError,
)
from .dialects import Finding, RawRow, get_dialect
from .operations.drain import DrainSummary
from .operations.partitions import Partition
from .operations.pubsub import PublishResult, Subscription
from .operations.pump import HandlerContext, ProcessSummary
from .processing.claim import Claim
from .processing.modes import TransactionMode
from .tables.queue import ReceiveStats
from .transport import ReceivedBatch, SqlQueueTransport, ddl_script
from .wire.address import QueueAddress
from .wire.messages import OutgoingMessage, ReceivedColumns, ReceivedMessage

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
    "OutcomeUnknownError",
    "OutgoingMessage",
    "Partition",
    "PermissionDeniedError",
    "ProcessSummary",
    "PublishResult",
    "QueueAddress",
    "RawRow",
    "ReceiveStats",
    "ReceivedBatch",
    "ReceivedColumns",
    "QueueNotFoundError",
    "ReceivedMessage",
    "SendOutcomeUnknownError",
    "SqlQueueError",
    "SqlQueueTransport",
    "Subscription",
    "TransactionMode",
    "UnsupportedConnectionError",
    "ddl_script",
    "get_dialect",
]
