"""The peer: pgqueuer (a Python job queue on PostgreSQL) on the same database, in the run's own schema.

pgqueuer is asyncio-first; it runs here on asyncpg, its primary driver. "Dequeue" is what its QueueManager does
per batch of jobs: ``Queries.dequeue`` (claim up to n jobs, FOR UPDATE SKIP LOCKED) and then
``Queries.log_jobs`` (delete the finished jobs and write their log rows), so a job leaves the queue as a
message does on receive.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

from .databases import BODY, HEADERS, BenchDb

ENTRYPOINT = "bench"


class Pgqueuer:
    """pgqueuer installed in the bench schema; each method runs its async API to completion."""

    def __init__(self, db: BenchDb) -> None:
        from pgqueuer.domain.settings import DBSettings

        self.url = db.url
        self.settings = DBSettings(db_schema=db.schema)
        asyncio.run(self._with_queries(lambda q: q.install(create_schema=False)))

    def _queries(self, connection: Any) -> Any:
        from pgqueuer.adapters.drivers.asyncpg import AsyncpgDriver
        from pgqueuer.adapters.persistence.qb import QueryBuilderEnvironment, QueryQueueBuilder
        from pgqueuer.queries import Queries

        return Queries(AsyncpgDriver(connection), qbe=QueryBuilderEnvironment(self.settings),
                       qbq=QueryQueueBuilder(self.settings))

    async def _with_queries(self, work: Any) -> Any:
        import asyncpg

        connection = await asyncpg.connect(self.url)
        try:
            return await work(self._queries(connection))
        finally:
            await connection.close()

    # -- setup (not timed) -------------------------------------------------------------------------------
    def reset(self, backlog: int = 0) -> None:
        """Empty the queue and its log, then enqueue ``backlog`` jobs in batches."""
        async def work(q: Any) -> None:
            await q.clear_queue()
            await q.clear_queue_log()
            for start in range(0, backlog, 1000):
                n = min(1000, backlog - start)
                await q.enqueue([ENTRYPOINT] * n, [BODY] * n, [0] * n, headers=[HEADERS] * n)

        asyncio.run(self._with_queries(work))

    # -- measured ----------------------------------------------------------------------------------------
    def enqueue(self, count: int, batch: int) -> int:
        """Enqueue ``count`` jobs, ``batch`` per call (1: the scalar form, one job per statement)."""
        async def work(q: Any) -> int:
            for start in range(0, count, batch):
                n = min(batch, count - start)
                if batch == 1:
                    await q.enqueue(ENTRYPOINT, BODY, headers=HEADERS)
                else:
                    await q.enqueue([ENTRYPOINT] * n, [BODY] * n, [0] * n, headers=[HEADERS] * n)
            return count

        return asyncio.run(self._with_queries(work))

    def dequeue(self, batch: int, workers: int) -> int:
        """Dequeue and finish jobs, ``batch`` per dequeue, with ``workers`` connections, until none is left."""
        from pgqueuer.ports.repository import EntrypointExecutionParameter

        entrypoints = {ENTRYPOINT: EntrypointExecutionParameter(concurrency_limit=0)}

        async def worker(q: Any) -> int:
            done = 0
            manager = uuid.uuid4()
            while jobs := await q.dequeue(batch, entrypoints, manager, None, timedelta(seconds=30)):
                await q.log_jobs([(job, "successful", None) for job in jobs])
                done += len(jobs)
            return done

        async def all_workers() -> int:
            counts = await asyncio.gather(*(self._with_queries(worker) for _ in range(workers)))
            return sum(counts)

        return asyncio.run(all_workers())
