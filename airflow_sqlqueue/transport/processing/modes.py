"""The four transaction modes of the NServiceBus SQL transport."""

from __future__ import annotations

from enum import Enum


class TransactionMode(str, Enum):
    """How a receive, the handler's work and its outgoing sends share transactions.

    * NONE: the delete commits before the handler runs; a failing handler loses the message (at-most-once).
    * RECEIVE_ONLY: the delete commits after the handler; sends commit at once on another connection
      (ghost sends possible); on failure the row returns to the head of the queue.
    * SENDS_ATOMIC_WITH_RECEIVE: as RECEIVE_ONLY, and sends share the receive transaction.
    * TRANSACTION_SCOPE: one transaction for the receive, the sends and the handler's own SQL on the same
      database (``context.connection``); work on another database is refused.
    """

    NONE = "none"
    RECEIVE_ONLY = "receive-only"
    SENDS_ATOMIC_WITH_RECEIVE = "sends-atomic-with-receive"
    TRANSACTION_SCOPE = "transaction-scope"

    @classmethod
    def parse(cls, value: str | TransactionMode) -> TransactionMode:
        """Accept a member, its value, or its name in any case (``receive_only``, ``ReceiveOnly``)."""
        if isinstance(value, cls):
            return value
        key = str(value).strip().lower().replace("_", "-")
        aliases = {"receiveonly": "receive-only", "sendsatomicwithreceive": "sends-atomic-with-receive",
                   "transactionscope": "transaction-scope"}
        key = aliases.get(key.replace("-", ""), key)
        for member in cls:
            if member.value == key:
                return member
        raise ValueError(f"unknown transaction mode {value!r}; choose one of "
                         + ", ".join(m.value for m in cls))

    @property
    def atomic_sends(self) -> bool:
        """Whether outgoing sends join the receive transaction."""
        return self in (TransactionMode.SENDS_ATOMIC_WITH_RECEIVE, TransactionMode.TRANSACTION_SCOPE)
