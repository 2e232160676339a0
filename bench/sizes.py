"""How big each case is, from the command line (``--quick`` for a smoke run)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    """Message counts and repeats of a run.

    :param single: messages of the one-per-transaction cases (each is a commit: keep it modest).
    :param messages: messages of the batched and drain cases.
    :param peek_small: the small backlog of the peek case; ``backlog`` the large one (also the purge table).
    :param peek_calls: peeks timed per sample.
    :param purge: expired rows in the ``backlog``-row purge table.
    :param memory: message counts of the drain-to-Parquet memory case.
    :param memory_batch: messages per Parquet file (receive batch) in the memory case.
    """

    single: int = 2_000
    messages: int = 20_000
    peek_small: int = 1_000
    backlog: int = 1_000_000
    peek_calls: int = 2_000
    purge: int = 100_000
    memory: tuple[int, ...] = (100_000, 1_000_000)
    memory_batch: int = 1_000
    repeats: int = 9
    memory_repeats: int = 3


QUICK = Sizes(single=40, messages=400, peek_small=100, backlog=4_000, peek_calls=40, purge=400,
              memory=(1_000, 4_000), memory_batch=200, repeats=1, memory_repeats=1)
