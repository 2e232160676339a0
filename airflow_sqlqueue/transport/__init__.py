"""Core transport for SQL queue tables (no Airflow import): usable from scripts, the CLI and tests."""

from .address import QueueAddress
from .dialects import Finding, RawRow, get_dialect
from .drain import DrainSummary
from .errors import (
    CircuitBreakerOpenError,
    CrossDatabaseTransactionError,
    InvalidAddressError,
    InvalidMessageError,
    PermissionDeniedError,
    QueueNotFoundError,
    SqlQueueError,
    UnsupportedConnectionError,
)
from .messages import OutgoingMessage, ReceivedMessage
from .modes import TransactionMode
from .pump import HandlerContext, ProcessSummary
from .transport import ReceivedBatch, ReceiveStats, SqlQueueTransport, ddl_script

__all__ = [
    "CircuitBreakerOpenError",
    "CrossDatabaseTransactionError",
    "DrainSummary",
    "Finding",
    "HandlerContext",
    "InvalidAddressError",
    "InvalidMessageError",
    "OutgoingMessage",
    "PermissionDeniedError",
    "ProcessSummary",
    "QueueAddress",
    "RawRow",
    "ReceiveStats",
    "ReceivedBatch",
    "QueueNotFoundError",
    "ReceivedMessage",
    "SqlQueueError",
    "SqlQueueTransport",
    "TransactionMode",
    "UnsupportedConnectionError",
    "ddl_script",
    "get_dialect",
]
