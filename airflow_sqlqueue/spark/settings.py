"""Every Spark setting of the job, in one place: the fixed ones and those derived from the input.

* ``SESSION_CONF``: set on every session made here (``session.local_session``) and passed to spark-submit
  (``submit.spark_submit_arguments``): no UI, UTC, adaptive query execution on. No shuffle partition count:
  that one is derived from the input.
* ``input_size(inputs)``: the Parquet files of a run (count and bytes) when they are local, else ``None``.
* ``run_conf(size, cores, dataset=...)``: the SQL settings of one run, from its input: how many bytes a read task
  takes (files are packed by size, not one task per file), and the shuffle partitions to start from (adaptive
  execution then merges small ones). The job sets them for the run and restores the session's own afterwards.
* ``driver_memory(size, dataset=...)``: the heap of a local session (``local[*]``: the driver runs everything).

Sizing measured on 2 cores (docs/spark.md#settings-and-sizing), 1,000,000 messages (243 MB of Parquet): the
summary reads three narrow columns and runs in the default 1 GB heap; the full typed dataset (bodies decoded,
duplicates removed by a window, no cache) ran in the 1,488 MB ``driver_memory`` derives.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass

MIB = 1024 * 1024
#: Fixed settings of every session and submit: no UI or progress bars, UTC, adaptive query execution.
SESSION_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.adaptive.coalescePartitions.enabled": "true",
    "spark.sql.adaptive.advisoryPartitionSizeInBytes": "64m",
}
#: Bytes a read task takes at most / at least (Parquet bytes on disk; decoded rows are about 3x bigger).
MAX_READ_BYTES = 128 * MIB
MIN_READ_BYTES = 4 * MIB
#: Read tasks per core to aim for (more: better balance on a busy machine; fewer: less per-task overhead).
READ_TASKS_PER_CORE = 2
#: Shuffle bytes per partition to start from (adaptive execution merges partitions up to 64 MB).
SHUFFLE_BYTES_PER_PARTITION = 32 * MIB
#: Decoded bytes a shuffle moves per Parquet byte read: the whole row (dataset) or a few narrow columns (summary).
SHUFFLE_FACTOR = {True: 4.0, False: 0.5}
#: Heap of a local driver: the JVM's overhead plus this many heap bytes per input byte (dataset only).
BASE_HEAP = 1024 * MIB
DATASET_HEAP_PER_INPUT_BYTE = 2.0
MAX_HEAP = 8192 * MIB


@dataclass(frozen=True)
class InputSize:
    """The Parquet files of a run: how many, and their bytes on disk."""

    files: int
    bytes: int


def input_size(inputs: Iterable[str]) -> InputSize | None:
    """Count the Parquet files under local ``inputs`` (files or folders, hidden ``.``/``_`` names skipped as Spark
    skips them); ``None`` when one of them is remote (Spark then sizes the read itself)."""
    files = total = 0
    for raw in inputs:
        path = raw[len("file://"):] if raw.startswith("file://") else raw[len("file:"):] if raw.startswith(
            "file:") else raw
        if "://" in path:
            return None
        if os.path.isfile(path):
            files, total = files + 1, total + os.path.getsize(path)
            continue
        for folder, dirs, names in os.walk(path):
            dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
            for name in names:
                if not name.startswith((".", "_")):
                    files, total = files + 1, total + os.path.getsize(os.path.join(folder, name))
    return InputSize(files, total)


def _clamp(value: float, low: int, high: int) -> int:
    return int(min(max(value, low), high))


def run_conf(size: InputSize | None, cores: int, *, dataset: bool) -> dict[str, str]:
    """The SQL settings of one run, derived from its input and the cores Spark has (``defaultParallelism``).

    * ``spark.sql.files.maxPartitionBytes``: the input split over ``READ_TASKS_PER_CORE`` tasks per core, between
      4 and 128 MB; ``spark.sql.files.openCostInBytes``: the average file size, so that many small batch files
      are packed into a task by their size (Spark's 4 MB default counts a 90 KB batch file as 4 MB).
    * ``spark.sql.shuffle.partitions``: the bytes the shuffles move (estimated from the input) over 32 MB, at
      least one per core; adaptive execution merges the small ones after each shuffle.

    Unknown size (remote input): only the shuffle start (Spark's default, merged by adaptive execution).
    """
    cores = max(int(cores), 1)
    if size is None or size.files == 0:
        return {}
    read = _clamp(size.bytes / (cores * READ_TASKS_PER_CORE), MIN_READ_BYTES, MAX_READ_BYTES)
    open_cost = _clamp(size.bytes / size.files, 64 * 1024, 4 * MIB)
    shuffle = max(cores, math.ceil(size.bytes * SHUFFLE_FACTOR[dataset] / SHUFFLE_BYTES_PER_PARTITION))
    return {
        "spark.sql.files.maxPartitionBytes": str(read),
        "spark.sql.files.openCostInBytes": str(open_cost),
        "spark.sql.shuffle.partitions": str(_clamp(shuffle, cores, 4000)),
    }


def driver_memory(size: InputSize | None, *, dataset: bool) -> str:
    """``spark.driver.memory`` of a local session (``local[*]``): 1 GB, plus 2 bytes per input byte for the
    dataset (up to 8 GB). On a cluster, size executors instead (docs/spark.md#sizing)."""
    heap = BASE_HEAP
    if dataset and size is not None:
        heap = _clamp(BASE_HEAP + size.bytes * DATASET_HEAP_PER_INPUT_BYTE, BASE_HEAP, MAX_HEAP)
    return f"{math.ceil(heap / MIB)}m"
