"""The adapter for the public PostgreSQL queue benchmark (bench/sqlqueue-bench): it starts, sends and receives
through the public API, writes the contract's JSONL, stops cleanly on SIGTERM, and loses nothing on the way.

No timing is asserted: the deadlines below only stop a hung adapter from hanging the test.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from airflow_sqlqueue.transport import SqlQueueTransport
from tests.conftest import _PG_SKIP, PG_URL

ADAPTER = Path(__file__).resolve().parent.parent / "bench" / "sqlqueue-bench"
sys.path.insert(0, str(ADAPTER))
from latency import RollingHistogram, bucket_of, value_of  # noqa: E402

REQUIRED = {"claim_p50_ms", "claim_p95_ms", "claim_p99_ms", "enqueue_rate", "completion_rate", "queue_depth"}


def test_percentiles_keep_three_significant_figures_in_bounded_buckets() -> None:
    hist = RollingHistogram(30)
    for i in range(1, 10001):  # 0.01 ms .. 100 ms, evenly
        hist.record(i / 100.0, now=1000.0)
    p50, p95, p99 = hist.percentiles((0.50, 0.95, 0.99), now=1000.0)
    assert p50 == pytest.approx(50.0, rel=1e-3)
    assert p95 == pytest.approx(95.0, rel=1e-3)
    assert p99 == pytest.approx(99.0, rel=1e-3)
    assert hist.percentiles((0.5,), now=1031.0) == [0.0]  # out of the 30 s window
    assert len({bucket_of(m) for m in range(0, 10**9, 997)}) < 20000  # the bucket count is bounded
    for micros in (3, 2047, 2048, 123456, 98765432):
        assert value_of(bucket_of(micros)) == pytest.approx(micros, rel=1e-3)


@pytest.mark.skipif(_PG_SKIP is not None, reason=_PG_SKIP or "")
def test_adapter_produces_consumes_and_stops_on_sigterm(tmp_path: Path) -> None:
    queue = f"pb_{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "DATABASE_URL": PG_URL, "SQLQUEUE_BENCH_QUEUE": queue, "SCENARIO": "long_horizon",
           "PRODUCER_MODE": "fixed", "PRODUCER_RATE": "100", "WORKER_COUNT": "2", "SAMPLE_EVERY_S": "1",
           "JOB_WORK_MS": "1"}
    log = tmp_path / "adapter.log"
    with log.open("w") as stderr:
        proc = subprocess.Popen([sys.executable, "main.py"], cwd=ADAPTER, env=env, stdout=subprocess.PIPE,
                                stderr=stderr, text=True)
    records: list[dict] = []
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            records.append(json.loads(line))
            done = [r for r in records if r.get("metric") == "completion_rate" and r["value"] > 0]
            if len(done) >= 2:
                break
        proc.send_signal(signal.SIGTERM)
        records += [json.loads(line) for line in proc.stdout if line.strip()]  # up to the exit
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        with SqlQueueTransport.from_url(PG_URL) as transport:
            count = f'SELECT count(*) FROM "{queue}"'  # noqa: S608 - a generated name; exact (peek estimates)
            left = transport.run(lambda cur: cur.execute(count).fetchone()[0]) if transport.exists(queue) else -1
            transport.run(lambda cur: cur.execute(f'DROP TABLE IF EXISTS "{queue}", "{queue}_error"'))
    err = log.read_text()
    assert proc.returncode == 0, err

    descriptor = records[0]
    assert descriptor["kind"] == "descriptor" and descriptor["system"] == "sqlqueue"
    assert descriptor["event_tables"] == [f"public.{queue}"]
    samples = [r for r in records[1:]]
    assert samples and all(r["kind"] == "adapter" and r["subject_kind"] == "adapter" for r in samples)
    ticks: dict[str, dict[str, float]] = {}
    for r in samples:
        ticks.setdefault(r["t"], {})[r["metric"]] = r["value"]
    for stamp, metrics in ticks.items():
        assert REQUIRED <= set(metrics), stamp
        assert metrics["claim_p50_ms"] <= metrics["claim_p95_ms"] <= metrics["claim_p99_ms"]
    assert any(m["completion_rate"] > 0 and m["claim_p50_ms"] > 0 for m in ticks.values())

    # every message sent was either handled or is still in the queue: nothing lost on the way or at shutdown
    counts = re.search(r"stopped: enqueued (\d+), completed (\d+), send outcome unknown (\d+)", err)
    assert counts, err
    enqueued, completed, unknown = map(int, counts.groups())
    assert unknown == 0 and enqueued > 0
    assert completed + left == enqueued
    ledger = json.loads(re.search(r"ledger: (\{.*\})", err).group(1))  # per message, not only counts
    assert ledger["confirmed"] == enqueued and ledger["duplicates"] == 0
    assert ledger["handled"] == completed and ledger["confirmed_not_handled"] == left
