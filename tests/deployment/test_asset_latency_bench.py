"""Smoke test of ``python -m bench.asset_latency`` on a real deployment: 2 trials per set-up and a short steady
state; every set-up yields its rows and every steady-state message is in an asset event.

No timing is asserted: speed is read from the benchmark's table (docs/performance.md), not from tests. The one
bound checked is causal: an asset event cannot be stored before the message it carries was committed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.asset_latency import SETUPS, main

pytestmark = [pytest.mark.deployment, pytest.mark.timeout(900)]


def test_asset_latency_bench_has_every_row_and_counts_every_message(tmp_path: Path) -> None:
    assert main(["--trials", "2", "--steady-seconds", "10", "--rates", "10", "--out", str(tmp_path)]) == 0

    payload = json.loads((tmp_path / "asset_latency.json").read_text())
    assert {setup: len(values) for setup, values in payload["samples"].items()} == dict.fromkeys(SETUPS, 2)
    assert all(latency > 0 for values in payload["samples"].values() for latency in values), payload["samples"]
    rows = {row["setup"]: row for row in payload["steady"]}
    assert set(rows) == set(SETUPS)
    for row in rows.values():
        assert row["sent"] >= 90 and row["lost"] == 0 and row["duplicates"] == 0, row
        assert row["events"] >= 1 and row["latency_p50"] > 0, row
    assert payload["meta"]["event_interval"] == 0 and payload["meta"]["load_average"]
    text = (tmp_path / "asset_latency.md").read_text()
    assert "| push | 2 |" in text and "| poll | 2 |" in text and "asset events/s" in text
