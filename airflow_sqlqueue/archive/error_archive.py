"""Archive failed messages by age or group to Parquet with a manifest, then delete them; browse and restore.

Order that loses nothing:

1. The manifest is written with status ``writing`` (the archive exists, nothing is deleted yet).
2. The error queue is walked oldest first (``failed_page``: grouping fields read in SQL); each selected row is read
   whole (``archive_rows``) and written to Parquet in row groups, a batch at a time (memory stays bounded).
3. The files are closed and fsync'ed, read back and checked (row count, every position in order) and hashed; the
   manifest is written with status ``written``, the positions, message ids and file checksums.
4. Only then are exactly the archived rows deleted by position and Id, a batch per transaction; the manifest
   records how far deletion went after each batch, and ends ``deleted``.

A crash before step 3 leaves rows in the queue and an archive that stays ``writing`` (never restorable, listed
as incomplete). A crash during step 4 is finished by the next run at the same location (``resume_deletes``,
called first by ``archive_failed``): rows are never in two restorable archives, and a row another session
removed between steps 3 and 4 is listed in the manifest's ``not_found`` and never restored.

A row is selected when it matches the group filter and, when a cut-off is given, its ``NServiceBus.TimeOfFailure``
reads as a time before the cut-off: a row whose time cannot be read is not older than anything (archive it by group
or selection). Restore puts rows back into the error queue with the same Id, headers and body, once: restored ids
are recorded in the manifest (the batch a crash left unsure is checked against the table).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ..transport.common.errors import QueueNotFoundError
from ..transport.errorqueue.error_queue import ErrorQueue
from ..transport.errorqueue.previews import MAX_PAGE, FailedFilter, Position, clean_text
from ..transport.wire.address import QueueAddress
from ..transport.wire.headers import parse_wire_time
from .browser import archive_page, list_archives, read_archive, summary
from .store import MANIFEST_FORMAT, ArchiveLocationError, ArchiveRefusedError, ArchiveStore, archive_schema

if TYPE_CHECKING:
    from ..transport.transport import SqlQueueTransport

MAX_BATCH = 10_000
MAX_GROUPS = 1_000
#: Body bytes kept beside each body for browsing (an archive is paged without reading its bodies).
ARCHIVE_PREVIEW_BYTES = 1_024
#: Rows per Parquet file of an archive (a larger archive gets several files).
ROWS_PER_FILE = 100_000
#: Consecutive selected rows further apart than this are read by separate range reads (never many unselected rows).
_GAP = 8

@dataclass(frozen=True)
class ArchiveSelection:
    """Which failed messages to archive: older than ``cutoff`` (aware UTC) and/or matching ``where``."""

    cutoff: datetime | None = None
    where: FailedFilter | None = None
    max_messages: int | None = None

    def __post_init__(self) -> None:
        if self.cutoff is not None and (not isinstance(self.cutoff, datetime) or self.cutoff.tzinfo is None):
            raise ArchiveRefusedError(f"the cut-off must be a datetime with a time zone (UTC), got {self.cutoff!r}")
        if self.cutoff is None and not any((self.where or FailedFilter()).params().values()):
            raise ArchiveRefusedError("say what to archive: a cut-off (older_than) and/or a group (FailedQ, exception "
                                      "type, message type or search text); archiving the whole error queue "
                                      "without either is refused")
        top = 2**62
        if self.max_messages is not None and (isinstance(self.max_messages, bool) or not isinstance(
                self.max_messages, int) or not 1 <= self.max_messages <= top):
            raise ArchiveRefusedError(f"max_messages must be a whole number from 1 to {top:,}, got "
                                      f"{self.max_messages!r}")

    def as_dict(self) -> dict[str, Any]:
        return {"cutoff": self.cutoff.astimezone(timezone.utc).isoformat() if self.cutoff else None,
                "filter": (self.where or FailedFilter()).described(),
                "max_messages": self.max_messages}


def _check_batch(batch_size: int) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= MAX_BATCH:
        raise ArchiveRefusedError(f"batch_size must be a whole number from 1 to {MAX_BATCH:,}, got {batch_size!r}")
    return batch_size


def time_of_failure(text: str | None) -> datetime | None:
    """A ``NServiceBus.TimeOfFailure`` value as an aware UTC time, or None when it cannot be read."""
    if not text:
        return None
    try:
        return parse_wire_time(text)
    except (ValueError, TypeError, OverflowError):
        return None


def _text(value: Any) -> tuple[str | None, bool]:
    """A database value as exact text (bytes must be valid UTF-8): (text, ok)."""
    if value is None:
        return None, True
    if isinstance(value, bytes | bytearray | memoryview):
        try:
            return bytes(value).decode("utf-8"), True
        except UnicodeDecodeError:
            return None, False
    if isinstance(value, datetime):
        return value.isoformat(), True
    return str(value), True


def _bytes(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return str(value).encode("utf-8", "surrogatepass")


def _runs(seqs: list[int]) -> Iterator[tuple[int, int]]:
    """(first, last) of runs of positions no further than ``_GAP`` apart."""
    start = prev = seqs[0]
    for seq in seqs[1:]:
        if seq - prev > _GAP:
            yield start, prev
            start = seq
        prev = seq
    yield start, prev


def new_archive_id(now: datetime | None = None) -> str:
    """``YYYYmmddTHHMMSSZ-<8 hex>``: sorts by creation time."""
    return f"{(now or datetime.now(timezone.utc)):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"


class _Parts:
    """The Parquet files of one archive being written, a row group per batch."""

    def __init__(self, store: ArchiveStore, archive_id: str, rows_per_file: int) -> None:
        self.store, self.archive_id, self.rows_per_file = store, archive_id, rows_per_file
        self.files: list[dict[str, Any]] = []
        self._writer: Any = None
        self._stream: Any = None

    def write(self, columns: dict[str, list[Any]]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.table(columns, schema=archive_schema())
        offset = 0
        while offset < table.num_rows:
            if self._writer is None:
                name = f"part-{len(self.files):05d}.parquet"
                self.files.append({"path": name, "rows": 0})
                self._stream = self.store.fs.open_output_stream(self.store.path(self.archive_id, f".{name}.tmp"))
                self._writer = pq.ParquetWriter(self._stream, archive_schema(), compression="zstd")
            take = min(table.num_rows - offset, self.rows_per_file - self.files[-1]["rows"])
            self._writer.write_table(table.slice(offset, take))
            self.files[-1]["rows"] += take
            offset += take
            if self.files[-1]["rows"] >= self.rows_per_file:
                self._close()

    def _close(self) -> None:
        if self._writer is None:
            return
        self._writer.close()
        self._stream.close()
        self._writer = self._stream = None
        name = self.files[-1]["path"]
        self.store.sync_file(self.archive_id, f".{name}.tmp")
        self.store.fs.move(self.store.path(self.archive_id, f".{name}.tmp"), self.store.path(self.archive_id, name))

    def finish(self) -> list[dict[str, Any]]:
        self._close()
        self.store.sync_folder(self.archive_id)
        return self.files


def _read_rows(errors: ErrorQueue, selected: list[int]) -> list[Any]:
    rows: list[Any] = []
    for first, last in _runs(selected):
        rows += errors.whole_rows(first, last)
    wanted = set(selected)
    return [r for r in rows if int(r[9]) in wanted]


def _columns(rows: list[Any], previews: dict[int, Any], manifest: dict[str, Any],
             groups: dict[tuple[Any, ...], int]) -> dict[str, list[Any]]:
    columns: dict[str, list[Any]] = {n: [] for n in archive_schema().names}
    for raw_id, correlation, reply_to, recoverable, expires, headers_type, headers, body_type, body, seq in rows:
        seq = int(seq)
        id_text, id_ok = _text(raw_id)
        expires_text, expires_ok = _text(expires)
        if not id_ok or not expires_ok or not id_text:
            manifest["skipped"].append({"seq": seq, "reason": "its Id or Expires is not UTF-8 text; it stays in "
                                                              "the error queue"})
            continue
        preview = previews[seq]
        when = time_of_failure(preview.time_of_failure)
        header_bytes, body_bytes = _bytes(headers) or b"", _bytes(body)
        values = {
            "id": id_text, "seq": seq, "correlation_id": _text(correlation)[0], "reply_to_address": _text(reply_to)[0],
            "recoverable": None if recoverable is None else bool(recoverable), "expires": expires_text,
            "headers": header_bytes, "headers_type": str(headers_type), "body": body_bytes, "body_type": str(body_type),
            "time_of_failure": when, "failed_q": preview.failed_q, "exception_type": preview.exception_type,
            "message_type": preview.message_type, "headers_length": len(header_bytes),
            "body_length": len(body_bytes or b""), "body_preview": (body_bytes or b"")[:ARCHIVE_PREVIEW_BYTES]}
        for name, value in values.items():
            columns[name].append(value)
        manifest["seqs"].append(seq)
        manifest["ids"].append(id_text)
        if when is not None:
            stamp = when.isoformat()
            manifest["min_time_of_failure"] = min(manifest["min_time_of_failure"] or stamp, stamp)
            manifest["max_time_of_failure"] = max(manifest["max_time_of_failure"] or stamp, stamp)
        key = (preview.failed_q, preview.exception_type, preview.message_type)
        if key in groups or len(groups) < MAX_GROUPS:
            groups[key] = groups.get(key, 0) + 1
    return columns


def _verify(store: ArchiveStore, manifest: dict[str, Any]) -> None:
    """Read every file back: row counts and positions as recorded, in order; record sizes and checksums."""
    at = 0
    for entry in manifest["files"]:
        with store.parquet_file(manifest["archive_id"], entry["path"]) as reader:
            if reader.metadata.num_rows != entry["rows"]:
                raise OSError(f"archive file {entry['path']} holds {reader.metadata.num_rows} rows, not "
                              f"{entry['rows']}: nothing was deleted")
            for batch in reader.iter_batches(columns=["seq", "id"], batch_size=4096):
                seqs, ids = batch.column(0).to_pylist(), batch.column(1).to_pylist()
                if seqs != manifest["seqs"][at:at + len(seqs)] or ids != manifest["ids"][at:at + len(ids)]:
                    raise OSError(f"archive file {entry['path']} does not hold the rows read: nothing was deleted")
                at += len(seqs)
        entry["sha256"], entry["bytes"] = store.sha256(manifest["archive_id"], entry["path"])
    if at != len(manifest["seqs"]):
        raise OSError("the archive files hold fewer rows than were read: nothing was deleted")


def _delete(transport: SqlQueueTransport, store: ArchiveStore, manifest: dict[str, Any], batch_size: int,
            resumed: bool) -> None:
    """Delete the archived rows by position and Id, a batch per transaction, recording progress after each."""
    errors = transport.errors(manifest["queue"])
    progress = manifest["delete"]
    start = progress["done"]
    total = len(manifest["seqs"])
    for k in range(start, total, batch_size):
        chunk = list(zip(manifest["seqs"][k:k + batch_size], manifest["ids"][k:k + batch_size], strict=True))
        missing = [(p.seq, p.id) for p in errors.delete_found(Position(s, i) for s, i in chunk)]
        if resumed and k == start:
            # a crash may have committed this batch before its progress was recorded: rows not found are ours
            progress["unsure_batch_missing"] = len(missing)
            missing = []
        manifest["not_found"] += [[s, i] for s, i in missing]
        progress["done"] = k + len(chunk)
        manifest["deleted"] += len(chunk) - len(missing)
        store.write_manifest(manifest)
    manifest["status"] = "deleted"
    manifest["finished_at"] = datetime.now(timezone.utc).isoformat()
    store.write_manifest(manifest)


def resume_deletes(transport: SqlQueueTransport, error_queue: str | QueueAddress, location: str,
                   batch_size: int = 500) -> list[str]:
    """Finish the deletion of every archive of ``error_queue`` at ``location`` that a crash left ``written``."""
    store = ArchiveStore.open(location)
    name = transport.name(error_queue)
    done = []
    for manifest in store.manifests():
        if manifest.get("status") == "written" and manifest.get("queue") == name and \
                manifest.get("database") == transport.dialect.name:
            _delete(transport, store, manifest, _check_batch(batch_size), resumed=True)
            done.append(manifest["archive_id"])
    return done


def archive_failed(transport: SqlQueueTransport, error_queue: str | QueueAddress, location: str,
                   selection: ArchiveSelection, *, batch_size: int = 500, rows_per_file: int = ROWS_PER_FILE,
                   before_delete: Callable[[dict[str, Any]], None] | None = None,
                   on_batch: Callable[[int], None] | None = None,
                   labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Archive the selected failed messages of ``error_queue`` to ``location``, then delete them; the summary.

    Deletions a crash left unfinished at this location are finished first (their ids are in ``resumed``).
    ``before_delete`` is called with the verified manifest just before rows are deleted (a seam for tests and
    for callers that copy the archive elsewhere first). ``on_batch`` gets the number of rows of each batch written.
    ``labels`` are stored in the manifest as they are (e.g. the Airflow connection id the archive was made through).
    """
    _check_batch(batch_size)
    if not isinstance(rows_per_file, int) or rows_per_file < 1:
        raise ArchiveRefusedError(f"rows_per_file must be a whole number above 0, got {rows_per_file!r}")
    table = transport.book.queue(error_queue)
    if not transport.exists(table.address):
        raise QueueNotFoundError(f"error queue {table.name!r} does not exist; check its name (and schema): nothing "
                                 "was archived")
    store = ArchiveStore.open(location)
    errors = transport.errors(table.address)
    resumed = resume_deletes(transport, table.address, location, batch_size)
    archive_id = new_archive_id()
    manifest: dict[str, Any] = {
        "format": MANIFEST_FORMAT, "archive_id": archive_id, "created_at": datetime.now(timezone.utc).isoformat(),
        "queue": table.name, "database": transport.dialect.name, "labels": dict(labels or {}),
        "selection": selection.as_dict(),
        "status": "writing", "files": [], "rows": 0, "seqs": [], "ids": [], "min_time_of_failure": None,
        "max_time_of_failure": None, "groups": [], "skipped": [], "deleted": 0, "not_found": [],
        "delete": {"done": 0}, "restored": [], "restore_pending": [], "restores": []}
    store.make_folder(archive_id)
    store.write_manifest(manifest)
    parts = _Parts(store, archive_id, rows_per_file)
    groups: dict[tuple[Any, ...], int] = {}
    after, looked = 0, 0
    limit = selection.max_messages
    while limit is None or len(manifest["seqs"]) < limit:
        size = batch_size if limit is None else min(batch_size, limit - len(manifest["seqs"]))
        page = errors.page(after_seq=after, limit=min(size, MAX_PAGE), where=selection.where, headers_chars=1,
                           body_bytes=1)
        if not page:
            break
        looked += len(page)
        after = page[-1].seq
        chosen = {p.seq: p for p in page if selection.cutoff is None or (
            (when := time_of_failure(p.time_of_failure)) is not None and when < selection.cutoff)}
        if not chosen:
            continue
        rows = _read_rows(errors, sorted(chosen))
        columns = _columns(rows, chosen, manifest, groups)
        if columns["id"]:
            parts.write(columns)
            if on_batch is not None:
                on_batch(len(columns["id"]))
        del rows, columns
    manifest["files"] = parts.finish()
    manifest["rows"] = len(manifest["seqs"])
    manifest["looked_at"] = looked
    if not manifest["seqs"]:  # nothing selected: no empty archive is left behind (a daily run would pile them up)
        store.fs.delete_dir(store.path(archive_id))
        manifest["status"] = "empty"
        return {**summary(manifest), "location": store.location, "resumed": resumed}
    manifest["groups"] = [{"failed_q": k[0], "exception_type": k[1], "message_type": k[2], "count": n}
                          for k, n in sorted(groups.items(), key=lambda kv: -kv[1])]
    _verify(store, manifest)
    manifest["status"] = "written"
    store.write_manifest(manifest)
    if before_delete is not None:
        before_delete(manifest)
    _delete(transport, store, manifest, batch_size, resumed=False)
    return {**summary(manifest), "location": store.location, "resumed": resumed}


