"""Where error archives live: a location (a local directory or a URI ``pyarrow.fs`` understands), one folder per
archive holding its Parquet files (columns: ``archive_schema()``) and its ``manifest.json``.

A local file is written under a hidden name, fsync'ed, renamed into place and its directory fsync'ed; an object
store gets one complete PUT per file. Either way a file is whole or absent. Archive ids are checked against a
strict pattern before they are joined to a path, so an id from a request can never name another folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import Any

from airflow_sqlqueue.extras import require

MANIFEST = "manifest.json"
_ARCHIVE_ID = re.compile(r"^[0-9A-Za-z][0-9A-Za-z_.-]{0,99}$")


class ArchiveRefusedError(ValueError):
    """An archive or restore that cannot be done as asked (said why and how to fix it); nothing was changed."""


@cache
def archive_schema() -> Any:
    """The columns of an archive's Parquet files (pyarrow is loaded only when an archive is used)."""
    import pyarrow as pa

    return pa.schema([
        ("id", pa.string()), ("seq", pa.int64()), ("correlation_id", pa.string()), ("reply_to_address", pa.string()),
        ("recoverable", pa.bool_()), ("expires", pa.string()),
        ("headers", pa.binary()), ("headers_type", pa.string()), ("body", pa.binary()), ("body_type", pa.string()),
        ("time_of_failure", pa.timestamp("us", tz="UTC")), ("failed_q", pa.string()), ("exception_type", pa.string()),
        ("message_type", pa.string()), ("headers_length", pa.int64()), ("body_length", pa.int64()),
        ("body_preview", pa.binary()),
    ])


def browse_columns() -> list[str]:
    """Every column but the bodies (what a browse reads)."""
    return [n for n in archive_schema().names if n != "body"]


class ArchiveLocationError(ValueError):
    """A location or archive id that cannot be used (said how to fix it); nothing was changed."""


def check_archive_id(archive_id: str) -> str:
    """``archive_id`` when it is a plain folder name (letters, digits, ``_.-``, at most 100), else an error."""
    if not isinstance(archive_id, str) or not _ARCHIVE_ID.match(archive_id) or ".." in archive_id:
        raise ArchiveLocationError("an archive id is letters, digits, '_', '.' and '-' (at most 100, no '..'), "
                                   "as `sqlqueue archives list` shows it")
    return archive_id


@dataclass(frozen=True)
class ArchiveStore:
    """One location's file system and base path."""

    fs: Any
    base: str
    location: str

    @classmethod
    def open(cls, location: str) -> ArchiveStore:
        """The store of a local path, ``file://`` URI or any URI ``pyarrow.fs.FileSystem.from_uri`` accepts."""
        require("pyarrow", "the error archive")
        import pyarrow.fs as pafs

        if not isinstance(location, str) or not location.strip():
            raise ArchiveLocationError("the archive location is empty: give a local directory or a URI such as "
                                       "s3://bucket/error-archive")
        text = location.strip()
        if "://" not in text:
            return cls(pafs.LocalFileSystem(), os.path.abspath(text), text)
        try:
            fs, base = pafs.FileSystem.from_uri(text)
        except (ValueError, OSError) as exc:
            raise ArchiveLocationError(f"the archive location {text!r} is not a URI pyarrow can open ({exc}); give "
                                       "a local directory or a URI such as s3://bucket/error-archive") from None
        return cls(fs, base.rstrip("/"), text)

    @property
    def local(self) -> bool:
        import pyarrow.fs as pafs

        return isinstance(self.fs, pafs.LocalFileSystem)

    def path(self, archive_id: str, name: str = "") -> str:
        folder = f"{self.base}/{check_archive_id(archive_id)}"
        return f"{folder}/{name}" if name else folder

    def archive_ids(self) -> list[str]:
        """Every folder at the location that holds a manifest, newest id first (ids start with their UTC time)."""
        import pyarrow.fs as pafs

        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.base, allow_not_found=True))
        except OSError as exc:
            raise ArchiveLocationError(f"cannot list the archive location {self.location!r}: {exc}") from None
        ids = [i.base_name for i in infos if i.type == pafs.FileType.Directory and _ARCHIVE_ID.match(i.base_name)]
        found = [i for i in ids if self.fs.get_file_info(self.path(i, MANIFEST)).type == pafs.FileType.File]
        return sorted(found, reverse=True)

    @contextmanager
    def parquet_file(self, archive_id: str, name: str) -> Iterator[Any]:
        """One of an archive's Parquet files, open for reading (a ``pyarrow.parquet.ParquetFile``)."""
        import pyarrow.parquet as pq

        with self.fs.open_input_file(self.path(archive_id, name)) as f:
            yield pq.ParquetFile(f)

    def make_folder(self, archive_id: str) -> None:
        self.fs.create_dir(self.path(archive_id), recursive=True)

    def write_bytes(self, archive_id: str, name: str, data: bytes) -> None:
        """Write a whole file (atomic rename and fsync locally, one PUT on an object store)."""
        final = self.path(archive_id, name)
        if not self.local:
            with self.fs.open_output_stream(final) as out:
                out.write(data)
            return
        temp = self.path(archive_id, f".{name}.tmp")
        with open(temp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, final)
        self.sync_folder(archive_id)

    def sync_folder(self, archive_id: str) -> None:
        """fsync a local archive's folder (a rename or a new file is durable after this); nothing remotely."""
        if self.local:
            directory = os.open(self.path(archive_id), os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)

    def sync_file(self, archive_id: str, name: str) -> None:
        """fsync one local file (an object store's PUT is complete when its stream closed)."""
        if self.local:
            with open(self.path(archive_id, name), "rb+") as f:
                os.fsync(f.fileno())

    def read_bytes(self, archive_id: str, name: str) -> bytes:
        with self.fs.open_input_stream(self.path(archive_id, name)) as f:
            return f.read()

    def sha256(self, archive_id: str, name: str) -> tuple[str, int]:
        """SHA-256 and size of a file, read in 1 MiB pieces."""
        digest, size = hashlib.sha256(), 0
        with self.fs.open_input_stream(self.path(archive_id, name)) as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
        return digest.hexdigest(), size

    def read_manifest(self, archive_id: str) -> dict[str, Any]:
        """An archive's manifest (ArchiveLocationError when there is none)."""
        try:
            data = self.read_bytes(archive_id, MANIFEST)
        except (FileNotFoundError, OSError):
            raise ArchiveLocationError(f"there is no archive {archive_id!r} at {self.location!r} (see `sqlqueue "
                                       "archives list`)") from None
        manifest = json.loads(data)
        if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
            raise ArchiveLocationError(f"{archive_id!r} at {self.location!r} is not an error archive")
        return manifest

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        self.write_bytes(manifest["archive_id"], MANIFEST,
                         json.dumps(manifest, ensure_ascii=True, separators=(",", ":")).encode("ascii"))

    def manifests(self) -> Iterator[dict[str, Any]]:
        """Every readable manifest at the location, newest first."""
        for archive_id in self.archive_ids():
            try:
                yield self.read_manifest(archive_id)
            except (ArchiveLocationError, ValueError):
                continue


MANIFEST_FORMAT = "airflow-sqlqueue-error-archive/1"
