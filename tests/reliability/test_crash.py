"""Crash mid-drain: a draining process killed with SIGKILL at random moments (seeded) loses nothing.

The child (crash_child.py) drains with ``transport.receiving()`` into a JSON-lines store fsync'ed before the
commit, or with ``transport.process()`` writing each handled body to a file. After each kill every sent
message is in the queue or in the store (a batch stored but not committed is in both: a duplicate the
reader identifies by Id, never a loss). A last run without a kill empties the queue.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
import uuid

import pytest

from .helpers import (
    HERE,
    MESSAGES,
    PYTHON,
    SEED,
    bodies,
    count,
    duplicates,
    fill,
    lost,
    summary,
    wait_gone,
    with_application_name,
)

ROUNDS = int(os.environ.get("SQLQUEUE_RELIABILITY_CRASH_ROUNDS", "8"))
CRASH_MESSAGES = max(MESSAGES // 2, 100)
BATCH = 20


def _records(path) -> list[dict]:
    """Records in the store; a line cut by the kill (no newline yet) was never complete, so never committed."""
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").split("\n")[:-1]  # the part after the last newline is incomplete
    return [json.loads(line) for line in lines]


def _stored(path) -> list[bytes]:
    return [record["body"].encode() for record in _records(path)]


def _start(db, url: str, mode: str, out) -> subprocess.Popen:
    child = subprocess.Popen([PYTHON, str(HERE / "crash_child.py"), url, db.q("orders"), db.q("error"), mode,
                              str(out), str(BATCH)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": os.getcwd()})
    line = child.stdout.readline()
    if line.strip() != "ready":
        child.kill()
        raise AssertionError(f"crash child did not start: {line!r} {child.stderr.read()}")
    return child


@pytest.mark.parametrize("mode", ["drain", "process"])
def test_sigkill_mid_drain_loses_nothing(db, tmp_path, mode):
    db.transport.create_queues([db.q("orders"), db.q("error")])
    sent = fill(db, db.q("orders"), CRASH_MESSAGES)
    app = "sqlqueue_crash_" + uuid.uuid4().hex[:10]
    url = with_application_name(db.url, app) if db.kind == "postgres" else db.url
    out = tmp_path / "store.jsonl"
    rng = random.Random(f"{SEED}:{mode}:{db.kind}")
    kills = in_window = 0
    for _ in range(ROUNDS):
        child = _start(db, url, mode, out)
        time.sleep(rng.uniform(0.0, 0.12))
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
            kills += 1
        child.wait(30)
        child.stdout.close()
        child.stderr.close()
        if db.kind == "postgres":
            wait_gone(db, app)  # the server has rolled the killed transaction back
        queued, stored = bodies(db, "orders"), _stored(out)
        assert not duplicates(queued), "a message is in the queue twice"
        missing = lost(sent, queued, stored)
        assert not missing, f"{len(missing)} messages lost after a kill, e.g. {sorted(missing)[:5]}"
        if set(queued) & set(stored):
            in_window += 1  # killed after the batch was stored and before it committed (or mid-handling)
    child = _start(db, url, mode, out)  # a last run, not killed, finishes the queue
    assert child.wait(120) == 0, child.stderr.read()
    child.stdout.close()
    child.stderr.close()
    stored = _stored(out)
    assert count(db, "orders") == 0 and count(db, "error") == 0
    missing = lost(sent, stored)
    assert not missing
    assert set(stored) == sent
    ids: dict[str, set[str]] = {}
    for record in _records(out):
        ids.setdefault(record["body"], set()).add(record["id"])
    assert all(len(v) == 1 for v in ids.values()), "a redelivered message must carry the same Id"
    redelivered = len(stored) - len(set(stored))
    summary(f"sigkill[{mode}]", db.kind, messages=CRASH_MESSAGES, faults=kills, lost=len(missing),
            killed_stored_not_committed=in_window, redelivered_duplicates=redelivered, rounds=ROUNDS)
