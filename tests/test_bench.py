"""Smoke test of the benchmark harness: tiny sizes, one repeat, every case yields a row with its ratios.

No timing is asserted: speed is read from the benchmark's table, not from tests.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench.__main__ import main
from tests.conftest import _PG_SKIP, PG_URL

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


@pytest.mark.skipif(_PG_SKIP is not None, reason=str(_PG_SKIP))
def test_partitioned_drain_bench_counts_every_message(tmp_path: Path) -> None:
    """``python -m bench.partitions`` with tiny sizes: a row per number of tasks, every message drained (the
    harness raises otherwise), files and a manifest per partition."""
    from bench.partitions import main as partitions_main

    assert partitions_main(["--messages", "3000", "--tasks", "1,2", "--batch-size", "500",
                            "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "partitions.json").read_text())["rows"]
    assert [(r["tasks"], r["messages"]) for r in rows] == [(1, 3000), (2, 3000)]
    assert all(r["files"] >= 6 and len(r["per_task_seconds"]) == r["tasks"] for r in rows)
    assert "ratio to 1 task" in (tmp_path / "partitions.md").read_text()


@pytest.mark.parametrize(("case", "batch"), [("send", 1), ("send", 100), ("receive", 1), ("receive", 100),
                                             ("drain", 100)])
@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
@pytest.mark.parametrize("one_table", [False, True], ids=["own-tables", "one-table"])
def test_paired_batches_take_every_message_between_the_two(case: str, batch: int, dialect: str,
                                                            one_table: bool) -> None:
    """``python -m bench.paired``: provider and baseline take turns, each on its own table (or both on one with
    ``--one-table``); between them they send (or take) every message once, each half (they alternate batches)."""
    if dialect == "postgres" and _PG_SKIP is not None:
        pytest.skip(str(_PG_SKIP))
    from bench.paired import run

    messages = 200 if batch == 1 else 1_000
    result = run(case, dialect, messages, PG_URL, batch, one_table)
    assert result["taken"]["provider"] + result["taken"]["baseline"] == messages
    assert result["taken"]["provider"] == messages // 2 and result["taken"]["baseline"] == messages // 2
    assert result["ratio"] > 0 and result["provider_cpu_us"] > 0
    assert result["pairs"] >= 1 and result["pair_median"] > 0


@pytest.mark.parametrize("one_table", [False, True], ids=["own-tables", "one-table"])
def test_paired_lead_sends_first_and_is_counted(one_table: bool) -> None:
    """``--lead N``: the baseline sends N messages before the first turn; the run's count check includes them (a
    table short of them fails the run), and the turns still split the timed messages in two halves."""
    from bench.paired import run

    result = run("send", "sqlite", 40, PG_URL, 1, one_table, lead=3)
    assert result["taken"] == {"provider": 20, "baseline": 20}
    with pytest.raises(ValueError, match="--lead is for --case send"):
        run("receive", "sqlite", 40, PG_URL, 1, one_table, lead=3)


def test_wake_writers_bench_measures_every_set_up(capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m bench.wake_writers``: one writer process, every set-up a round, a few wake-up trials."""
    if _PG_SKIP is not None:
        pytest.skip(str(_PG_SKIP))
    from bench.wake_writers import SETUPS
    from bench.wake_writers import main as wake_main

    wake_main(["--writers", "1", "--repeats", "1", "--seconds", "0.2", "--trials", "3", "--pg-url", PG_URL])
    out = capsys.readouterr().out
    assert all(f"{setup:<24} round 1" in out for setup in SETUPS), out
    assert "wake-up after a plain INSERT's commit, 3 trials" in out
    assert "ratio to plain round by round" in out and "| wake lock, watcher | 1 |" in out, out


def test_trigger_cost_bench_times_every_trigger_and_leaves_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m bench.trigger_cost``: a row per trigger set-up, each INSERT committed; its schema is dropped."""
    if _PG_SKIP is not None:
        pytest.skip(str(_PG_SKIP))
    import psycopg

    from bench.trigger_cost import SETUPS
    from bench.trigger_cost import main as cost_main

    cost_main(["--rounds", "2", "--inserts", "20", "--pg-url", PG_URL])
    out = capsys.readouterr().out
    assert all(f"\n{setup} | " in out for setup in SETUPS), out
    with psycopg.connect(PG_URL) as conn:
        left = conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'bench_trigger_%'").fetchone()
    assert left == (0,)


def test_wake_writers_statistics() -> None:
    """The round-by-round ratios: a seeded bootstrap interval around the median, one-sided sign-test p-values."""
    from bench.wake_writers import bootstrap_median, paired_ratios, sign_test

    assert paired_ratios({"plain": [100.0, 200.0], "x": [90.0, 210.0]}, "x") == [0.9, 1.05]
    ratios = [1.0 + i / 100 for i in range(20)]  # all above 0.95
    low, high = bootstrap_median(ratios)
    assert low <= 1.095 <= high and bootstrap_median(ratios) == (low, high)
    below, counted, p_below, p_above = sign_test(ratios, 0.95)
    assert (below, counted) == (0, 20) and p_below == 1.0 and p_above == pytest.approx(0.5 ** 20)
    assert sign_test([0.95, 0.9, 1.0], 0.95)[:2] == (1, 2)  # a tie is left out


@pytest.mark.skipif(not (Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists() and os.geteuid() == 0),
                    reason="needs root and the cgroup v1 cpu controller")
def test_slow_cpu_runs_a_command_on_one_throttled_core(capfd: pytest.CaptureFixture[str]) -> None:
    """``python -m bench.slow_cpu``: the command runs on the one core in a throttled cgroup, removed afterwards."""
    from bench.slow_cpu import main as slow_main

    code = slow_main(["--share", "0.25", "--cpu", "0", "--", "-c",
                      "import os; print('cores', sorted(os.sched_getaffinity(0)))"])
    out = capfd.readouterr().out
    assert code == 0 and "cores [0]" in out and "nr_throttled" in out, out
    assert not list(Path("/sys/fs/cgroup/cpu").glob("sqlqueue_slow_cpu_*"))


@pytest.mark.heavy  # ~30 s on a busy 2-core machine (checkpoints, vacuums)
@pytest.mark.skipif(_PG_SKIP is not None, reason=str(_PG_SKIP))
def test_drain_rounds_drain_every_copied_message(tmp_path: Path) -> None:
    """``python -m bench.drain_rounds`` with tiny sizes: every queue is a copy of one generated round (``copy_typed``)
    and both drains write every message of every round to Parquet (the harness raises otherwise)."""
    from bench.drain_rounds import main as rounds_main

    assert rounds_main(["--messages", "600", "--rounds", "2", "--batch-size", "100", "--pg-url", PG_URL,
                        "--work", str(tmp_path / "work"), "--out", str(tmp_path)]) == 0
    samples = json.loads((tmp_path / "drain_rounds.json").read_text())["samples"]
    assert sorted((s["round"], s["kind"]) for s in samples) == [(0, "hand"), (0, "provider"), (1, "hand"),
                                                                (1, "provider")]
