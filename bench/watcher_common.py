"""What ``bench.watcher_idle`` and ``bench.watcher_patterns`` share: counted transports, the schema and temporary
directory they run in, starting the triggers' producers one by one, and writing the results table."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import tempfile
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="sqlqueue-bench-airflow-"))

MACHINE = f"{os.cpu_count()} cores, shared with other work while measured; Python {sys.version.split()[0]}"


def counted_transport(url: str, counter: list[int], *, file_watch: bool = True,
                      old_push_fallback: bool = False) -> Any:
    """A transport whose named statements and transactions (BEGIN and COMMIT/ROLLBACK: two round trips each)
    add to ``counter``; ``file_watch=False`` and ``old_push_fallback`` give the behaviour before issue 29."""
    from airflow_sqlqueue.transport import SqlQueueTransport

    transport = SqlQueueTransport.from_url(url)
    dialect, session = transport.dialect, transport.session
    execute_statement, begin, make_wakeups = dialect.execute_statement, session.begin, transport.wakeups

    def counted_statement(*args: Any, **kwargs: Any) -> Any:
        counter[0] += 1
        return execute_statement(*args, **kwargs)

    def counted_begin(*args: Any, **kwargs: Any) -> Any:
        counter[0] += 2
        return begin(*args, **kwargs)

    def wakeups(*args: Any, **kwargs: Any) -> Any:
        made = make_wakeups(*args, **kwargs)
        if old_push_fallback:  # before: with push, the fallback poll came every poll_interval, no back-off
            original = made.next_pause
            made.next_pause = lambda found: made.poll_interval if made.push else original(found)
        return made

    dialect.execute_statement = counted_statement
    session.begin = counted_begin
    transport.wakeups = wakeups
    if not file_watch:
        dialect.supports_file_watch = False  # this transport's dialect only: SQLite before issue 29
    return transport


def error_queue_of(queue: str) -> str:
    """The error queue beside ``queue`` (in its schema when the name is schema-qualified)."""
    return queue.rsplit(".", 1)[0] + '."error"' if queue.startswith('"') else "error"


def use_transport(transport: Any, module: Any = None) -> None:
    """Make the next producer that opens its stream take ``transport`` (the module reads it at the stream's start:
    start producers one at a time); ``module`` is another copy of the triggers' module (default: the current one)."""
    if module is None:
        import airflow_sqlqueue.triggers.sqlqueue as module

    async def get_transport(conn_id: str, **kwargs: Any) -> tuple[Any, Any]:
        return transport, None

    module.get_transport = get_transport


async def start_and_count_idle(watchers: Sequence[Any], start: Callable[[Any], Awaitable[None]],
                               idle_seconds: float) -> dict[str, float]:
    """Start each watcher (1 s apart), let the idle back-off settle (20 s), then count each one's statements over
    ``idle_seconds``: statements a minute by name (each watcher has ``name`` and ``counter``, and may have
    ``module``: another copy of the triggers' module)."""
    import airflow_sqlqueue.triggers.sqlqueue as current

    modules = {id(m): m for m in [current] + [getattr(w, "module", None) or current for w in watchers]}
    originals = {key: m.get_transport for key, m in modules.items()}
    for watcher in watchers:
        await start(watcher)
        await asyncio.sleep(1.0)
    for key, m in modules.items():
        m.get_transport = originals[key]
    await asyncio.sleep(20)  # the back-off settles at its longest pause
    before = {w.name: w.counter[0] for w in watchers}
    await asyncio.sleep(idle_seconds)
    return {w.name: (w.counter[0] - before[w.name]) * 60 / idle_seconds for w in watchers}


@contextlib.contextmanager
def bench_place(pg_url: str, prefix: str) -> Iterator[tuple[str, Path]]:
    """A PostgreSQL schema of its own (dropped at the end) and a temporary directory for SQLite files."""
    import psycopg

    schema = "bench_" + uuid.uuid4().hex[:8]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield schema, Path(tempfile.mkdtemp(prefix=f"sqlqueue-{prefix}-"))
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def write_results(out: Path, name: str, title: str, results: dict[str, Any], table_text: str) -> None:
    """Print the title (with the machine) and the table; write ``name``.json and ``name``.md under ``out``."""
    text = f"{title}; {MACHINE}\n\n{table_text}\n"
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps({"machine": MACHINE, "results": results}, indent=2))
    (out / f"{name}.md").write_text(text)
