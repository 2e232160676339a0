"""Drained batches as Parquet files: the drain operator's ``output_path`` and the input of the Spark job.

A local directory gets each file written under a hidden name, fsync'ed, renamed into place and the directory
fsync'ed; an object store (``s3://...``, an ``ObjectStoragePath``) gets one complete PUT per file. Either way a
file is whole or absent, and is never overwritten.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime, timezone
from functools import cache
from operator import attrgetter
from typing import Any

from airflow_sqlqueue.extras import require
from airflow_sqlqueue.transport import ReceivedColumns, ReceivedMessage
from airflow_sqlqueue.transport.wire.headers import escape_surrogates
from airflow_sqlqueue.transport.wire.messages import headers_text, id_text


@cache
def batch_schema() -> Any:
    """The columns of a drained batch: id, seq, queue, headers (JSON text), body (binary), received_at (UTC)."""
    import pyarrow as pa

    return pa.schema([("id", pa.string()), ("seq", pa.int64()), ("queue", pa.string()), ("headers", pa.string()),
                      ("body", pa.binary()), ("received_at", pa.timestamp("us", tz="UTC"))])


#: Dictionary encoding only where values repeat (the queue), statistics only where a reader filters (positions,
#: times): Ids, headers and bodies are unique per row, so both would be work for nothing.
WRITE_OPTIONS: dict[str, Any] = {"use_dictionary": ["queue"], "write_statistics": ["seq", "received_at"]}


def batch_table(messages: list[ReceivedMessage], received_at: datetime) -> Any:
    """One batch of messages as an Arrow table in ``batch_schema``, one array per column.

    Each column is one ``pa.array`` over a list read off the messages with ``attrgetter`` (no per-row Python
    function): the Headers column as stored (no re-encoding: only messages whose headers were changed after the
    receive are encoded again) and one repeated queue name when the batch comes from one queue (a drain's always
    does). ``columns_table`` builds the same table from a batch received as columns.
    """
    import pyarrow as pa

    queues = set(map(_queue, messages))
    if len(queues) == 1:
        queue_array = pa.repeat(pa.scalar(queues.pop(), pa.string()), len(messages))
    else:
        queue_array = pa.array(list(map(_queue, messages)), pa.string())
    return _table(list(map(_native_id, messages)), list(map(_seq, messages)), queue_array,
                  list(map(headers_text, messages)), list(map(_body, messages)), received_at)


def columns_table(batch: ReceivedColumns, received_at: datetime) -> Any:
    """A batch received as columns (``Claim(..., columns=True)``) as an Arrow table in ``batch_schema``: the
    same table ``batch_table`` builds from the same rows received as messages, each column one ``pa.array`` over
    the list the receive filled."""
    import pyarrow as pa

    queue_array = pa.repeat(pa.scalar(batch.queue, pa.string()), len(batch))
    return _table(batch.ids, batch.seqs, queue_array, batch.headers, batch.bodies, received_at)


def _table(ids: Sequence[Any], seqs: Sequence[int], queue_array: Any, headers: Sequence[str],
           bodies: Sequence[bytes | None], received_at: datetime) -> Any:
    """The batch table from its columns; only a batch holding a lone surrogate in its headers (read from a stored
    ``"\\ud800"`` escape) is escaped row by row."""
    import pyarrow as pa

    schema = batch_schema()
    try:
        header_array = pa.array(headers, pa.string())
    except (UnicodeEncodeError, pa.ArrowException):  # a lone surrogate: kept as its escape, the exact headers
        header_array = pa.array([escape_surrogates(text) for text in headers], pa.string())
    columns = [
        _id_array(ids),
        pa.array(seqs, pa.int64()),
        queue_array,
        header_array,
        pa.array(bodies, pa.binary()),
        pa.repeat(pa.scalar(received_at, schema.field("received_at").type), len(seqs)),
    ]
    return pa.Table.from_arrays(columns, schema=schema)


#: A canonical UUID text (lower-case, hyphenated): what PostgreSQL's ``id::text`` returns, kept as it is.
CANONICAL_ID = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"


def _id_array(native_ids: Sequence[Any]) -> Any:
    """The Id column: the ids as the driver returned them when every one is canonical UUID text (checked once
    over the column by Arrow, not by a regular expression per row), else ``id_text`` of each."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        ids = pa.array(native_ids, pa.string())
    except (pa.ArrowException, TypeError):  # UUID objects (SQL Server), or ids of other types
        ids = None
    if ids is None or ids.null_count or not pc.all(pc.match_substring_regex(ids, CANONICAL_ID)).as_py():
        ids = pa.array([id_text(native_id) for native_id in native_ids], pa.string())
    return ids


_native_id = attrgetter("native_id")
_queue = attrgetter("queue")
_seq = attrgetter("seq")
_body = attrgetter("body")


class ParquetBatchWriter:
    """Where drained batches go: a local directory (atomic rename) or an object store (one PUT per file)."""

    def __init__(self, output_path: Any) -> None:
        require("pyarrow", "the drain to Parquet (output_path)")  # before any message is received
        text = str(output_path)
        self.local: str | None = None
        self.remote: Any = None
        self._made = False  # the local directory was made (once, not at every batch)
        protocol = getattr(output_path, "protocol", None)
        if protocol is not None and protocol not in ("file", "local"):
            self.remote = output_path
        elif "://" in text and not text.startswith("file://"):
            from airflow.sdk import ObjectStoragePath

            self.remote = ObjectStoragePath(text)
        else:
            path = getattr(output_path, "path", None) if protocol is not None else None
            self.local = os.path.abspath(path or (text[len("file://"):] if text.startswith("file://") else text))

    def __str__(self) -> str:
        return self.local or str(self.remote)

    def write(self, batch: list[ReceivedMessage] | ReceivedColumns, name: str) -> str:
        """Write one batch (messages, or the columns of ``transport.drain(..., columns=True)``: the same file) as
        a complete file under ``name``; return its path (never overwrites).

        The table is built column by column (one ``pa.array`` per column from a list, no per-row objects), so a
        file holds one batch in memory once: ``batch_size`` rows of Arrow buffers while it is written.
        """
        received_at = datetime.now(timezone.utc)
        if isinstance(batch, ReceivedColumns):
            return self._store(columns_table(batch, received_at), name)
        return self._store(batch_table(batch, received_at), name)

    def _store(self, table: Any, name: str) -> str:
        """``table`` as the complete file ``name``: a hidden file fsync'ed and renamed (and the directory
        fsync'ed), or one PUT."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self.remote is not None:
            sink = pa.BufferOutputStream()
            pq.write_table(table, sink, **WRITE_OPTIONS)
            final = self.remote / name
            final.write_bytes(sink.getvalue().to_pybytes())
            return str(final)
        assert self.local is not None
        if not self._made:
            os.makedirs(self.local, exist_ok=True)
            self._made = True
        final_path = os.path.join(self.local, name)
        temp = os.path.join(self.local, f".{name}.tmp")
        with open(temp, "wb") as f:
            pq.write_table(table, f, **WRITE_OPTIONS)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, final_path)
        directory = os.open(self.local, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
        return final_path
