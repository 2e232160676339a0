"""The error groups summary: the group counts of an error queue kept in two tables beside it, so the page reads a
few rows instead of every failed message.

``SqlQueueErrorGroups`` (in the error queue's schema, created with the first catch-up, as ``SqlQueueRetryRedirects``
is with the first redirect) holds one row per error queue, FailedQ, exception type and message type: its count and
first and last failure. ``SqlQueueErrorGroupsState`` holds one row per error queue: the highest position counted
(the high water), when the groups were last rebuilt and caught up.

- **Rows coming in** (moved there by this provider's receivers, or by .NET endpoints that know nothing of these
  tables, or restored from an archive) get a position above the high water: a **catch-up** counts the rows above it
  (grouped in SQL, a bounded number of rows per transaction) and raises it.
- **Rows going out** through this provider (every retry path, edit and retry, delete, archive) are taken out of their
  group in the transaction that takes them out of the queue (``forget``), when they were counted (position at or
  under the high water). A catch-up holds the state row exclusively, a retry or delete shared: they never overlap.
- **Anything else** (a row deleted by ServicePulse or a DBA, a row whose insert committed after a catch-up passed
  its position, a table created again, its identity reseeded) makes the counts disagree with the queue. The **drift
  check** (``check``) compares their sum with an exact count of the queue in one statement and stores what it found
  (``drift``, ``checked_at``) in the state row; a rebuild (CLI ``sqlqueue error-groups --rebuild``, or
  ``rebuild()``) clears and counts again. The drift stays true until something outside the provider changes the
  queue again (every change by this provider moves a row and its count together), so a read does not count:

  - a summary of at most ``CHECK_INLINE_ROWS`` rows is checked on every read (a few milliseconds);
  - a larger one is checked at most every ``CHECK_SECONDS``: a read that finds the last check older starts one in
    the background (one per error queue and process) and answers with the drift found last; the next reads show
    the new one. The exact count (an index-only walk of every row, 200-400 ms at a million rows) is never on a
    read's path. ``read(check=True)`` (the CLI, the page's "count again") checks at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ..dialects.base import ERROR_GROUPS_STATE_TABLE, ERROR_GROUPS_TABLE
from ..tables.queue import TableQueue
from ..tables.session import Session

log = logging.getLogger(__name__)

#: The summary tables' names (in the error queue's schema).
GROUPS_TABLE = ERROR_GROUPS_TABLE
STATE_TABLE = ERROR_GROUPS_STATE_TABLE
#: Rows counted per catch-up transaction.
CATCH_UP_ROWS = 20_000
#: Rows a page's read counts at most before it answers (about 80 ms at 1,000 rows of 1.2 KB headers on the idle
#: 2-core machine); a page's read that leaves rows behind counts the rest in the background (``background``).
READ_CATCH_UP_ROWS = 1_000
#: Rows per transaction of a background catch-up (the state row is held that long: retries of counted rows wait).
BACKGROUND_CATCH_UP_ROWS = 2_000
MAX_POSITION = 2**63 - 1
#: A summary counting at most this many rows is compared with an exact count on every read (a few milliseconds).
CHECK_INLINE_ROWS = 20_000
#: A larger one at most this often (seconds), in the background: how soon a row deleted outside the provider shows.
CHECK_SECONDS = 60.0
#: A queue of at most this many rows whose summary disagrees with it is counted again at once by
#: ``ErrorQueue.summary_groups`` (a larger one: ``sqlqueue error-groups --rebuild``; the answer says by how much).
REBUILD_INLINE_ROWS = 20_000

#: The background drift checks of this process, one per (dialect, state table, error queue) at a time.
_CHECKS: dict[tuple[str, str, str], threading.Thread] = {}
_CHECKS_LOCK = threading.Lock()


@dataclass(frozen=True)
class SummaryState:
    """What the summary of one error queue says: groups (raw database values), the rows they count, the high water,
    the queue's row count and newest position, the rows not counted yet (above the high water), and the drift: rows
    the queue holds minus rows the groups count, the rows above the high water aside (0: they agree), as the last
    drift check found it (``checked_at``, ``checked_age`` seconds ago; None: never checked). ``rows`` is the exact
    count when this read checked (``exact``), else the rows counted, behind and drifted."""

    groups: list[tuple[Any, ...]]
    counted: int
    high_water: int
    rows: int
    newest: int | None
    behind: int
    rebuilt_at: str | None
    caught_up_at: str | None
    drift: int = 0
    checked_at: str | None = None
    checked_age: float | None = None
    exact: bool = False


class ErrorGroupSummary:
    """The group counts of one error queue (see the module)."""

    def __init__(self, session: Session, error_queue: TableQueue) -> None:
        self.session = session
        self.dialect = error_queue.dialect
        self.queue = error_queue
        self.name = error_queue.name
        self.ids = dict(error_queue.ids)  # {queue}, {groups}, {state}, {groups_index}: see Dialect.identifiers
        self.groups_address = replace(error_queue.address, table=GROUPS_TABLE)
        self.state_address = replace(error_queue.address, table=STATE_TABLE)
        self._exists = False

    @property
    def _d(self) -> Any:
        return self.dialect

    @property
    def key(self) -> dict[str, str]:
        return {"error_queue": self.name}

    # -- tables -------------------------------------------------------------------------------------
    def exists(self, cursor: Any) -> bool:
        """Whether both tables exist (remembered once they do)."""
        if not self._exists:
            self._exists = bool(self._d.table_exists(cursor, self.state_address)) and bool(
                self._d.table_exists(cursor, self.groups_address))
        return self._exists

    def create(self) -> None:
        """The two tables, unless they exist (a concurrent creator's duplicate-object error counts as created; the
        state row of this error queue is made by its first catch-up)."""
        if not self.session.run(self.exists, what="error groups tables", read_only=True):
            for statements in (("create_error_groups_table", "create_error_groups_index"),
                               ("create_error_groups_state_table",)):
                try:
                    self.session.run(lambda cur, s=statements: [self._d.execute(cur, n, None, **self.ids) for n in s],
                                     what=f"create the error groups tables beside {self.name!r}")
                except Exception:
                    self._exists = False
                    if not self.session.run(self.exists, what="error groups tables", read_only=True):
                        raise

    # -- rows going out -----------------------------------------------------------------------------
    def high_water(self, cursor: Any) -> int | None:
        """In a retry's or delete's transaction: the high water, held shared until it ends (None: no summary)."""
        if not self.exists(cursor):
            return None
        value = self._d.scalar(cursor, "error_groups_state_share", self.key, **self.ids)
        return None if value is None else int(value)

    def group_of(self, cursor: Any, high_water: int | None, seq: int, native_id: Any) -> tuple[Any, ...] | None:
        """Before the row at ``seq`` leaves the queue (same transaction): its group, when the summary counted it."""
        if high_water is None or int(seq) > high_water:
            return None
        row = self._d.execute(cursor, "error_group_of", {"seq": int(seq), "id": str(native_id)},
                              **self.ids).fetchone()
        return None if row is None else tuple(row)

    def take_out(self, cursor: Any, group: tuple[Any, ...] | None) -> None:
        """Once its row left the queue (same transaction): the group counts one less."""
        if group is None:
            return
        self._d.execute(cursor, "error_groups_forget", {**self.key, "failed_q": group[0], "exception_type": group[1],
                                                        "message_type": group[2]}, **self.ids)

    # -- rows coming in -----------------------------------------------------------------------------
    def catch_up(self, max_rows: int | None = None, chunk: int = CATCH_UP_ROWS) -> int:
        """Count the rows above the high water, ``chunk`` rows per transaction, at most about ``max_rows`` (None:
        all); the rows counted. Creates the tables first; rebuilds when the queue's newest position is below the
        high water (the table was created again)."""
        self.create()
        counted = 0
        while max_rows is None or counted < max_rows:
            step = chunk if max_rows is None else max(1, min(chunk, max_rows - counted))
            done, more = self.session.run(lambda cur, step=step: self._catch_up_once(cur, step),
                                          what=f"count new failed messages of {self.name!r}")
            counted += done
            if not more:
                break
        return counted

    def _catch_up_once(self, cur: Any, step: int) -> tuple[int, bool]:
        d = self._d
        high = d.scalar(cur, "error_groups_state_lock", self.key, **self.ids)
        if high is None:  # the first catch-up of this error queue: its state row, then locked
            d.execute(cur, "error_groups_state_insert", self.key, **self.ids)
            high = d.scalar(cur, "error_groups_state_lock", self.key, **self.ids)
        high = int(high or 0)
        bounds = d.execute(cur, "seq_bounds", None, **self.ids).fetchone()
        newest = None if bounds is None else bounds[1]
        # newest under the high water: the newest rows were retried or deleted (or the table was made again, its
        # positions starting over: the drift check finds that, and the rows then counted again)
        if newest is None or int(newest) <= high:
            return 0, False
        end = d.scalar(cur, "scan_end", {"after_seq": high, "batch_size": step}, **self.ids)
        through = int(newest) if end is None else int(end)
        counted = self._add_range(cur, high, through)
        d.execute(cur, "error_groups_state_set", {**self.key, "high_water": through}, **self.ids)
        return counted, through < int(newest)

    def _add_range(self, cur: Any, after: int, through: int) -> int:
        d = self._d
        if "error_groups_merge_range" in d.statements:  # one statement (PostgreSQL), else one per group
            return int(d.scalar(cur, "error_groups_merge_range", {**self.key, "after_seq": after,
                                                                  "through_seq": through}, **self.ids) or 0)
        rows = d.execute(cur, "error_groups_range", {"after_seq": after, "through_seq": through},
                         **self.ids).fetchall()
        total = 0
        for failed_q, exception_type, message_type, count, first, last, first_seq, last_seq in rows:
            params = {**self.key, "failed_q": failed_q, "exception_type": exception_type,
                      "message_type": message_type, "message_count": int(count), "first_failure": first,
                      "last_failure": last, "first_seq": int(first_seq), "last_seq": int(last_seq)}
            if (d.execute(cur, "error_groups_add", params, **self.ids).rowcount or 0) < 1:
                d.execute(cur, "error_groups_insert", params, **self.ids)
            total += int(count)
        return total

    def _clear(self, cur: Any) -> None:
        self._d.execute(cur, "error_groups_clear", self.key, **self.ids)
        self._d.execute(cur, "error_groups_state_rebuilt", self.key, **self.ids)

    def rebuild(self, chunk: int = CATCH_UP_ROWS, progress: Callable[[int], None] | None = None) -> int:
        """Clear the groups and count every row again, ``chunk`` rows per transaction (the page shows the rows not
        counted yet meanwhile); the rows counted."""
        self.create()

        def clear(cur: Any) -> None:
            if self._d.scalar(cur, "error_groups_state_lock", self.key, **self.ids) is None:
                self._d.execute(cur, "error_groups_state_insert", self.key, **self.ids)
                self._d.scalar(cur, "error_groups_state_lock", self.key, **self.ids)
            self._clear(cur)

        self.session.run(clear, what=f"rebuild the error groups of {self.name!r}")
        counted = 0
        while True:
            done, more = self.session.run(lambda cur: self._catch_up_once(cur, chunk),
                                          what=f"rebuild the error groups of {self.name!r}")
            counted += done
            if progress is not None:
                progress(counted)
            if not more:
                return counted

    # -- reading ------------------------------------------------------------------------------------
    def read(self, catch_up_rows: int = READ_CATCH_UP_ROWS, *, check: bool | None = None,
             background: bool = False) -> SummaryState:
        """The groups and the state of the summary, after a catch-up of at most ``catch_up_rows`` rows (only when
        rows came in above the high water). ``check``: True compares with an exact count now; False never; None
        (a page's read) does for a summary of at most ``CHECK_INLINE_ROWS`` rows, and for a larger one starts a
        background check when the last is older than ``CHECK_SECONDS`` (the state then says the drift found last).
        ``background`` (a page's read): rows left above the high water are counted in the background too (the
        state says how many are behind). Without a check a read costs a few rows and two index seeks, whatever the
        queue's size."""
        def look() -> SummaryState | None:
            return self.session.run(self._look, what=f"read the error groups of {self.name!r}", read_only=True)

        state = look()
        if catch_up_rows > 0 and (state is None or (state.newest is not None and state.newest > state.high_water)):
            self.catch_up(max_rows=catch_up_rows)
            state = look()
        if state is None:  # no tables yet and nothing to count: made by the first catch-up
            self.create()
            state = look()
            assert state is not None  # noqa: S101 - made just now
        catch_up = background and state.behind > 0
        if check is None:
            check = state.counted + state.behind <= CHECK_INLINE_ROWS
            due = not check and (state.checked_age is None or state.checked_age >= CHECK_SECONDS)
            if due or catch_up:
                self.in_background(catch_up=catch_up, check=due)
        elif catch_up:
            self.in_background(catch_up=True, check=False)
        if check:
            self.check()  # stored: the read after it says what it found
            state = replace(look() or state, exact=True)
        return state

    def _look(self, cur: Any) -> SummaryState | None:
        """The groups, the state row and the newest position (index seeks, no count of the queue); None when the
        tables are not there."""
        if not self.exists(cur):
            return None
        d = self._d
        groups = [tuple(g) for g in d.execute(cur, "error_groups_list", self.key, **self.ids).fetchall()]
        state = d.execute(cur, "error_groups_state_read", self.key, **self.ids).fetchone()
        bounds = d.execute(cur, "seq_bounds", None, **self.ids).fetchone()
        newest = None if bounds is None or bounds[1] is None else int(bounds[1])
        high = int(state[0]) if state else 0
        behind = 0
        if newest is not None and newest > high:
            behind = int(d.scalar(cur, "count_above", {"after_seq": high}, **self.ids) or 0)
        counted = sum(int(g[3]) for g in groups)
        drift = int(state[4] or 0) if state else 0
        return SummaryState(groups, counted, high, counted + behind + drift, newest, behind,
                            state[1] if state else None, state[2] if state else None, drift,
                            state[3] if state else None,
                            None if not state or state[5] is None else float(state[5]))

    # -- the drift check ----------------------------------------------------------------------------
    def check(self) -> tuple[int, int]:
        """Compare the groups with an exact count of the queue (one statement: one snapshot) and store what it
        found; (rows, drift). A drift is looked at once more before it is stored (SQL Server's count skips rows
        locked by a retry in flight). Nothing is stored before the summary's first catch-up."""
        d = self._d

        def count(cur: Any) -> tuple[int, int] | None:
            if not self.exists(cur) or d.execute(cur, "error_groups_state_read", self.key,
                                                 **self.ids).fetchone() is None:
                return None
            rows, counted, behind = d.execute(cur, "error_groups_check", self.key, **self.ids).fetchone()
            return int(rows or 0), int(rows or 0) - int(behind or 0) - int(counted or 0)

        what = f"compare the error groups of {self.name!r} with the queue"
        found = self.session.run(count, what=what, read_only=True)
        if found is not None and found[1]:
            found = self.session.run(count, what=what, read_only=True)
        if found is None:
            return 0, 0
        rows, drift = found
        self.session.run(lambda cur: d.execute(cur, "error_groups_checked", {**self.key, "drift": drift}, **self.ids),
                         what=what)
        if drift:
            log.warning("error groups of %s count %+d rows fewer than the queue holds (rows taken out or changed "
                        "outside this provider): rebuild them (sqlqueue error-groups --rebuild)", self.name, drift)
        return rows, drift

    def in_background(self, *, catch_up: bool = False, check: bool = True) -> threading.Thread | None:
        """In a thread of its own, unless one of this error queue runs in this process: count the rows above the
        high water (``catch_up``, ``BACKGROUND_CATCH_UP_ROWS`` per transaction), then ``check``. The thread (None:
        one runs already; the next read asks again)."""
        key = (self._d.name, self.ids["state"], self.name)
        with _CHECKS_LOCK:
            running = _CHECKS.get(key)
            if running is not None and running.is_alive():
                return None
            thread = threading.Thread(target=self._upkeep_quietly, args=(catch_up, check),
                                      name="sqlqueue-error-groups", daemon=True)
            _CHECKS[key] = thread
            thread.start()
        return thread

    def _upkeep_quietly(self, catch_up: bool, check: bool) -> None:
        try:
            if catch_up:
                self.catch_up(chunk=BACKGROUND_CATCH_UP_ROWS)
            if check:
                self.check()
        except Exception:  # noqa: BLE001 - background work that failed is asked for again by a later read
            log.warning("counting the error groups of %s in the background failed", self.name, exc_info=True)


def wait_for_checks(timeout: float = 60.0) -> None:
    """Wait until the background drift checks of this process have ended (tests, a clean shutdown)."""
    with _CHECKS_LOCK:
        threads = list(_CHECKS.values())
    for thread in threads:
        thread.join(timeout)


__all__ = ["BACKGROUND_CATCH_UP_ROWS", "CATCH_UP_ROWS", "CHECK_INLINE_ROWS", "CHECK_SECONDS", "GROUPS_TABLE",
           "READ_CATCH_UP_ROWS", "REBUILD_INLINE_ROWS", "STATE_TABLE", "ErrorGroupSummary", "SummaryState",
           "wait_for_checks"]
