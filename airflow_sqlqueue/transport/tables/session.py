"""Connections and transactions of one transport: a small pool, transactions, one retry policy, error explanation.

Everything that talks to the database goes through a ``Session``: operations never open connections or
transactions of their own, and every retry decision (deadlock, lost connection) is made by ``RetryPolicy``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from ..common.errors import (
    DatabaseConnectionError,
    InvalidMessageError,
    NotAQueueError,
    PermissionDeniedError,
    QueueNotFoundError,
    SqlQueueError,
)
from ..common.redaction import first_line
from ..dialects import Dialect
from .circuit_breaker import CircuitBreaker

log = logging.getLogger(__name__)
T = TypeVar("T")
A = TypeVar("A")

#: Deadlocks (and lock timeouts) retried in a row before the error is raised.
DEADLOCK_RETRIES = 5


class RetryPolicy:
    """Decides, for one failure, whether to try again and after how long; ``None`` means raise.

    Deadlocks and lock timeouts are retried up to ``deadlocks`` times in a row with a short growing pause; they
    are never counted as failures of a message. A lost connection is retried only when a circuit breaker is
    given: it sets the pause (1 s while armed, 10 s once triggered) and raises once it triggers.
    """

    def __init__(self, dialect: Dialect, *, deadlocks: int = DEADLOCK_RETRIES,
                 breaker: CircuitBreaker | None = None) -> None:
        self.dialect = dialect
        self.deadlocks = deadlocks
        self.breaker = breaker

    def is_transient(self, exc: BaseException) -> bool:
        """A failure that may go away by itself: deadlock, lock timeout, lost or refused connection."""
        return (self.dialect.is_deadlock(exc) or self.dialect.is_connection_lost(exc)
                or isinstance(exc, DatabaseConnectionError))

    def delay(self, exc: BaseException, failures: int) -> float | None:
        """The pause before attempt ``failures + 1`` after ``exc`` (``failures`` in a row so far), or None."""
        if self.dialect.is_deadlock(exc):
            return 0.05 * failures if failures <= self.deadlocks else None
        if self.breaker is not None and (self.dialect.is_connection_lost(exc)
                                         or isinstance(exc, DatabaseConnectionError)):
            return self.breaker.failure(exc)  # raises CircuitBreakerOpenError once it triggers
        return None

    def succeeded(self) -> None:
        """An attempt worked: the breaker disarms."""
        if self.breaker is not None:
            self.breaker.success()

    def call(self, attempt: Callable[[], T], what: str, failed: Exception | None = None) -> T:
        """Run ``attempt`` until it returns or fails in a way this policy does not retry; ``failed``: the
        failure of an attempt the caller made already (counted as the first)."""
        failures = 0
        while True:
            if failed is None:
                try:
                    result = attempt()
                except Exception as exc:
                    failed = exc
                else:
                    self.succeeded()
                    return result
            failures += 1
            pause = self.delay(failed, failures)
            if pause is None:
                raise failed
            kind = "deadlock in" if self.dialect.is_deadlock(failed) else "lost connection in"
            log.warning("%s %s, retrying in %.2f s (%d): %s", kind, what or "transaction", pause, failures,
                        first_line(failed))
            time.sleep(pause)
            failed = None


class LocalWrites:
    """Write transactions of this process that ended on a single-writer database (SQLite), counted (by
    ``WriterGate.leave``) so that a watcher in the same process wakes at once instead of at its next look at the
    database's files."""

    def __init__(self) -> None:
        self._ended = threading.Condition()
        self.count = 0
        self._waiting = 0  # watchers in ``wait``: with none, a write's end takes no lock

    def notify(self) -> None:
        """Wake the watchers waiting in ``wait`` (after ``count`` moved)."""
        with self._ended:
            self._ended.notify_all()

    def wait(self, seen: int, timeout: float) -> bool:
        """Block until a write ends after ``seen`` (a ``count`` read before) or ``timeout`` passes."""
        with self._ended:
            self._waiting += 1
            try:
                return self._ended.wait_for(lambda: self.count != seen, timeout)
            finally:
                self._waiting -= 1


