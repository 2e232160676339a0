"""Blocking work on a worker thread, awaited from an event loop, that a cancellation does not cut loose."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def finish_in_thread(fn: Callable[..., T], *args: Any) -> T:
    """``asyncio.to_thread(fn, *args)``, except that when the caller is cancelled meanwhile, the cancellation is
    raised only once ``fn`` has returned.

    ``to_thread`` lets go of a cancelled call at once while its thread runs on: what ``fn`` then opens (a claim's
    transaction, holding rows or SQLite's write lock; a listening connection) appears after the caller's clean-up
    has looked, and nothing ever ends it. Here the clean-up runs after ``fn`` is done and sees all it did. Use it for
    work that takes or changes what the caller must undo; the wait is as long as ``fn`` takes (its own timeouts).
    """
    future = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        while not future.done():  # cancelled again meanwhile (a loop shutting down): still wait for the thread
            try:
                await asyncio.shield(future)
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - the cancellation is what is raised
                pass
        if not future.cancelled():
            future.exception()  # retrieved (no "never retrieved" warning): the caller sees the cancellation
        raise
