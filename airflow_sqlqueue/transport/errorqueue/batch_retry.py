"""Retry failed messages in controlled batches: a batch size, a ramp, a rate limit, redirects, and a way to stop.

Each batch is one page of positions (``failed_page``, previews of one byte: positions only; or the next slice of a
selection of positions the caller chose, oldest first) and one transaction
that returns what it can (``retry_batch``): a message that cannot go back stays, with its reason, and the walk goes
on past it, so every message is looked at once. The rate limit holds at every batch boundary: batch *k* ends no
sooner than ``(messages in batches 1..k) / rate`` seconds after the run started (``BatchSummary.started_at``), so
the messages returned by the end of any batch never exceed ``rate`` times the time since the start. Each batch is
reported to ``on_batch`` (progress, audit) with its start and end times; ``should_stop`` is asked before each
batch (cancellation between two transactions leaves nothing half done).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ..wire.address import QueueAddress
from .error_browser import FailedFilter, Position, failed_page, retry_batch

if TYPE_CHECKING:
    from ..transport import SqlQueueTransport

MAX_BATCH = 10_000


@dataclass(frozen=True)
class BatchPlan:
    """How fast to retry.

    :param batch_size: messages per transaction at full speed (1 to 10,000).
    :param ramp_start: the first batch's size, doubled each batch up to ``batch_size`` (None: full size at once).
    :param rate_per_second: at most this many messages per second, measured from the first batch (None: no limit).
    :param max_messages: stop after looking at this many messages (None: the whole error queue).
    """

    batch_size: int = 500
    ramp_start: int | None = None
    rate_per_second: float | None = None
    max_messages: int | None = None

    def __post_init__(self) -> None:
        for name in ("batch_size", "ramp_start", "max_messages"):
            value = getattr(self, name)
            if value is None and name != "batch_size":
                continue
            top = 2**62 if name == "max_messages" else MAX_BATCH
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
                raise ValueError(f"{name} must be a whole number from 1 to {top:,}, got {value!r}")
        rate = self.rate_per_second
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int | float) or not math.isfinite(rate)
                                 or rate <= 0):
            raise ValueError(f"rate_per_second must be a finite number of messages per second above 0, got {rate!r}")

    def sizes(self) -> Iterator[int]:
        """Batch sizes: the ramp, then ``batch_size`` for ever."""
        size = min(self.ramp_start or self.batch_size, self.batch_size)
        while True:
            yield size
            size = min(size * 2, self.batch_size)


@dataclass
class BatchRecord:
    """One batch as it happened (times are seconds since the epoch)."""

    batch: int
    started_at: float
    finished_at: float
    looked_at: int
    returned: dict[str, int]
    left: list[dict[str, str]]

    @property
    def total_returned(self) -> int:
        return sum(self.returned.values())


@dataclass
class BatchSummary:
    """What a batched retry did, batch by batch."""

    started_at: float = 0.0
    batches: list[BatchRecord] = field(default_factory=list)
    cancelled: bool = False

    @property
    def total_returned(self) -> int:
        return sum(b.total_returned for b in self.batches)

    def as_dict(self) -> dict[str, Any]:
        returned: dict[str, int] = {}
        for record in self.batches:
            for queue, count in record.returned.items():
                returned[queue] = returned.get(queue, 0) + count
        return {"started_at": self.started_at, "returned": returned, "total_returned": self.total_returned,
                "cancelled": self.cancelled,
                "left": [item for b in self.batches for item in b.left],
                "batches": [{**asdict(b), "total_returned": b.total_returned} for b in self.batches]}


def redirector(transport: SqlQueueTransport, redirects: Mapping[str, str]) -> Callable[[QueueAddress], QueueAddress]:
    """``{"A": "B"}`` as a function: messages that failed in A go to B (addresses compared as the dialect does)."""
    pairs = [(transport.address(a), transport.address(b)) for a, b in redirects.items()]

    def redirect(target: QueueAddress) -> QueueAddress:
        for source, destination in pairs:
            if transport.dialect.same_queue(target, source):
                return destination
        return target

    return redirect


def retry_in_batches(transport: SqlQueueTransport, error_queue: str | QueueAddress, plan: BatchPlan, *,
                     allowed: Callable[[QueueAddress], bool], redirects: Mapping[str, str] | None = None,
                     where: FailedFilter | None = None, on_batch: Callable[[BatchRecord], None] | None = None,
                     should_stop: Callable[[], bool] = lambda: False, clock: Callable[[], float] = time.time,
                     sleep: Callable[[float], None] = time.sleep,
                     positions: Sequence[Position] | None = None) -> BatchSummary:
    """Walk the error queue oldest first in batches as ``plan`` says; return each message to its (redirected)
    FailedQ when ``allowed``; see the module docstring for the rate limit and cancellation.

    ``positions``: only these messages (``where`` is then ignored); one no longer there is left with the reason.
    """
    redirect = redirector(transport, redirects or {})
    chosen = sorted(dict.fromkeys(positions), key=lambda p: p.seq) if positions is not None else None
    summary = BatchSummary(started_at=clock())
    after = 0
    counted = 0
    for number, size in enumerate(plan.sizes(), start=1):
        if plan.max_messages is not None:
            size = min(size, plan.max_messages - counted)
            if size <= 0:
                break
        if should_stop():
            summary.cancelled = True
            break
        if chosen is not None:
            page: list[Any] = chosen[counted:counted + size]
        else:
            page = failed_page(transport, error_queue, after_seq=after, limit=size, where=where, headers_chars=1,
                               body_bytes=1)
        if not page:
            break
        if plan.rate_per_second is not None:
            wait = summary.started_at + (counted + len(page)) / plan.rate_per_second - clock()
            if wait > 0:
                sleep(wait)
        started = clock()
        returned, left = retry_batch(transport, error_queue, [Position(p.seq, p.id) for p in page], allowed,
                                     redirect)
        record = BatchRecord(number, started, clock(), len(page), returned, left)
        summary.batches.append(record)
        counted += len(page)
        after = page[-1].seq
        if on_batch is not None:
            on_batch(record)
    return summary