#: The process's SQLite writes (every session's gate reports to it).
LOCAL_WRITES = LocalWrites()


_get_ident = threading.get_ident


class WriterGate:
    """One write transaction at a time among the connections of one session, on a single-writer database (SQLite).

    SQLite lets one connection write at a time; the others wait in its busy handler, which polls with sleeps
    growing to 100 ms: receivers of one process that meet at the write lock lose up to 100 ms each time. The gate
    queues them on a lock instead, and the next starts the moment the last commits. SQLite stays the arbiter:
    other processes meet its own busy handling. The gate is held from ``begin`` to the transaction's end and may
    be given back from another thread (a claim can end where its holder hands it). A thread that holds it already
    (a write started inside a write) passes, and meets SQLite's lock as it would without the gate.
    """

    __slots__ = ("_lock", "_holder", "timeout", "make_error")

    def __init__(self, timeout: float, make_error: Callable[[float], Exception]) -> None:
        self._lock = threading.Lock()
        self._holder: int | None = None
        self.timeout = timeout
        self.make_error = make_error

    def enter(self) -> bool:
        """Wait for the gate; True when this call took it (give it back with ``leave``), False when this thread
        holds it already. After ``timeout`` seconds, the database's lock-timeout error."""
        me = _get_ident()
        if self._holder == me:
            return False
        if not self._lock.acquire(False) and not self._lock.acquire(timeout=self.timeout):  # free: no timed wait
            raise self.make_error(self.timeout)
        self._holder = me
        return True

    def leave(self) -> None:
        self._holder = None
        self._lock.release()
        # A write ended: the count first, then the look for waiters (LocalWrites): a watcher that registers after
        # that look finds the new count under its lock before it sleeps (the GIL orders the two threads' steps),
        # so no wake-up is lost.
        writes = LOCAL_WRITES
        writes.count += 1
        if writes._waiting:
            writes.notify()


