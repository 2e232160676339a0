"""Waiting for the next message on a queue: push wake-ups on PostgreSQL, file watching on SQLite, polling elsewhere.

On PostgreSQL a queue can carry an opt-in trigger (``create_queue(..., notify=True)`` or ``enable_notifications``)
that sends ``NOTIFY sqlqueue`` at commit, whoever the sender is (.NET endpoints included: what they write is
unchanged), but only while a watcher waits: a waiting watcher holds the queue's wake-up lock on its listening
connection, and releases it when woken (a busy watcher costs senders nothing; see ``create_wake_function`` in
``postgres.sql`` for why no send is missed; while one sender's notification is in flight the others rely on it, so
one transaction per queue at a time takes the global notify lock). A watcher that finds the trigger listens and
wakes as soon as a message is committed; it asks for wake-ups (takes the lock) only when it is about to sleep, so
a watcher whose looks keep finding messages makes no sender notify. On SQLite a committed write changes the
database's files (the WAL, or the main file): on Linux the watcher is woken by inotify on their directory
(``file_events``, through the C library) as any process writes them, then looks at the files every
``HOT_CHECK_INTERVAL`` for a while (the commit is visible once the WAL index's header changes, a little after the
write); elsewhere it stats them every ``FILE_CHECK_INTERVAL`` seconds, which costs no query, and at once when a
write transaction of its own process ends (``LOCAL_WRITES``; blocking waits only). Either way it looks at the
queue when they changed (a write to another table of the same file wakes it too: one extra look).

Every watcher still polls, in case a wake-up is missed (a dropped connection, a sender that bypasses the table's
triggers, a file system that does not update times): at ``poll_interval`` after a look that found messages,
doubling after each empty look up to ``max_poll_interval`` while the queue is idle. Push and file watching cut
the latency, not the idle load: an idle watcher runs the same number of queries as a polling one.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from typing import Any

from ..common.redaction import first_line
from ..common.threads import finish_in_thread
from ..common.validation import check_seconds
from ..tables.queue import TableQueue
from ..tables.session import LOCAL_WRITES, Session, close_quietly
from .file_events import FileEvents, open_file_events

log = logging.getLogger(__name__)

#: Seconds between two looks at a SQLite database's files (a stat each: no query, no lock). 20 ms keeps a send ->
#: wake-up under 10 ms at the median, for about 1% of a core per idle watcher (0.2 s: 0.1%, 10 ms: 1.3%, measured).
FILE_CHECK_INTERVAL = 0.02
#: With inotify (Linux), which wakes a watcher at once on any process's write, the files are still stat'ed this
#: often, in case an event is not raised (a belt: none was missed in the tests and benchmarks).
EVENT_CHECK_INTERVAL = 0.5


#: Bytes of the WAL index (``-shm``) header read with each look at the files: its change counter and last frame
#: change when a commit becomes visible to readers, which is after the WAL file was written (and synced).
WAL_INDEX_HEADER = 48
#: After a write event (inotify), how long the files are looked at every ``HOT_CHECK_INTERVAL`` seconds: the event
#: comes when the WAL is written, the commit is visible only once it is synced and the WAL index updated.
HOT_SECONDS = 0.2
HOT_CHECK_INTERVAL = 0.002
#: Times in a row a watcher that asks for wake-ups may find rows and let go of the lock at once (busy again); then
#: it keeps it once, so a watcher whose looks find none of those rows cannot loop.
MAX_PEEKED = 8
#: Looks before arming that may find rows in a row (a busy watcher arms no wake-ups; bounded should the
#: caller's receives keep finding none of them).
MAX_LOOKED = 64


#: Read-only descriptors of WAL index (``-shm``) files, by path: (device, inode) -> descriptor, opened once per
#: file and NEVER closed. Closing any descriptor of a file releases every POSIX lock the process holds on it
#: (fcntl semantics), including SQLite's own locks on the ``-shm`` of the connections this process has open (the
#: trigger's claims): another process then believes it is the only user, resets the WAL index and commits are
#: lost (https://www.sqlite.org/howtocorrupt.html, 2.2). A file replaced under the same path gets a new
#: descriptor; the old one is closed only once the file is deleted (no process can open it any more).
_SHM_DESCRIPTORS: dict[tuple[int, int], int] = {}
_SHM_LOCK = threading.Lock()


def _close_deleted() -> None:
    """Close the descriptors of ``-shm`` files that were deleted (under ``_SHM_LOCK``)."""
    for key, fd in list(_SHM_DESCRIPTORS.items()):
        try:
            deleted = os.fstat(fd).st_nlink == 0
        except OSError:
            deleted = True
        if deleted:
            del _SHM_DESCRIPTORS[key]
            try:
                os.close(fd)
            except OSError:
                pass


def _read_wal_index_header(shm: str) -> bytes | None:
    """The first ``WAL_INDEX_HEADER`` bytes of ``shm`` through a descriptor that stays open (see
    ``_SHM_DESCRIPTORS``); None when the file is not there."""
    try:
        st = os.stat(shm)
    except OSError:
        return None
    key = (st.st_dev, st.st_ino)
    with _SHM_LOCK:
        fd = _SHM_DESCRIPTORS.get(key)
        if fd is None:
            _close_deleted()
            try:
                fd = os.open(shm, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return None
            opened = os.fstat(fd)
            key = (opened.st_dev, opened.st_ino)  # the file opened, if it was replaced since the stat
            if key in _SHM_DESCRIPTORS:  # never close a descriptor of a file SQLite may hold locks on
                fd = _SHM_DESCRIPTORS[key]
            else:
                _SHM_DESCRIPTORS[key] = fd
    try:
        return os.pread(fd, WAL_INDEX_HEADER, 0)
    except OSError:
        return None


def _signature(paths: list[str]) -> tuple[Any, ...]:
    """What changes when a transaction commits into these files: modification time, size and inode of each, and
    the WAL index's header (the ``-shm`` file beside a ``-wal``, read without closing a descriptor of it)."""
    out: list[Any] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            out.append(None)
        else:
            out.append((st.st_mtime_ns, st.st_size, st.st_ino))
        if path.endswith("-wal"):
            out.append(_read_wal_index_header(path[:-4] + "-shm"))
    return tuple(out)


