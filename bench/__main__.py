"""Run the benchmarks: ``python -m bench [--quick] [--cases ...] [--dialects ...] [--out DIR]``.

Every case runs on SQLite (a temp file) and on PostgreSQL (a ``bench_<random>`` schema, dropped at the end),
beside its raw-SQL baseline and, on PostgreSQL, pgqueuer. Prints the table and writes ``results.json`` and
``results.md`` under ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import platform
import sqlite3
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import drain, memory, peek, purge, receive, send
from .databases import DEFAULT_PG_URL, BenchDb
from .peer import Pgqueuer
from .report import Result, load_results, text_table, write_outputs
from .sizes import QUICK, Sizes
from .targets import check

CASES = ("send", "receive", "drain", "peek", "purge", "memory")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes and 1 repeat (a smoke run)")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated subset of {','.join(CASES)}")
    parser.add_argument("--dialects", default="sqlite,postgres", help="sqlite, postgres or both")
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL)
    parser.add_argument("--no-peer", action="store_true", help="skip pgqueuer")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--from-json", type=Path, help="print and rewrite the tables of a recorded results.json")
    for field in dataclasses.fields(Sizes):
        flag = "--" + field.name.replace("_", "-")
        if field.name == "memory":
            parser.add_argument(flag, type=lambda text: tuple(int(x) for x in text.split(",")),
                                help="message counts, comma-separated")
        else:
            parser.add_argument(flag, type=int)
    args = parser.parse_args(argv)
    unknown = set(args.cases.split(",")) - set(CASES)
    if unknown:
        parser.error(f"unknown cases {sorted(unknown)}; choose from {', '.join(CASES)}")
    return args


def sizes_of(args: argparse.Namespace) -> Sizes:
    base = QUICK if args.quick else Sizes()
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(Sizes) if getattr(args, f.name) is not None}
    return dataclasses.replace(base, **given)


def machine(pg_url: str) -> dict[str, Any]:
    """What the figures were measured on."""
    info: dict[str, Any] = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                            "python": platform.python_version(), "sqlite": sqlite3.sqlite_version,
                            "cpus": os.cpu_count(), "platform": platform.platform(),
                            "load_average": os.getloadavg()}
    try:
        import psycopg

        with psycopg.connect(pg_url, connect_timeout=3) as conn:
            info["postgres"] = conn.execute("SHOW server_version").fetchone()[0]
    except Exception as exc:  # noqa: BLE001 - reported, not fatal
        info["postgres"] = f"unreachable: {exc}"
    try:
        info["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                        cwd=Path(__file__).parent, check=False).stdout.strip()
    except OSError:
        pass
    return info


def run_dialect(dialect: str, cases: list[str], sizes: Sizes, pg_url: str, with_peer: bool) -> list[Result]:
    db = BenchDb.open(dialect, pg_url)
    try:
        peer = Pgqueuer(db) if with_peer and dialect == "postgres" else None
        groups = {"send": lambda: send.run(db, sizes, peer), "receive": lambda: receive.run(db, sizes, peer),
                  "drain": lambda: drain.run(db, sizes), "peek": lambda: peek.run(db, sizes),
                  "purge": lambda: purge.run(db, sizes), "memory": lambda: memory.run(db, sizes)}
        results: list[Result] = []
        for case in cases:
            print(f"[{datetime.now():%H:%M:%S}] {dialect}: {case}", file=sys.stderr, flush=True)
            results += groups[case]()
        return results
    finally:
        db.close()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.from_json is not None:
        results, meta = load_results(args.from_json)
    else:
        sizes = sizes_of(args)
        cases = [c for c in CASES if c in args.cases.split(",")]
        meta = {**machine(args.pg_url), "sizes": dataclasses.asdict(sizes), "argv": sys.argv[1:]}
        results = []
        for dialect in args.dialects.split(","):
            results += run_dialect(dialect, cases, sizes, args.pg_url, not args.no_peer)
        meta["load_average_end"] = os.getloadavg()
    targets = check(results)
    print(text_table(results))
    print()
    for t in targets:
        print(f"{'met ' if t['met'] else 'MISS'}  {t['dialect']:8}  {t['target']}: {t['measured']:.2f} ({t['goal']})")
    write_outputs(results, targets, meta, args.out)
    print(f"\nwrote {args.out / 'results.json'} and {args.out / 'results.md'}")
    return 0


if __name__ == "__main__":
    # no per-purge info lines between the tables; set here, not in main(), so an in-process caller keeps its own
    logging.getLogger("airflow_sqlqueue").setLevel(logging.WARNING)
    raise SystemExit(main())