class Session:
    """The connections of one transport: a pool of configured DB-API connections and transactions on them.

    A connection that failed in a way that may have left it unusable (lost, or a commit or rollback that
    raised) is closed, never handed out again.
    """

    def __init__(self, connect: Callable[[], Any], dialect: Dialect, max_idle: int = 16) -> None:
        self.dialect = dialect
        self.retry = RetryPolicy(dialect)
        self._connect = connect
        self._idle: list[Any] = []
        self._cursors: dict[int, tuple[Any, Any]] = {}  # id(connection) -> (connection, its reused cursor)
        self._lock = threading.Lock()  # for the cursors' map (the idle list needs none: its pop and append are atomic)
        self._max_idle = max_idle
        self._gate = WriterGate(dialect.write_lock_wait, dialect.write_lock_timeout) if dialect.single_writer else None
        #: Whether turning autocommit on and off does anything here (SQLite: a statement without BEGIN commits).
        self._switch_autocommit = type(dialect).autocommit is not Dialect.autocommit

    # -- the pool -----------------------------------------------------------------------------------
    def _new(self) -> Any:
        connection = self._connect()
        self.dialect.check_connection(connection)
        self.dialect.configure(connection)
        return connection

    def dedicated(self) -> Any:
        """A new configured connection outside the pool, for one long-lived job (listening for wake-ups).
        The caller closes it."""
        return self._new()

    def checkout(self) -> Any:
        """A configured connection from the pool (or a new one), autocommit off. Give it back with ``checkin``."""
        connection = self._take()
        if self._switch_autocommit:
            try:
                self.dialect.autocommit(connection, False)  # ``run_once`` leaves it on (no switch per statement)
            except BaseException:
                self.checkin(connection, False)
                raise
        return connection

    def _take(self) -> Any:
        """A pooled connection as it was left (autocommit on after ``run_once``), or a new one."""
        try:
            return self._idle.pop()  # list.pop is atomic: the pool needs no lock of its own
        except IndexError:
            return self._new()

    def checkin(self, connection: Any, healthy: bool = True) -> None:
        """Return a connection to the pool, or close it when it is not ``healthy`` (or the pool is full)."""
        if healthy and len(self._idle) < self._max_idle:  # two at once may pass the cap by one: no harm
            self._idle.append(connection)
            return
        self._forget_cursor(connection)
        close_quietly(connection)

    def _cursor(self, connection: Any) -> Any:
        """The connection's cursor, made once and reused by each transaction on it (a cursor costs more to make
        than a one-row statement's own Python work)."""
        entry = self._cursors.get(id(connection))
        if entry is not None and entry[0] is connection:
            return entry[1]
        cursor = connection.cursor()
        with self._lock:
            self._cursors[id(connection)] = (connection, cursor)
        return cursor

    def release_cursor(self, connection: Any, cursor: Any) -> None:
        """A transaction ended: keep its cursor for the next one unless it may hold a large result (a driver keeps
        the last result until the next statement: a batch of rows must not stay in memory on an idle
        connection). A last statement that returned no rows (an insert, the delete that ends a claim) or at most
        one leaves nothing to hold; a kept cursor also keeps the driver's type adaptation warm."""
        try:  # rowcount first: a driver may build the description anew at each read (psycopg: 5 objects)
            small = cursor.rowcount <= 1 or cursor.description is None
        except Exception:  # noqa: BLE001 - a closed or broken cursor: make a new one next time
            small = False
        if not small:
            self._forget_cursor(connection)

    def drop(self, connection: Any) -> None:
        """Close a connection a dropped transaction held (its locks are released with it). Takes no lock: it is
        called from a finalizer, which may run while this thread holds the pool's lock."""
        entry = self._cursors.get(id(connection))
        if entry is not None and entry[0] is connection:
            self._cursors.pop(id(connection), None)
        close_quietly(connection)

    def _forget_cursor(self, connection: Any) -> None:
        with self._lock:
            entry = self._cursors.pop(id(connection), None)
        if entry is not None:
            _close_cursor(entry[1])

    @contextmanager
    def connection(self) -> Iterator[Any]:
        """A connection for the block, outside any transaction of ours (DDL, VACUUM, the dialect's own steps).

        On an error the connection is rolled back and kept only when the error is one of ours (a clear
        ``SqlQueueError`` raised before anything failed in the driver) and the rollback works: a driver error
        may come from a commit inside the block, and a connection whose commit failed is never reused.
        """
        connection = self.checkout()
        try:
            yield connection
        except BaseException as exc:
            self.checkin(connection, isinstance(exc, SqlQueueError) and _rolled_back(connection))
            raise
        self.checkin(connection)

    # -- transactions -------------------------------------------------------------------------------
    def begin(self, read_only: bool = False) -> Transaction:
        """Open a transaction on a pooled connection; end it with ``commit`` or ``rollback``.

        On a single-writer database a write transaction first waits its turn at the session's ``WriterGate``.
        """
        gate = self._gate if not read_only else None
        if gate is not None and not gate.enter():
            gate = None  # this thread's own write is open: the database decides
        try:
            connection = self.checkout()
            try:
                cursor = self._cursor(connection)
                self.dialect.begin(cursor, read_only)
            except BaseException:
                self.checkin(connection, False)
                raise
        except BaseException:
            if gate is not None:
                gate.leave()
            raise
        return Transaction(self, connection, cursor, gate)

    @contextmanager
    def transaction(self, read_only: bool = False) -> Iterator[Any]:
        """A cursor in one transaction: commit when the block ends, rollback on any error.

        ``read_only`` work lets a single-writer database (SQLite) read beside an open write transaction.
        """
        tx = self.begin(read_only)
        try:
            yield tx.cursor
        except BaseException as exc:
            tx.rollback(exc)
            raise
        tx.commit()

    def run(self, work: Callable[[Any], T], *, what: str = "", read_only: bool = False) -> T:
        """Run ``work(cursor)`` in one transaction; deadlocks are retried, driver errors explained."""

        def attempt() -> T:
            with self.transaction(read_only) as cursor:
                return work(cursor)

        try:
            return self.retry.call(attempt, what)
        except Exception as exc:
            explained = self.explain(exc, what)
            if explained is exc:
                raise
            raise explained from exc

    def run_once(self, work: Callable[[Any, A], T], arg: A, *, what: str = "",
                 unknown: Callable[[A, BaseException], Exception] | None = None, returns_rows: bool = True) -> T:
        """Run ``work(cursor, arg)``, which must run ONE statement, in autocommit: the statement is its own
        transaction (one round trip, no BEGIN or COMMIT). Only where ``dialect.autocommit_statements`` is set.

        A deadlock or lock timeout failed the statement on the server (nothing was applied): retried as ``run``
        retries it. A connection lost once the statement may have left leaves its outcome unknown: never retried,
        ``unknown(arg, exc)`` is raised (on a remote database; SQLite runs in the process and knows). Other driver
        errors are explained as ``run`` explains them. ``returns_rows=False`` (an INSERT) says the cursor holds no
        result afterwards: it is kept without a look. ``work`` and ``arg`` apart, so that a caller (a send of one
        message) makes no closure a call.
        """
        try:  # the first attempt without the retry loop (one statement: most calls end here)
            result = self._once(work, arg, returns_rows)
        except Exception as exc:
            try:
                return self.retry.call(lambda: self._once(work, arg, returns_rows), what, exc)
            except Exception as final:
                if unknown is not None and self.dialect.remote and self.dialect.is_connection_lost(final):
                    raise unknown(arg, final) from final
                explained = self.explain(final, what)
                if explained is final:
                    raise
                raise explained from final
        breaker = self.retry.breaker  # RetryPolicy.succeeded, without the call
        if breaker is not None:
            breaker.success()
        return result

    def _once(self, work: Callable[[Any, A], T], arg: A, returns_rows: bool) -> T:
        """One attempt of ``run_once``: the writer gate, a pooled connection in autocommit, ``work``.

        The pool's and the cursors' steps are written out here (``_take``, ``_cursor``, ``checkin``): this is the
        path of every one-message send and receive, where each call of Python counts beside a hand loop's."""
        dialect, gate = self.dialect, self._gate
        if gate is not None and not gate.enter():
            gate = None  # this thread's own write is open: the database decides
        try:
            try:
                connection = self._idle.pop()
            except IndexError:
                connection = self._new()
            cursor = None
            try:
                entry = self._cursors.get(id(connection))
                cursor = entry[1] if entry is not None and entry[0] is connection else self._cursor(connection)
                if self._switch_autocommit:  # left on for the next one-statement call; checkout turns it off
                    dialect.autocommit(connection, True)
                result = work(cursor, arg)
            except BaseException as exc:
                self.checkin(connection, isinstance(exc, Exception) and not dialect.is_connection_lost(exc)
                             and _autocommit_off(dialect, connection))
                raise
        finally:
            if gate is not None:
                gate.leave()
        if returns_rows and dialect.keeps_results:
            self.release_cursor(connection, cursor)
        if len(self._idle) < self._max_idle:
            self._idle.append(connection)
        else:
            self.checkin(connection)  # the pool is full: closed there
        return result

    def explain(self, exc: Exception, what: str) -> Exception:
        """A clear error for a driver error whose meaning is known (missing table, missing right), else ``exc``."""
        if isinstance(exc, SqlQueueError | InvalidMessageError):
            return exc
        if self.dialect.is_missing_table(exc):
            return QueueNotFoundError(
                f"{what}: a queue table (or its schema) does not exist: {first_line(exc)}. Create it with "
                "`sqlqueue create QUEUE` or SqlQueueTransport.create_queue()")
        if self.dialect.is_undefined_column(exc):
            return NotAQueueError(
                f"{what}: the table is not a queue table (a column is missing: {first_line(exc)}). A queue table "
                f"has the columns {', '.join(self.dialect.queue_columns)}; `sqlqueue check QUEUE` says what is "
                "wrong with it, `sqlqueue create QUEUE` makes one")
        if self.dialect.is_permission_denied(exc):
            return PermissionDeniedError(f"{what}: the database user lacks a right: {first_line(exc)}. "
                                         f"{self.dialect.rights_hint}")
        return exc

    def close(self) -> None:
        """Close every idle connection."""
        while True:  # one at a time from the pool itself: one checked in meanwhile is closed too
            try:
                connection = self._idle.pop()
            except IndexError:
                return
            self._forget_cursor(connection)
            close_quietly(connection)


