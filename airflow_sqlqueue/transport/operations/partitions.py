"""Partitioned drain: split a backlog into disjoint ranges of positions that separate receivers drain in parallel.

``plan_partitions`` reads the oldest and newest position of a queue (two index seeks, no locks) and cuts that span
into N ranges of equal width. Every claim of a partition is restricted to its range (``receive_range``), so two
partitions never take the same row, whatever their timing; within a partition, receivers still skip each other's
locked rows. Messages sent after the plan have higher positions: with ``open_end=False`` (the default) they wait
for the next run, with ``open_end=True`` the last partition has no upper end and drains them too.

N comes from the depth when not given: ``ceil(depth / messages_per_partition)``, at most ``max_partitions``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..common.validation import check_count
from ..tables.queue import SeqRange, TableQueue
from ..tables.session import Session

__all__ = ["DEFAULT_MAX_PARTITIONS", "DEFAULT_MESSAGES_PER_PARTITION", "Partition", "partition_count",
           "plan_partitions"]

#: Messages per partition when the number of partitions is derived from the depth.
DEFAULT_MESSAGES_PER_PARTITION = 100_000
#: Upper bound of a derived number of partitions (each is a mapped task holding connections).
DEFAULT_MAX_PARTITIONS = 8


@dataclass(frozen=True)
class Partition:
    """One of ``count`` disjoint parts of a queue's backlog: positions ``first`` to ``last`` (None: no end).

    JSON-serialisable with ``as_dict`` / ``from_dict`` (an XCom between the plan and the mapped drains).
    """

    queue: str
    index: int
    count: int
    first: int
    last: int | None

    @property
    def seq_range(self) -> SeqRange:
        return SeqRange(self.first, self.last)

    def as_dict(self) -> dict[str, Any]:
        return {"queue": self.queue, "index": self.index, "count": self.count, "first": self.first,
                "last": self.last}

    @classmethod
    def from_dict(cls, value: Any) -> Partition:
        """A partition from ``as_dict()`` output; a clear error for anything else."""
        if isinstance(value, Partition):
            return value
        keys = ("queue", "index", "count", "first", "last")
        if not isinstance(value, dict) or set(value) != set(keys):
            raise ValueError(f"a partition is a dict with the keys {', '.join(keys)} (an item of the plan task's "
                             f"output); got {str(value)[:120]!r}")
        partition = cls(**{k: value[k] for k in keys})
        if not isinstance(partition.queue, str) or type(partition.index) is not int or \
                type(partition.count) is not int or not 0 <= partition.index < partition.count:
            raise ValueError(f"partition {value!r} is not valid: index must be in 0..count-1 and queue a name")
        partition.seq_range  # noqa: B018 - checks first/last
        return partition


def partition_count(depth: int, *, messages_per_partition: int = DEFAULT_MESSAGES_PER_PARTITION,
                    max_partitions: int = DEFAULT_MAX_PARTITIONS) -> int:
    """Partitions for a backlog of ``depth`` messages: one per ``messages_per_partition``, 1 to ``max_partitions``."""
    check_count(depth, "depth", minimum=0)
    check_count(messages_per_partition, "messages_per_partition")
    check_count(max_partitions, "max_partitions")
    return max(1, min(max_partitions, math.ceil(depth / messages_per_partition)))


def split(queue: str, bounds: SeqRange, count: int, *, open_end: bool = False) -> list[Partition]:
    """``count`` ranges of equal width covering ``bounds`` (fewer when the span is narrower than ``count``)."""
    assert bounds.last is not None
    span = bounds.last - bounds.first + 1
    count = max(1, min(count, span))
    width = math.ceil(span / count)
    count = math.ceil(span / width)  # after rounding the width up, the last ranges may be empty: drop them
    parts = []
    for index in range(count):
        first = bounds.first + index * width
        last = min(first + width - 1, bounds.last)
        parts.append(Partition(queue, index, count, first, None if open_end and index == count - 1 else last))
    return parts


def plan_partitions(session: Session, queue: TableQueue, *, partitions: int | None = None,
                    messages_per_partition: int = DEFAULT_MESSAGES_PER_PARTITION,
                    max_partitions: int = DEFAULT_MAX_PARTITIONS, open_end: bool = False) -> list[Partition]:
    """Split the current backlog of ``queue`` into disjoint partitions (an empty list when the queue is empty).

    :param partitions: how many; None derives it from the depth (``partition_count``).
    :param open_end: the last partition has no upper end (it also drains messages sent after the plan).
    """
    check_count(partitions, "partitions", allow_none=True)
    bounds = session.run(queue.bounds, what=f"read the positions of {queue.name!r}", read_only=True)
    if bounds is None:
        return []
    assert bounds.last is not None
    depth = bounds.last - bounds.first + 1  # the peek estimate: the same figure `peek` reports
    count = partitions or partition_count(depth, messages_per_partition=messages_per_partition,
                                          max_partitions=max_partitions)
    return split(queue.name, bounds, count, open_end=open_end)
