"""The targets (issues 8 and 20), checked against one run's results.

Every send, receive and drain case at >= 0.90x of its raw-SQL baseline in the same run; batched sends at
>= 1.0x the peer's (pgqueuer) batched enqueue; the receive, peek, purge and memory targets of issue 8.
"""

from __future__ import annotations

from typing import Any

from .report import BASELINE, PEER, PROVIDER, Result

OVERHEAD_GOAL = 0.90
PEER_SEND_GOAL = 1.0


def _target(name: str, dialect: str, measured: float | None, goal: str, met: bool) -> dict[str, Any]:
    return {"target": name, "dialect": dialect, "measured": measured, "goal": goal, "met": met}


def check(results: list[Result]) -> list[dict[str, Any]]:
    """One entry per target and database: what was measured, the goal, and whether it was met."""
    targets = []
    by_case = {(r.case, r.dialect): r for r in results}
    for r in results:
        speed = r.case.startswith(("send", "receive", "drain")) and r.metric != "peak_rss_mb"
        if speed and r.ratio(BASELINE) is not None:
            ratio = r.ratio(BASELINE)
            targets.append(_target(f"overhead: {r.case} (x baseline)", r.dialect, ratio, f">= {OVERHEAD_GOAL:.2f}",
                                   ratio >= OVERHEAD_GOAL))
        if r.case.startswith("send, batches") and r.ratio(PEER) is not None:
            ratio = r.ratio(PEER)
            targets.append(_target(f"{r.case} (x pgqueuer batched enqueue)", r.dialect, ratio,
                                   f">= {PEER_SEND_GOAL:g}", ratio >= PEER_SEND_GOAL))
    for receivers in ("1 receiver", "4 receivers"):
        single = by_case.get((f"receive, 1 per transaction, {receivers}", "postgres"))
        batched = by_case.get((f"receive, batches of 100, {receivers}", "postgres"))
        peer_rate = single.rate(PEER) if single is not None else None
        if not peer_rate:
            continue
        for result, goal, shape in ((single, 1.0, "1 per transaction"), (batched, 10.0, "batches of 100")):
            if result is not None:
                ratio = result.rate() / peer_rate
                targets.append(_target(f"receive, {shape}, {receivers} (x pgqueuer dequeue of 1)", "postgres",
                                       ratio, f">= {goal:g}", ratio >= goal))
    for dialect in sorted({r.dialect for r in results}):
        peeks = sorted((r for r in results if r.dialect == dialect and r.case.startswith("peek")),
                       key=lambda r: r.notes["backlog"])
        if len(peeks) >= 2:
            growth = peeks[-1].median() / peeks[0].median()
            targets.append(_target(f"peek at {peeks[-1].notes['backlog']:,} rows (x peek at "
                                   f"{peeks[0].notes['backlog']:,})", dialect, growth, "<= 2", growth <= 2))
        for r in results:
            if r.dialect == dialect and r.case.startswith("purge"):
                ratio = r.median(PROVIDER) / r.median(BASELINE)
                targets.append(_target(f"{r.case} (x delete by key)", dialect, ratio, "<= 2", ratio <= 2))
        memory = sorted((r for r in results if r.dialect == dialect and r.metric == "peak_rss_mb"),
                        key=lambda r: r.messages)
        if len(memory) >= 2:
            growth = memory[-1].median() / memory[0].median()
            targets.append(_target(f"drain peak RSS at {memory[-1].messages:,} (x at {memory[0].messages:,})",
                                   dialect, growth, "<= 1.5", growth <= 1.5))
    return targets
