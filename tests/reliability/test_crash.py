"""Crash mid-drain: a draining process killed with SIGKILL at random points (seeded) loses nothing.

The child (crash_child.py) drains with ``transport.receiving()`` into a JSON-lines store fsync'ed before the
commit, or with ``transport.process()`` writing each handled body to a file. Each round kills one child:
- at a chosen point (seeded random batch and position): mid-batch, with the batch stored/handled but not
  committed, or just after a commit. The point is proven hit by what the kill leaves behind: the messages both
  stored and still queued are exactly the uncommitted part (K, the whole batch, or none);
- or after a random delay chosen by the parent (wherever it lands, e.g. inside a driver call); where it landed
  is classified the same way and reported.
After each kill every sent message is in the queue or in the store (a batch stored but not committed is in both:
a duplicate the reader identifies by its Id, never a loss). A last run without a kill empties the queue.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
import uuid
from collections import Counter

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

#: Rounds per test: each chosen phase twice, then the timer kills.
PHASES = ("mid-batch", "stored-not-committed", "after-commit")
TIMER_ROUNDS = int(os.environ.get("SQLQUEUE_RELIABILITY_CRASH_ROUNDS", "3"))
CRASH_MESSAGES = max(MESSAGES // 4, 500)
BATCH = 20


def _records(path) -> list[dict]:
    """Records in the store; a line cut by the kill (no newline yet) was never complete, so never committed."""
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").split("\n")[:-1]  # the part after the last newline is incomplete
    return [json.loads(line) for line in lines]


def _stored(path) -> list[bytes]:
    return [record["body"].encode() for record in _records(path)]


def _start(db, url: str, mode: str, out, kill_at: str) -> subprocess.Popen:
    child = subprocess.Popen([PYTHON, str(HERE / "crash_child.py"), url, db.q("orders"), db.q("error"), mode,
                              str(out), str(BATCH), kill_at], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    line = child.stdout.readline()
    if line.strip() != "ready":
        child.kill()
        raise AssertionError(f"crash child did not start: {line!r} {child.stderr.read()}")
    return child


def _plan(rng: random.Random) -> list[str]:
    """Kill points of the rounds: every phase twice at a random batch (and position), then timer kills."""
    plan = []
    for phase in PHASES * 2:
        k = rng.randrange(1, BATCH) if phase == "mid-batch" else 0
        plan.append(f"{phase}:{rng.randrange(0, 4)}:{k}")
    return plan + ["timer"] * TIMER_ROUNDS


def _window(uncommitted: int) -> str:
    """Where a kill landed, judged by how many messages it left both stored and queued."""
    if uncommitted == 0:
        return "after-commit"
    return "stored-not-committed" if uncommitted == BATCH else "mid-batch"


@pytest.mark.parametrize("mode", ["drain", "process"])
def test_sigkill_mid_drain_loses_nothing(db, tmp_path, mode):
    db.transport.create_queues([db.q("orders"), db.q("error")])
    sent = fill(db, db.q("orders"), CRASH_MESSAGES)
    app = "sqlqueue_crash_" + uuid.uuid4().hex[:10]
    url = with_application_name(db.url, app) if db.kind == "postgres" else db.url
    out = tmp_path / "store.jsonl"
    rng = random.Random(f"{SEED}:{mode}:{db.kind}")
    plan = _plan(rng)
    landed: Counter[str] = Counter()
    for kill_at in plan:
        queued_before = count(db, "orders")
        assert queued_before > 4 * BATCH, "the queue ran dry: the kill would prove nothing"
        child = _start(db, url, mode, out, kill_at)
        if kill_at == "timer":
            time.sleep(rng.uniform(0.0, 0.1))
            os.kill(child.pid, signal.SIGKILL)
        returncode = child.wait(60)
        stderr = child.stderr.read()
        child.stdout.close()
        child.stderr.close()
        assert returncode == -signal.SIGKILL, f"{kill_at}: the child was not killed (rc {returncode}): {stderr}"
        if db.kind == "postgres":
            wait_gone(db, app)  # the server has rolled the killed transaction back
        queued, stored = bodies(db, "orders"), _stored(out)
        assert not duplicates(queued), "a message is in the queue twice"
        missing = lost(sent, queued, stored)
        assert not missing, f"{kill_at}: {len(missing)} messages lost after a kill, e.g. {sorted(missing)[:5]}"
        uncommitted = len(set(queued) & set(stored))
        if kill_at == "timer":
            landed["timer:" + _window(uncommitted)] += 1
            continue
        phase, number, k = kill_at.split(":")
        expected = {"mid-batch": int(k), "stored-not-committed": BATCH, "after-commit": 0}[phase]
        committed = int(number) + (phase == "after-commit")
        # the kill point was hit: exactly the batches before it committed, and exactly the uncommitted part of
        # the killed batch is both stored and back in the queue
        assert queued_before - len(queued) == committed * BATCH, f"{kill_at}: {queued_before - len(queued)} left"
        assert uncommitted == expected, f"{kill_at}: {uncommitted} stored and still queued, expected {expected}"
        landed[phase] += 1
    assert set(landed) >= set(PHASES), f"kill points not all hit: {landed}"
    assert len({p for p in plan if p != "timer"}) > len(PHASES), "the kill points do not vary"
    child = _start(db, url, mode, out, "none:-1:-1")  # a last run, not killed, finishes the queue
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
    summary(f"sigkill[{mode}]", db.kind, messages=CRASH_MESSAGES, faults=len(plan), lost=len(missing),
            kills=" ".join(f"{k}={n}" for k, n in sorted(landed.items())), redelivered_duplicates=redelivered)
