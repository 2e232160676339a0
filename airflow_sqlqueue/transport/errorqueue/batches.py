"""How a batched retry runs and what it did: the plan (batch size, ramp, rate), and a record per batch.

The walk itself is ``ErrorQueue.retry_in_batches``: each batch is one transaction that returns what it can; the
rate limit holds at every batch boundary (batch *k* ends no sooner than ``(messages in batches 1..k) / rate``
seconds after the run started), and a stop asked for is honoured before every batch and during every wait.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

MAX_BATCH = 10_000
#: The slowest rate a batched retry accepts (one message every 100 s) and the fastest (a million a second).
MIN_RATE, MAX_RATE = 0.01, 1_000_000.0


@dataclass(frozen=True)
class BatchPlan:
    """How fast to retry.

    :param batch_size: messages per transaction at full speed (1 to 10,000).
    :param ramp_start: the first batch's size, doubled each batch up to ``batch_size`` (None: full size at once).
    :param rate_per_second: at most this many messages per second, measured from the first batch (None: no
        limit; else 0.01 to 1,000,000).
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
                                 or not MIN_RATE <= rate <= MAX_RATE):
            raise ValueError(f"rate_per_second must be a number of messages per second from {MIN_RATE} (one every "
                             f"{1 / MIN_RATE:.0f} s) to {MAX_RATE:,.0f}, got {rate!r}")

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
    #: The native Ids of the messages returned (a message's page lists the batched retries that returned it).
    returned_ids: list[str] = field(default_factory=list)

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
                "batches": [{**{k: v for k, v in asdict(b).items() if k != "returned_ids"},
                             "total_returned": b.total_returned} for b in self.batches]}
