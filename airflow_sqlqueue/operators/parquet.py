"""Drained batches as Parquet files: the drain operator's ``output_path`` and the input of the Spark job.

A local directory gets each file written under a hidden name, fsync'ed, renamed into place and the directory
fsync'ed; an object store (``s3://...``, an ``ObjectStoragePath``) gets one complete PUT per file. Either way a
file is whole or absent, and is never overwritten.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from functools import cache
from operator import attrgetter
from typing import Any

from airflow_sqlqueue.extras import require
from airflow_sqlqueue.transport import ReceivedMessage
from airflow_sqlqueue.transport.wire.headers import escape_surrogates


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
    """One batch as an Arrow table in ``batch_schema``, one array per column.

    Each column is one ``pa.array`` over a list read off the messages with ``attrgetter`` (no per-row Python
    function): the Headers column as stored (no re-encoding) and one repeated queue name when the batch comes from
    one queue (a drain's always does). Only messages whose headers were changed after the receive are re-encoded,
    and only a batch holding a lone surrogate (read from a stored ``"\\ud800"`` escape) is escaped row by row.
    """
    import pyarrow as pa

    schema = batch_schema()
    n = len(messages)
    headers = list(map(_headers_text, messages))
    if None in headers:  # headers changed after the receive (a forward header taken out): encoded again
        headers = [text if text is not None else json.dumps(m.headers, ensure_ascii=False, separators=(",", ":"))
                   for text, m in zip(headers, messages, strict=True)]
    try:
        header_array = pa.array(headers, pa.string())
    except (UnicodeEncodeError, pa.ArrowException):  # a lone surrogate: kept as its escape, the exact headers
        header_array = pa.array([escape_surrogates(text) for text in headers], pa.string())
    queues = set(map(_queue, messages))
    if len(queues) == 1:
        queue_array = pa.repeat(pa.scalar(queues.pop(), pa.string()), n)
    else:
        queue_array = pa.array(list(map(_queue, messages)), pa.string())
    columns = [
        _id_array(messages),
        pa.array(list(map(_seq, messages)), pa.int64()),
        queue_array,
        header_array,
        pa.array(list(map(_body, messages)), pa.binary()),
        pa.repeat(pa.scalar(received_at, schema.field("received_at").type), n),
    ]
    return pa.Table.from_arrays(columns, schema=schema)


#: A canonical UUID text (lower-case, hyphenated): what PostgreSQL's ``id::text`` returns, kept as it is.
CANONICAL_ID = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"


def _id_array(messages: list[ReceivedMessage]) -> Any:
    """The Id column: the ids as the driver returned them when every one is canonical UUID text (checked once
    over the column by Arrow, not by a regular expression per row), else ``id_text`` of each message."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        ids = pa.array(list(map(_native_id, messages)), pa.string())
    except (pa.ArrowException, TypeError):  # UUID objects (SQL Server), or ids of other types
        ids = None
    if ids is None or ids.null_count or not pc.all(pc.match_substring_regex(ids, CANONICAL_ID)).as_py():
        ids = pa.array([m.id_text for m in messages], pa.string())
    return ids


_native_id = attrgetter("native_id")
_headers_text = attrgetter("headers_text")
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

    def write(self, messages: list[ReceivedMessage], name: str) -> str:
        """Write one batch as a complete file under ``name``; return its path (never overwrites).

        The table is built column by column (one ``pa.array`` per column from a list, no per-row objects), so a
        file holds one batch in memory once: ``batch_size`` rows of Arrow buffers while it is written.
        """
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = batch_table(messages, datetime.now(timezone.utc))
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
