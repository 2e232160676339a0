"""Timing and reporting shared by every case: interleaved repeats, medians, ratios, table, JSON and Markdown.

Every figure is a ratio measured in the same run: the provider, its raw-SQL baseline (and the peer, where one
applies) run one after the other inside each repeat, in an order that turns around every repeat, so the load of a
shared machine and the position in a repeat hit them alike.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: The three contestants of a case. ``baseline`` is the floor: the fastest plain code for the same job (its own
#: SQL in bench/sql, the same driver, no provider code).
PROVIDER, BASELINE, PEER = "provider", "baseline", "peer"


@dataclass
class Result:
    """One case on one database: the samples of each contestant (seconds, or MB for memory)."""

    case: str
    dialect: str
    messages: int
    samples: dict[str, list[float]] = field(default_factory=dict)
    unit: str = "msgs"
    metric: str = "seconds"
    notes: dict[str, Any] = field(default_factory=dict)

    def median(self, who: str = PROVIDER) -> float | None:
        values = self.samples.get(who)
        return statistics.median(values) if values else None

    def rate(self, who: str = PROVIDER) -> float | None:
        """Messages (or calls, rows) per second; None for memory rows."""
        value = self.median(who)
        return None if self.metric != "seconds" or not value else self.messages / value

    def ratio(self, other: str) -> float | None:
        """``other``'s cost / the provider's cost: 1.00 = as fast (or lean) as ``other``, 0.85 = 15% behind."""
        mine, theirs = self.median(PROVIDER), self.median(other)
        return None if not mine or theirs is None else theirs / mine

    def as_dict(self) -> dict[str, Any]:
        values = self.samples.get(PROVIDER, [])
        return {**asdict(self), "median": self.median(), "min": min(values, default=None),
                "max": max(values, default=None), "rate": self.rate(), "baseline_rate": self.rate(BASELINE),
                "peer_rate": self.rate(PEER), "vs_baseline": self.ratio(BASELINE), "vs_peer": self.ratio(PEER)}


def timed(work: Callable[[], int], expected: int | None) -> float:
    """Seconds ``work()`` took; it returns how many items it handled, checked against ``expected``."""
    started = time.perf_counter()
    done = work()
    seconds = time.perf_counter() - started
    if expected is not None and done != expected:
        raise AssertionError(f"handled {done} items, expected {expected}")
    return seconds


def compare(result: Result, repeats: int, contestants: dict[str, Callable[[], int]],
            setup: Callable[[str], None] | None = None, expected: int | None = None,
            settle: Callable[[], None] | None = None) -> Result:
    """Run each contestant ``repeats`` times, interleaved, each after a fresh ``setup(who)`` (not timed).

    The order turns around every repeat (A B, B A, A B, ...): whatever the position in a repeat costs (the
    database flushing what the previous contestant wrote, a warmer cache) falls on each contestant alike.
    ``settle()`` (not timed) runs after each setup: the database writes out its dirty pages (a checkpoint), so
    no contestant pays for the one before it. Garbage is collected before each start.
    """
    expected = result.messages if expected is None else expected
    order = list(contestants.items())
    for repeat in range(repeats):
        for who, work in order if repeat % 2 == 0 else reversed(order):
            if setup is not None:
                setup(who)
            if settle is not None:
                settle()
            gc.collect()
            result.samples.setdefault(who, []).append(timed(work, expected))
    return result


# -- output ------------------------------------------------------------------------------------------
COLUMNS = ("case", "db", "messages", "median", "min", "max", "rate/s", "baseline rate/s", "vs baseline",
           "peer rate/s", "vs peer")


def _num(value: float | None) -> str:
    """3 significant digits below 100, whole numbers (with thousands separators) from 100."""
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def row_cells(result: Result) -> list[str]:
    """The table cells of one result (seconds, or MB for memory rows)."""
    values = result.samples.get(PROVIDER, [])
    suffix = " s" if result.metric == "seconds" else " MB"
    span = [_num(v) + suffix if v is not None else "-" for v in
            (result.median(), min(values, default=None), max(values, default=None))]
    ratio = [f"{r:.2f}x" if r is not None else "-" for r in (result.ratio(BASELINE), result.ratio(PEER))]
    return [result.case, result.dialect, f"{result.messages:,} {result.unit}", *span, _num(result.rate()),
            _num(result.rate(BASELINE)), ratio[0], _num(result.rate(PEER)), ratio[1]]


def text_table(results: list[Result]) -> str:
    """A plain-text table for the terminal."""
    rows = [list(COLUMNS)] + [row_cells(r) for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(results: list[Result]) -> str:
    """The same table in Markdown (included by docs/performance.md)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * 3 + "---:|" * (len(COLUMNS) - 3)]
    lines += ["| " + " | ".join(row_cells(r)) + " |" for r in results]
    return "\n".join(lines) + "\n"


def load_results(path: Path) -> tuple[list[Result], dict[str, Any]]:
    """The results and machine of a recorded ``results.json``."""
    payload = json.loads(path.read_text(encoding="utf-8"))
    names = {f.name for f in dataclasses.fields(Result)}
    return [Result(**{k: v for k, v in row.items() if k in names}) for row in payload["results"]], payload["meta"]


def write_outputs(results: list[Result], targets: list[dict[str, Any]], meta: dict[str, Any], out: Path) -> None:
    """Write ``results.json`` and ``results.md`` (table, then targets) under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    payload = {"meta": meta, "results": [r.as_dict() for r in results], "targets": targets}
    (out / "results.json").write_text(json.dumps(payload, indent=2, default=str) + "\n", encoding="utf-8")
    lines = [markdown_table(results), "", "| target | db | measured | goal | met |", "|---|---|---:|---:|---|"]
    for t in targets:
        met = "yes" if t["met"] else "**no**"
        lines.append(f"| {t['target']} | {t['dialect']} | {t['measured']:.2f} | {t['goal']} | {met} |")
    (out / "results.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
