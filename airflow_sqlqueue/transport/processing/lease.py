"""Leases: claimed rows held outside the queue, not in an open transaction (SQLite's event trigger).

On SQLite a claim's open transaction holds the database's one write lock: while the event trigger waited (about 2 s)
for Airflow to store an event, every sender waited too. A leased claim instead moves its batch, in the short claim
transaction, from the queue into the lease table (``SqlQueueLeases`` beside the queue) under an owner and a lease
end that the live owner renews. Once Airflow stored the event the owner deletes the rows; a failed event's rows go
back into the queue at their positions (the same seq), a rejected one's to the error queue.

The rows of an owner that is gone (its lease ended, or its process on this host no longer runs) are put back into
their queue, at their positions, by the next claim of that queue that looks (``recover``, in the claim's transaction
before it locks rows): a trigger looks at its first claim, then every ``RECOVER_EVERY`` seconds while messages come
(an idle watcher makes no extra statement). Being older than any row sent since, they are emitted first, in queue
order. A live owner never loses its lease while it renews (every ``RENEW_EVERY`` seconds, for ``LEASE_SECONDS``), so
two live triggers never emit the same row.

Every method blocks: the trigger calls them through ``asyncio.to_thread``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from ..dialects import Dialect
from ..tables.session import Session
from ..wire.address import QueueAddress

log = logging.getLogger(__name__)

#: How long a lease lasts without renewal (seconds), how often a live owner renews it, and how often a trigger
#: looks for leases of owners that are gone (besides its first claim).
LEASE_SECONDS = 60.0
RENEW_EVERY = 15.0
RECOVER_EVERY = 60.0

#: Owners alive in this process (an owner of this pid not in here was closed or belonged to an earlier run).
_LIVE: set[str] = set()
_LIVE_LOCK = threading.Lock()


def _start_time(pid: int) -> str | None:
    """The start time of a process (clock ticks since boot, /proc), "" where /proc is missing, None when the
    process does not exist. With the pid it names one process even after the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except FileNotFoundError:
        if not os.path.isdir("/proc/self"):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return None
            except PermissionError:
                pass
            return ""
        return None
    except (OSError, IndexError):
        return ""


def new_owner() -> str:
    """An owner name: ``host/pid/process start/random`` (what ``owner_alive`` reads)."""
    pid = os.getpid()
    return f"{socket.gethostname()}/{pid}/{_start_time(pid) or ''}/{uuid.uuid4().hex[:12]}"


def owner_alive(owner: str, until: float, now: float) -> bool:
    """Whether an owner may still hold its leases: its lease has not ended and, on this host, its process runs
    (the same pid and start time; in this process, an owner not closed yet)."""
    if until < now:
        return False
    host, _, rest = owner.partition("/")
    pid_text, _, rest = rest.partition("/")
    started = rest.partition("/")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return True  # another host: only the lease's end tells
    pid = int(pid_text)
    if pid == os.getpid():
        with _LIVE_LOCK:
            return owner in _LIVE
    found = _start_time(pid)
    return found is not None and (found == started or "" in (found, started))


class Leases:
    """The leases one owner holds on one queue, in the lease table beside it.

    :param session: the transport's session.
    :param dialect: its dialect (one with the lease statements: SQLite).
    :param address: the queue.
    :param name: the queue's name as its rows are recorded under (``dialect.format_address``).
    """

    def __init__(self, session: Session, dialect: Dialect, address: QueueAddress, name: str) -> None:
        self.session = session
        self.dialect = dialect
        self.address = address
        self.name = name
        self.ids = dialect.identifiers(address)
        self.owner = new_owner()
        self._held = 0  # rows this owner leases (renewed while > 0)
        with _LIVE_LOCK:
            _LIVE.add(self.owner)

    @property
    def held(self) -> int:
        return self._held

    def create(self) -> None:
        """Create the lease table unless it exists."""
        self.session.run(lambda cur: self.dialect.execute(cur, "create_lease_table", None, **self.ids),
                         what="create the lease table")

    def _params(self, seqs: Sequence[int] | None = None, **more: Any) -> dict[str, Any]:
        return {"queue_name": self.name, "owner": self.owner,
                "seqs": None if seqs is None else self.dialect.seq_list_param(list(seqs)), **more}

    # -- in the claim's transaction -------------------------------------------------------------------------
    def recover(self, cursor: Any) -> int:
        """Put the rows of gone owners back into the queue at their positions; returns how many came back."""
        now = time.time()
        owners = self.dialect.execute(cursor, "lease_owners", {"queue_name": self.name}, **self.ids).fetchall()
        back = 0
        for owner, until in owners:
            if owner == self.owner or owner_alive(owner, float(until), now):
                continue
            params = {"queue_name": self.name, "owner": owner, "seqs": None}
            count = max(self.dialect.execute(cursor, "return_leased", params, **self.ids).rowcount, 0)
            self.dialect.execute(cursor, "drop_returned", params, **self.ids)
            log.warning("queue %s: %d leased messages of %s (gone: lease ended or process not running) put back to "
                        "be emitted again", self.name, count, owner)
            back += count
        return back

    def lease(self, cursor: Any, seqs: Sequence[int]) -> None:
        """Copy the queue's rows at ``seqs`` into the lease table under this owner (the caller's claim deletes
        them from the queue in the same transaction)."""
        if seqs:
            self.dialect.execute(cursor, "lease_rows", self._params(seqs, until=time.time() + LEASE_SECONDS),
                                 **self.ids)

    def leased(self, count: int) -> None:
        """``count`` rows were leased (the claim committed)."""
        self._held += count

    # -- later, each in a short transaction of its own ---------------------------------------------------------
    def renew(self) -> None:
        """Extend this owner's leases (while it holds any)."""
        if self._held > 0:
            params = {"owner": self.owner, "until": time.time() + LEASE_SECONDS}
            self.session.run(lambda cur: self.dialect.execute(cur, "renew_leases", params, **self.ids),
                             what=f"renew the leases of {self.name}")

    def settle(self, seqs: Sequence[int], put_back: Sequence[int] = (),
               dead_letter: Callable[[Any], None] | None = None) -> int:
        """End the leases of ``seqs``: the rows ``put_back`` return to the queue at their positions, the others are
        deleted (``dead_letter(cursor)`` first copies rejected ones to the error queue, same transaction).
        Returns how many rows this owner still held of them (fewer: a lease was lost, which a live owner's is not).
        """
        if not seqs:
            return 0
        back = set(put_back)
        gone = [s for s in seqs if s not in back]

        def work(cur: Any) -> int:
            found = 0
            if put_back:
                found += max(self.dialect.execute(cur, "return_leased", self._params(put_back), **self.ids).rowcount,
                             0)
                self.dialect.execute(cur, "drop_returned", self._params(), **self.ids)
            if gone:
                if dead_letter is not None:
                    dead_letter(cur)
                found += max(self.dialect.execute(cur, "drop_leased", self._params(gone), **self.ids).rowcount, 0)
            return found

        found = self.session.run(work, what=f"end the leases of {len(seqs)} messages of {self.name}")
        self._held = max(self._held - len(seqs), 0)
        if found < len(seqs):
            log.warning("queue %s: %d of %d leased messages were no longer this trigger's (lease lost)", self.name,
                        len(seqs) - found, len(seqs))
        return found

    def close(self) -> None:
        """This owner is gone (its rows, if any, are recovered by the next claim)."""
        with _LIVE_LOCK:
            _LIVE.discard(self.owner)
