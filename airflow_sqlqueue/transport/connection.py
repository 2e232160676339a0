"""A small pool of DB-API connections for one transport: reuse, configure, and drop broken ones."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .dialects import Dialect

log = logging.getLogger(__name__)


class ConnectionSource:
    """Hands out configured connections made by ``connect``; a connection that failed is closed, not reused."""

    def __init__(self, connect: Callable[[], Any], dialect: Dialect, max_idle: int = 16) -> None:
        self._connect = connect
        self._dialect = dialect
        self._idle: list[Any] = []
        self._lock = threading.Lock()
        self._max_idle = max_idle

    def _new(self) -> Any:
        connection = self._connect()
        self._dialect.check_connection(connection)
        self._dialect.configure(connection)
        return connection

    @contextmanager
    def connection(self) -> Iterator[Any]:
        """A connection for the duration of the block; returned to the pool unless an error broke it."""
        with self._lock:
            connection = self._idle.pop() if self._idle else None
        if connection is None:
            connection = self._new()
        try:
            yield connection
        except BaseException as exc:
            if self._dialect.is_connection_lost(exc) or not isinstance(exc, Exception):
                _close(connection)
            else:
                self._give_back(connection)
            raise
        self._give_back(connection)

    def _give_back(self, connection: Any) -> None:
        with self._lock:
            if len(self._idle) < self._max_idle:
                self._idle.append(connection)
                return
        _close(connection)

    def close(self) -> None:
        """Close every idle connection."""
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            _close(connection)


def _close(connection: Any) -> None:
    try:
        connection.close()
    except Exception:  # noqa: BLE001 - closing a broken connection may fail; nothing to do
        log.debug("closing a connection failed", exc_info=True)
