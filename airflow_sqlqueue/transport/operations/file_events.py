"""Linux inotify through the C library (``ctypes``: no dependency): a file descriptor that becomes readable when a
SQLite database's files are written, by any process on this machine.

A watcher of a SQLite queue wakes on it at once instead of at its next ``stat`` of the files. It watches the
files' directory (the ``-wal`` file may not exist yet, and SQLite deletes and re-creates it), and an event counts
only for the database's own files (``name``, ``name-wal``, ``name-journal``): writes through ``mmap`` (the
``-shm`` index) raise no event, and other files of the directory are ignored. Where inotify is not there (another
system, the per-user limit of inotify instances reached, a file system that does not report), ``open_file_events``
returns None and the watcher stats the files instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import os
import select
import struct
import sys
import threading
import time
from collections.abc import Iterator

log = logging.getLogger(__name__)

IN_MODIFY = 0x002
IN_CLOSE_WRITE = 0x008
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = 0o2000000
_MASK = IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE
_HEADER = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then len bytes of name)

_libc: ctypes.CDLL | None = None


def _load_libc() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    return _libc


class FileEvents:
    """Writes to one SQLite database's files, as they happen (inotify on their directory). One thread waits at a
    time; ``close`` may come from another (the descriptor is closed once that wait ends, never under it)."""

    def __init__(self, database: str) -> None:
        libc = _load_libc()
        directory, name = os.path.split(os.path.abspath(database))
        self._names = {os.fsencode(name + suffix) for suffix in ("", "-wal", "-journal")}
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1: " + os.strerror(ctypes.get_errno()))
        if libc.inotify_add_watch(fd, os.fsencode(directory or "."), _MASK) < 0:
            error = ctypes.get_errno()
            os.close(fd)
            raise OSError(error, f"inotify_add_watch {directory!r}: {os.strerror(error)}")
        self._fd: int | None = fd
        self._lock = threading.Lock()
        self._busy = False
        self._closing = False

    @contextlib.contextmanager
    def using(self) -> Iterator[int | None]:
        """The descriptor (None once closed), kept open until the block ends."""
        with self._lock:
            if self._closing or self._fd is None:
                yield None
                return
            self._busy = True
        try:
            yield self._fd
        finally:
            with self._lock:
                self._busy = False
                fd = self._fd if self._closing else None
                if fd is not None:
                    self._fd = None
            if fd is not None:
                os.close(fd)

    def _read(self, fd: int) -> bool:
        found = False
        while True:
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                return found
            offset = 0
            while offset + _HEADER.size <= len(data):
                _, _, _, length = _HEADER.unpack_from(data, offset)
                name = data[offset + _HEADER.size:offset + _HEADER.size + length].rstrip(b"\0")
                found = found or name in self._names
                offset += _HEADER.size + length

    def read(self) -> bool:
        """Take the events that arrived (without waiting): True when one was a write to the database's files."""
        with self.using() as fd:
            return fd is not None and self._read(fd)

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; True when the database's files were written meanwhile (or before,
        since the last ``read``). False at once once closed."""
        with self.using() as fd:
            if fd is None:
                return False
            deadline = time.monotonic() + timeout
            while True:
                if self._read(fd):
                    return True
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    return self._read(fd)

    async def wait_async(self, timeout: float) -> bool:
        """``wait`` on the event loop (a reader on the descriptor and a timer, no thread). A cancellation always
        ends it (``asyncio.wait_for`` before Python 3.12 returns the result instead when the wait it cancels has
        just ended: a cancelled trigger would go on watching)."""
        with self.using() as fd:
            if fd is None:
                return False
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while True:
                if self._read(fd):
                    return True
                left = deadline - loop.time()
                if left <= 0:
                    return False
                ready = asyncio.Event()
                loop.add_reader(fd, ready.set)
                timer = loop.call_later(left, ready.set)
                try:
                    await ready.wait()
                finally:
                    timer.cancel()
                    loop.remove_reader(fd)

    @property
    def closed(self) -> bool:
        return self._closing

    def close(self) -> None:
        """Stop watching (at once, or when the wait in progress ends)."""
        with self._lock:
            self._closing = True
            fd = self._fd if not self._busy else None
            if fd is not None:
                self._fd = None
        if fd is not None:
            os.close(fd)


def open_file_events(database: str) -> FileEvents | None:
    """Inotify on ``database``'s files, or None where it cannot be had (then stat the files)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return FileEvents(database)
    except (OSError, AttributeError) as exc:  # AttributeError: a C library without inotify
        log.debug("no inotify for %s (stat the files instead): %s", database, exc)
        return None
