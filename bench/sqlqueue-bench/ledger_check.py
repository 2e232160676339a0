#!/usr/bin/env python3
"""Exact lost and duplicated messages across every adapter process of a run (killed ones too), from the journals
``SQLQUEUE_LEDGER_DIR`` collected: ``python ledger_check.py DIR``."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path


def check(folder: Path) -> dict[str, int]:
    confirmed: set[tuple[str, int]] = set()
    unknown: set[tuple[str, int]] = set()
    handled: Counter[tuple[str, int]] = Counter()
    for journal in folder.glob("*.log"):
        for line in journal.read_text().splitlines():
            parts = line.split()
            if len(parts) == 4 and parts[0] in ("s", "u"):
                first, n = int(parts[2]), int(parts[3])
                (confirmed if parts[0] == "s" else unknown).update((parts[1], s) for s in range(first, first + n))
            elif len(parts) == 3 and parts[0] == "h":
                handled[(parts[1], int(parts[2]))] += 1
    seen = set(handled)
    return {"processes": len(list(folder.glob("*.log"))), "confirmed": len(confirmed),
            "unknown_outcome": len(unknown), "handled": len(seen),
            "duplicate_deliveries": sum(c - 1 for c in handled.values()),
            "confirmed_not_handled": len(confirmed - seen), "unknown_outcome_handled": len(unknown & seen)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("folder", type=Path)
    args = parser.parse_args()
    print(json.dumps(check(args.folder)))


if __name__ == "__main__":
    main()
