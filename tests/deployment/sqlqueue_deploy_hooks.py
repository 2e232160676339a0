"""Test-only hooks of the crash scenarios, put on every component's path by the harness (``pylib``).

``HoldingMessageTrigger`` is ``SqlQueueMessageTrigger`` whose producer, while the file ``$SQLQUEUE_DEPLOY_HOLD_DIR/
hold-triggerer`` exists, stops in ``advance``: Airflow has stored the asset event, the batch's rows are claimed and
not deleted yet. It writes ``stored`` there first, so a test knows the triggerer is inside that window and kills it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.triggers.shared_stream import AdvanceItem

from airflow_sqlqueue.triggers.sqlqueue import SqlQueueMessageTrigger, SqlQueueStreamProducer


def hold_dir() -> Path:
    return Path(os.environ["SQLQUEUE_DEPLOY_HOLD_DIR"])


class HoldingProducer(SqlQueueStreamProducer):
    async def advance(self, batch: Sequence[AdvanceItem]) -> None:
        if (hold_dir() / "hold-triggerer").exists():
            (hold_dir() / "stored").write_text(str(self._claim.number if self._claim else 0))
            await asyncio.sleep(600)  # the test kills the triggerer here
        await super().advance(batch)


class HoldingMessageTrigger(SqlQueueMessageTrigger):
    @classmethod
    def create_shared_stream_producer(cls, kwargs: dict[str, Any]) -> HoldingProducer:
        return HoldingProducer(**kwargs)
