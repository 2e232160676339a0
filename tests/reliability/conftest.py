"""The figures of the reliability suite, as one table at the end of the pytest run (for the closing note)."""

from __future__ import annotations

import pytest

from .helpers import MESSAGES, RESULTS, SEED

COLUMNS = ("test", "db", "messages", "faults", "lost")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print every test's figures (messages, faults injected, lost) as a Markdown table."""
    if not RESULTS:
        return
    rows = [[str(r[c]) for c in COLUMNS] + [" ".join(f"{k}={v}" for k, v in r.items()
                                                     if k not in COLUMNS and k != "seed")] for r in RESULTS]
    total_lost = sum(r["lost"] for r in RESULTS)
    rows.append(["**total**", "", str(sum(r["messages"] for r in RESULTS)), str(sum(r["faults"] for r in RESULTS)),
                 f"**{total_lost}**", f"{len(RESULTS)} runs"])
    header = [*COLUMNS, "details"]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)) + " |"

    terminalreporter.section(f"reliability figures (SQLQUEUE_RELIABILITY_MESSAGES={MESSAGES}, seed={SEED})")
    terminalreporter.write_line(line(header))
    terminalreporter.write_line("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        terminalreporter.write_line(line(row))
