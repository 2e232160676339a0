"""Exceptions raised by the transport. Every message says what was wrong and how to fix it."""

from __future__ import annotations


class SqlQueueError(Exception):
    """Base class of every error raised by airflow_sqlqueue."""


class InvalidAddressError(SqlQueueError, ValueError):
    """A queue address breaks a naming rule of its dialect."""


class InvalidMessageError(SqlQueueError, ValueError):
    """A message to send is malformed (headers, TTBR/delay, body type)."""


class UnsupportedConnectionError(SqlQueueError, ValueError):
    """A connection URL or connection type that the transport cannot use."""


class QueueNotFoundError(SqlQueueError):
    """The queue table (or its schema) does not exist."""


class PermissionDeniedError(SqlQueueError):
    """The database user lacks a right the operation needs."""


class CrossDatabaseTransactionError(SqlQueueError):
    """TRANSACTION_SCOPE work that would span two databases (no distributed transactions in Python)."""


class CircuitBreakerOpenError(SqlQueueError):
    """Receiving kept failing for longer than the circuit breaker allows."""


class DatabaseConnectionError(SqlQueueError):
    """The database could not be reached (the message is free of secrets)."""


class OutcomeUnknownError(SqlQueueError):
    """The connection was lost after a statement that commits by itself was sent: the database may or may not
    have applied it. Nothing retried it (a retry could apply it twice)."""


class SendOutcomeUnknownError(OutcomeUnknownError):
    """A send outside any transaction of the caller's lost its connection after the statement left: the messages
    may or may not be in the queue. ``ids`` are their native Ids (look them up, or accept a possible duplicate,
    before sending again); ``queue`` is the destination."""

    def __init__(self, message: str, ids: list | None = None, queue: str = "") -> None:
        super().__init__(message)
        self.ids = list(ids or [])
        self.queue = queue


class RejectedMessageError(SqlQueueError):
    """A consumer refused a message (e.g. an Airflow trigger's ``reject``): it goes to the error queue."""


class ForwardRefusedError(SqlQueueError):
    """A row's ``NServiceBus.SqlServer.ForwardDestination`` names a queue it may not be forwarded to, or one that
    does not exist: the row goes to the error queue with this reason."""


class NotAQueueError(SqlQueueError, ValueError):
    """The name given as a queue is a system table, or a table, view or index that is not a queue table."""


class NameCollisionError(SqlQueueError):
    """A name a queue needs (an index, the table itself) is already taken by another object in the database."""