class Transaction:
    """One open transaction on a pooled connection. Not thread-safe: one user at a time (``Claim`` locks)."""

    __slots__ = ("session", "connection", "cursor", "open", "gate")

    def __init__(self, session: Session, connection: Any, cursor: Any, gate: WriterGate | None = None) -> None:
        self.session = session
        self.connection = connection
        self.cursor = cursor
        self.open = True
        #: The writer gate this transaction holds (given back when it ends), or None.
        self.gate = gate

    def __del__(self) -> None:
        if self.open:  # dropped without an end (a claim never closed): its locks go with its connection
            self.open = False
            self.session.drop(self.connection)
            if self.gate is not None:
                self.gate.leave()

    def commit(self, last: Callable[[Any], Any] | None = None) -> None:
        """Commit and give the connection back; a commit that fails closes the connection and raises.

        ``last(cursor)`` runs the transaction's last statement first (its result unread), sent with the COMMIT
        where the driver can (one round trip); if it fails, nothing is committed and the connection is closed."""
        if not self.open:
            return
        self.open = False
        try:
            if last is None:
                self.connection.commit()
            else:
                self.session.dialect.commit_after(self.connection, self.cursor, last)
        except BaseException:
            self.session.checkin(self.connection, False)  # closed, with its cursor
            raise
        finally:
            if self.gate is not None:
                self.gate.leave()
        self.session.release_cursor(self.connection, self.cursor)
        self.session.checkin(self.connection)

    def rollback(self, cause: BaseException | None = None) -> None:
        """Roll back and give the connection back; closed instead when the rollback fails or ``cause`` broke it."""
        if not self.open:
            return
        self.open = False
        try:
            self.session.release_cursor(self.connection, self.cursor)
            healthy = _rolled_back(self.connection)
        finally:
            if self.gate is not None:
                self.gate.leave()
        if cause is not None and (not isinstance(cause, Exception) or self.session.dialect.is_connection_lost(cause)):
            healthy = False
        self.session.checkin(self.connection, healthy)


def _rolled_back(connection: Any) -> bool:
    try:
        connection.rollback()
        return True
    except Exception:  # noqa: BLE001 - the connection may be gone; the caller's error is what matters
        log.debug("rollback failed; the connection is discarded", exc_info=True)
        return False


def _autocommit_off(dialect: Dialect, connection: Any) -> bool:
    """Give a connection its transactions back after a failed autocommit statement; False when it cannot."""
    try:
        dialect.autocommit(connection, False)
        return True
    except Exception:  # noqa: BLE001 - the connection may be gone: it is closed, not pooled
        log.debug("turning autocommit off failed; the connection is discarded", exc_info=True)
        return False


def _close_cursor(cursor: Any) -> None:
    try:
        cursor.close()
    except Exception:  # noqa: BLE001
        pass


def close_quietly(connection: Any) -> None:
    try:
        connection.close()
    except Exception:  # noqa: BLE001 - closing a broken connection may fail; nothing to do
        log.debug("closing a connection failed", exc_info=True)