def _archived_rows(store: ArchiveStore, manifest: dict[str, Any], wanted: set[str]) -> Iterator[dict[str, Any]]:
    for entry in manifest["files"]:
        with store.parquet_file(manifest["archive_id"], entry["path"]) as reader:
            for batch in reader.iter_batches(batch_size=256):
                ids = batch.column(batch.schema.get_field_index("id")).to_pylist()
                if not wanted.intersection(ids):
                    continue
                yield from (row for row in batch.to_pylist() if row["id"] in wanted)


def _restore_params(transport: SqlQueueTransport, row: dict[str, Any]) -> dict[str, Any]:
    headers: Any = row["headers"]
    if not transport.dialect.loose_types:
        headers = headers.decode("utf-8", "surrogatepass")
    return {"id": row["id"], "correlation_id": row["correlation_id"], "reply_to_address": row["reply_to_address"],
            "recoverable": row["recoverable"], "expires": row["expires"], "headers": headers,
            "headers_type": row["headers_type"], "body": row["body"], "body_type": row["body_type"]}


def restore_archive(transport: SqlQueueTransport, location: str, archive_id: str, *,
                    ids: Iterable[str] | None = None, batch_size: int = 500,
                    error_queue: str | QueueAddress | None = None) -> dict[str, Any]:
    """Put archived messages (all, or the chosen native ``ids``) back into the archive's error queue, once each.

    Ids already restored are skipped (``already``); unknown ids are refused before anything changes. Each batch is
    recorded in the manifest before and after its transaction, so a crash leaves at most one batch unsure, and the
    next restore checks that batch's ids against the table before inserting them.
    """
    _check_batch(batch_size)
    store = ArchiveStore.open(location)
    manifest = store.read_manifest(archive_id)
    if manifest.get("status") != "deleted":
        raise ArchiveRefusedError(
            f"archive {archive_id!r} is {manifest.get('status')!r}, not 'deleted': "
            + ("its files were never completed and its messages are still in the queue"
               if manifest.get("status") == "writing" else
               "its deletion did not finish; run the archive again at this location to finish it first"))
    if manifest.get("database") != transport.dialect.name:
        raise ArchiveRefusedError(f"archive {archive_id!r} was made on {manifest.get('database')}, this connection "
                                  f"is {transport.dialect.name}: restore it through a connection to its database")
    table = transport.book.queue(manifest["queue"])
    if error_queue is not None and not transport.dialect.same_queue(transport.address(error_queue), table.address):
        raise ArchiveRefusedError(f"archive {archive_id!r} holds messages of {manifest['queue']!r}; they go back "
                                  "only to that error queue")
    archived = set(manifest["ids"]) - {i for _, i in manifest["not_found"]}
    if ids is None:
        chosen = archived
    else:
        chosen = set(ids)
        unknown = sorted(chosen - archived)
        if unknown:
            shown = ", ".join(clean_text(str(i))[0] or "" for i in unknown[:20])
            raise ArchiveRefusedError(f"{len(unknown)} ids are not restorable messages of archive {archive_id!r} "
                                      f"(nothing was restored): {shown}")
    already = chosen & set(manifest["restored"])
    unsure = set(manifest.get("restore_pending", []))
    wanted = chosen - already
    errors = transport.errors(table.address)
    restored = present = 0
    batch: list[dict[str, Any]] = []

    def flush() -> None:
        nonlocal restored, present
        manifest["restore_pending"] = [r["id"] for r in batch]
        store.write_manifest(manifest)

        added, there = errors.restore((_restore_params(transport, row) for row in batch), unsure)
        restored += added
        present += there
        manifest["restored"] += [r["id"] for r in batch]
        manifest["restore_pending"] = []
        store.write_manifest(manifest)
        batch.clear()

    for row in _archived_rows(store, manifest, wanted):
        batch.append(row)
        if len(batch) >= batch_size:
            flush()
    if batch:
        flush()
    manifest["restores"].append({"at": datetime.now(timezone.utc).isoformat(), "restored": restored,
                                 "already_present": present, "already_restored": len(already)})
    store.write_manifest(manifest)
    return {"archive_id": archive_id, "queue": manifest["queue"], "restored": restored, "already_present": present,
            "already_restored": len(already), "total_restored": len(manifest["restored"])}


__all__ = ["ArchiveLocationError", "ArchiveRefusedError", "ArchiveSelection", "archive_failed", "archive_page",
           "list_archives", "read_archive", "restore_archive", "resume_deletes", "summary", "time_of_failure"]