class Wakeups:
    """Tells a watcher of one queue when to look again. Not thread-safe: one watcher, one ``Wakeups``.

    :param poll_interval: seconds between polls while messages arrive (and the fallback period with push).
    :param max_poll_interval: the longest pause while the queue stays empty (default: 4 x ``poll_interval``);
        equal to ``poll_interval`` for no back-off.
    :param push: listen for wake-ups when the queue has the trigger (PostgreSQL), watch the database's files
        (SQLite); False always polls.
    """

    def __init__(self, session: Session, queue: TableQueue, poll_interval: float,
                 max_poll_interval: float | None = None, *, push: bool = True) -> None:
        check_seconds(poll_interval, "poll_interval")
        check_seconds(max_poll_interval, "max_poll_interval", allow_none=True)
        self.poll_interval = float(poll_interval)
        self.max_poll_interval = 4 * self.poll_interval if max_poll_interval is None else float(max_poll_interval)
        if self.max_poll_interval < self.poll_interval:
            raise ValueError(f"max_poll_interval={max_poll_interval} is below poll_interval={poll_interval}; "
                             "give a value at least as large (or leave it out for 4 x poll_interval)")
        self.session = session
        self.queue = queue
        self.dialect = session.dialect
        self._want_push = push and self.dialect.supports_notify
        self._want_files = push and self.dialect.supports_file_watch
        self._files: list[str] = []
        self._events: FileEvents | None = None
        #: Until when (monotonic) to look at the files every HOT_CHECK_INTERVAL (after a write event).
        self._hot_until = 0.0
        self._seen: tuple[Any, ...] = ()
        self._listener: Any = None
        self._pause = self.poll_interval
        self._checked = False
        #: When to try listening again after a failed attempt (the database was down): push comes back by itself.
        self._retry_at: float | None = None
        #: Whether senders notify for this queue: this listener holds its wake-up lock ("held"), another watcher
        #: does ("other"), or neither could be made sure of ("none"); None: not asked since the last wake-up.
        self._covered: str | None = None
        #: Re-armings in a row that found rows and let go of the lock again (at MAX_PEEKED the next one keeps it).
        self._peeked = 0
        #: Looks in a row, before arming, that found rows (at MAX_LOOKED the next wait arms without looking).
        self._looked = 0
        #: Wake-ups received for this queue (for logs and tests).
        self.woken = 0
        #: Times this watcher asked senders to notify (took or found the wake-up lock) before waiting.
        self.covers = 0

    @property
    def push(self) -> bool:
        """Whether this watcher is listening for wake-ups now."""
        return self._listener is not None

    @property
    def watching_files(self) -> bool:
        """Whether this watcher wakes when the database's files change (SQLite)."""
        return bool(self._files)

    # -- setup -----------------------------------------------------------------------------------
    def start(self) -> bool:
        """Listen when the queue has its wake-up trigger (call before the first poll). Listening asks senders for
        nothing: the first wait asks for wake-ups, then looks once more, so no send between the caller's poll and
        that wait is missed. Returns whether push is on. Blocks: run it in a thread."""
        self._checked = True
        self._retry_at = None
        if self._want_files and not self._files:
            self._watch_files()
        if not self._want_push or self._listener is not None:
            return self.push
        address = self.queue.address
        try:
            installed = self.session.run(lambda cur: self.dialect.notify_installed(cur, address),
                                         what=f"wake-up trigger of {self.queue.name!r}", read_only=True)
            if not installed:
                return False
            connection = self.session.dedicated()
            try:
                # Listening only: senders notify once the first wait asks for wake-ups (and looks after asking).
                # Asking here would keep every sender notifying for as long as the caller's looks find messages,
                # which under a steady stream is until the next empty look (it never reaches wait to let go).
                self.dialect.listen(connection)
            except Exception:
                close_quietly(connection)
                raise
            self._listener = connection
        except Exception as exc:  # noqa: BLE001 - push is an optimisation: poll instead, say why, try again later
            log.warning("wake-ups for %s are off, polling every %.1f s and listening again in %.1f s: %s",
                        self.queue.name, self.poll_interval, self.max_poll_interval, first_line(exc))
            self._retry_at = time.monotonic() + self.max_poll_interval
        return self.push

    def _start_due(self) -> bool:
        """Whether to (try to) listen before this wait: never tried, or the last try failed long enough ago."""
        return not self._checked or (self._retry_at is not None and time.monotonic() >= self._retry_at)

    def _watch_files(self) -> None:
        try:
            files = self.session.run(self.dialect.database_files, what="database files", read_only=True)
        except Exception as exc:  # noqa: BLE001 - an optimisation: poll instead, say why
            log.warning("file wake-ups for %s are off, polling: %s", self.queue.name, first_line(exc))
            return
        if files and os.path.exists(files[0]):
            self._files = files
            self._seen = _signature(files)
            self._events = open_file_events(files[0])

    def changed(self) -> bool:
        """Whether the watched files changed since the last look (and remember them as seen)."""
        now = _signature(self._files)
        if now == self._seen:
            return False
        self._seen = now
        return True

    def describe(self) -> str:
        """How this watcher learns of new messages, for one log line (call after ``start``)."""
        fallback = (f"every {self.poll_interval:g} s after messages, backing off to {self.max_poll_interval:g} s "
                    "while idle")
        if self.push:
            return f"woken on each send (LISTEN), with a fallback poll {fallback}"
        if self._files and self._events is not None:
            return (f"woken when the database's files are written (inotify, and a stat every "
                    f"{EVENT_CHECK_INTERVAL:g} s), with a fallback poll {fallback}")
        if self._files:
            return (f"woken when the database's files change (checked every {FILE_CHECK_INTERVAL:g} s without a "
                    f"query), with a fallback poll {fallback}")
        hint = (" (install the wake-up trigger to be woken on each send: `sqlqueue create QUEUE --notify` or "
                "transport.enable_notifications)") if self._want_push else ""
        return f"polling {fallback}{hint}"

    def close(self) -> None:
        """Stop listening (the connection is closed, which releases its wake-up lock) and watching the files."""
        self._covered = None
        events, self._events = self._events, None
        if events is not None:
            events.close()
        listener, self._listener = self._listener, None
        if listener is not None:
            close_quietly(listener)

    # -- waiting ---------------------------------------------------------------------------------
    def next_pause(self, found: bool) -> float:
        """The polling pause after a poll that ``found`` messages (or not): the idle back-off."""
        self._pause = self.poll_interval if found else min(self._pause * 2, self.max_poll_interval)
        return self.poll_interval if found else self._pause

    def wait(self, found: bool) -> bool:
        """Block until it is time to poll again; True when a wake-up for this queue came first.

        Returns on the first wake-up (push, or a change of the watched files) or after the back-off pause. With
        push, a wait that is not asking yet looks at the queue on its listening connection (rows: True at once, the
        caller is busy again), else asks for wake-ups (waits for the senders' open transactions) and looks once
        more: rows, and it lets go of the lock and returns True; none, and it waits holding it (every later send
        notifies) until woken, when it lets go. So the lock is held only while the watcher sleeps. When another
        watcher holds the lock (or it could not be made sure of), it returns True for one more look of the
        caller's, and waits at the next call.
        """
        if self._start_due():
            self.start()
        listener = self._listener
        if listener is None:
            pause = self.next_pause(found)
            if not self._files:
                time.sleep(pause)
                return False
            deadline = time.monotonic() + pause
            while (left := deadline - time.monotonic()) > 0:
                seen = LOCAL_WRITES.count
                if self.changed():
                    self.woken += 1
                    return True
                events = self._events
                if events is not None:  # any process's write ends the wait (once visible: the hot looks)
                    hot = time.monotonic() < self._hot_until
                    if events.wait(min(HOT_CHECK_INTERVAL if hot else EVENT_CHECK_INTERVAL, left)):
                        self._hot_until = time.monotonic() + HOT_SECONDS
                    elif events.closed:
                        return False  # close() ended the wait
                else:  # a write of this process ends the wait at once; other processes' are seen at the next stat
                    LOCAL_WRITES.wait(seen, min(FILE_CHECK_INTERVAL, left))
            self.changed()
            return False
        try:
            if self._covered is None:
                if self._looked < MAX_LOOKED and self.dialect.queue_has_rows(listener, self.queue.address):
                    # Rows came since the caller's look: it is busy again without arming (no lock wait for the
                    # senders' transactions, no notification, no covered wait at the next arming).
                    self._looked += 1
                    return True
                self._looked = 0
                # "held", "other", or "none" when a sender's open transaction kept the lock past lock_timeout
                self._covered = self.dialect.hold_wakeups(listener, self.queue.address) or "none"
                self.covers += 1
                # Wake-ups that came meanwhile are for commits the look below sees: drop them, or each would start
                # one more wake cycle (and, while it is armed, more senders would notify).
                while self.dialect.notifications(listener, 0):
                    pass
                if self._covered != "held" or self._peeked >= MAX_PEEKED:
                    self._peeked = 0
                    # Senders notify from now on; a send committed since the caller's last look did not: look again.
                    return True
                if self.dialect.queue_has_rows(listener, self.queue.address):
                    # Messages came meanwhile: the caller is busy again at once. Held, the lock would keep every
                    # sender notifying for as long as it works (it calls wait again only once the queue is empty).
                    self.dialect.release_wakeups(listener, self.queue.address)
                    self._covered = None
                    self._peeked += 1  # a bound, should its looks keep finding none of them: then keep the lock
                    return True
                # Held, and the look after asking found nothing: every send committed before it is in that look, every
                # later one notifies. Wait now: returning for one more look of the caller's would leave the lock held
                # while it works should that look find a send of the instant between (under a steady stream, every
                # sender would notify, one transaction after another, until its next empty look).
                self._peeked = 0
            pause = self.next_pause(found)
            deadline = time.monotonic() + pause
            while (left := deadline - time.monotonic()) > 0 and self._listener is listener:
                payloads = self.dialect.notifications(listener, left)
                if any(self.dialect.is_wakeup_for(p, self.queue.address) for p in payloads):
                    self.woken += 1
                    if self._covered == "held":  # busy now: senders stop notifying until a watcher waits again
                        self.dialect.release_wakeups(listener, self.queue.address)
                    self._covered = None
                    return True
            if self._covered != "held":
                self._covered = None  # another watcher held the lock: ask again before the next wait
            return False
        except Exception as exc:  # noqa: BLE001 - a lost listener: poll, and listen again next time
            if self._listener is not listener:
                return False  # close() ended the wait (the trigger stopped): nothing was lost
            log.warning("wake-up listener of %s lost (%s); listening again", self.queue.name, first_line(exc))
            self.close()
            self._checked = False
            return False

    async def wait_async(self, found: bool) -> bool:
        """``wait`` for an event loop: sleeps on the loop while polling, waits in a thread while listening."""
        if self._start_due():
            await finish_in_thread(self.start)  # a listener it opens is seen by close()
        if self._listener is not None:
            return await asyncio.to_thread(self.wait, found)
        pause = self.next_pause(found)
        if not self._files:
            await asyncio.sleep(pause)
            return False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + pause
        while (left := deadline - loop.time()) > 0:
            if self.changed():  # a stat or two: cheap enough for the event loop
                self.woken += 1
                return True
            events = self._events
            if events is None:
                await asyncio.sleep(min(FILE_CHECK_INTERVAL, left))
                continue
            hot = time.monotonic() < self._hot_until
            if await events.wait_async(min(HOT_CHECK_INTERVAL if hot else EVENT_CHECK_INTERVAL, left)):
                self._hot_until = time.monotonic() + HOT_SECONDS
            elif events.closed:
                return False
        self.changed()
        return False
