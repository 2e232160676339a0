"""Smoke test of the benchmark harness: tiny sizes, one repeat, every case yields a row with its ratios.

No timing is asserted: speed is read from the benchmark's table, not from tests.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.__main__ import main
from tests.conftest import _PG_SKIP

#: Rows each dialect must produce: 3 send, 4 receive, 3 drain, 2 peek, 1 purge, 1 memory (one count: each
#: memory drain is a child process that imports Airflow, the slow part of this test).
ROWS_PER_DIALECT = 14
TINY = ["--quick", "--repeats", "1", "--single", "10", "--messages", "200", "--backlog", "2000", "--peek-calls", "10",
        "--purge", "200", "--memory", "400", "--memory-batch", "100"]


def test_every_case_has_a_row_with_a_baseline_ratio(tmp_path: Path) -> None:
    dialects = ["sqlite"] if _PG_SKIP else ["sqlite", "postgres"]
    assert main([*TINY, "--dialects", ",".join(dialects), "--out", str(tmp_path)]) == 0

    payload = json.loads((tmp_path / "results.json").read_text())
    results = payload["results"]
    for dialect in dialects:
        rows = [r for r in results if r["dialect"] == dialect]
        assert len(rows) == ROWS_PER_DIALECT, [r["case"] for r in rows]
        for row in rows:
            assert row["vs_baseline"] is not None and row["vs_baseline"] > 0, row["case"]
            assert len(row["samples"]["provider"]) == 1 and len(row["samples"]["baseline"]) == 1
    for row in results:
        if row["dialect"] == "postgres" and row["case"].startswith(("send", "receive")):
            assert row["vs_peer"] is not None, row["case"]  # pgqueuer ran beside it
    assert payload["targets"] and all(t["measured"] is not None for t in payload["targets"])
    table = (tmp_path / "results.md").read_text()
    assert table.startswith("| case | db |") and "vs baseline" in table
