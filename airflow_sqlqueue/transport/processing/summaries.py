"""The counts a processing run and a drain report (returned to callers, pushed to XCom, printed as JSON)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from functools import cache
from typing import Any

from ..tables.queue import ReceiveStats


@cache
def _counted(kind: type) -> tuple[str, ...]:
    """The fields of a summary class that ``add`` sums (all but ``seconds``)."""
    return tuple(item.name for item in fields(kind) if item.name != "seconds")


class _Counts:
    """Shared behaviour of the summaries. Each has ``expired`` (rows dropped), ``poison`` (rows moved to the error
    queue on receive: unreadable headers, refused forwards), ``forwarded`` (rows passed on to the queue they
    name) and ``seconds``."""

    expired: int
    poison: int
    forwarded: int

    def as_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (for XCom and ``--json``)."""
        return asdict(self)

    def add(self, other: _Counts) -> None:
        """Add another part's counts (not its seconds)."""
        for name in _counted(type(self)):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def add_stats(self, stats: ReceiveStats) -> None:
        self.expired += stats.expired
        self.poison += stats.poison
        self.forwarded += stats.forwarded


@dataclass
class ProcessSummary(_Counts):
    """Counts of one processing run.

    ``received`` messages taken (each once, however many times it was delivered); ``deliveries`` rows taken (a
    message retried in a later batch counts again; a batch that rolled back, as on a deadlock, counts nothing:
    its rows are taken again); ``succeeded`` handled; ``failed`` moved to the error queue
    after retries; ``delayed`` sent to the delayed table for a delayed retry; ``lost`` failed in mode NONE
    (at-most-once); ``retries`` failed attempts that were retried at once; ``expired``, ``poison``,
    ``forwarded`` rows settled on receive.
    """

    received: int = 0
    deliveries: int = 0
    succeeded: int = 0
    failed: int = 0
    delayed: int = 0
    lost: int = 0
    retries: int = 0
    expired: int = 0
    poison: int = 0
    forwarded: int = 0
    seconds: float = 0.0

    @property
    def finished(self) -> int:
        """Rows that left the queue for good (handled, moved, delayed, dropped or lost)."""
        return (self.succeeded + self.failed + self.delayed + self.lost + self.expired + self.poison
                + self.forwarded)


@dataclass
class DrainSummary(_Counts):
    """Counts of one drain: messages ``delivered`` to the sink, rows ``taken``, ``batches`` committed, and the
    rows settled on receive (``expired``, ``poison``, ``forwarded``)."""

    delivered: int = 0
    taken: int = 0
    batches: int = 0
    expired: int = 0
    poison: int = 0
    forwarded: int = 0
    seconds: float = 0.0
