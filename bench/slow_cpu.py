"""Run a bench command on a slower CPU: one core, and a CPU-time quota on that core (a cgroup's CFS bandwidth).

    sudo-less as root: python -m bench.slow_cpu --share 0.25 --cpu 1 -- -m bench.paired --case send --batch 1 ...

The command runs on core ``--cpu`` (``taskset -c``) in a cgroup of its own whose quota is ``--share`` of one core
per ``--period-us`` (default 4,000 µs: the kernel takes no quota under 1,000 µs, so 4 ms is the shortest period
for a quarter of a core; a short period spreads the stalls over the calls). What the client does on the CPU
(Python, the driver, SQLite, which runs in the process, the kernel's work for its system calls) gets ``share`` of
the core; time spent waiting (an fsync, a PostgreSQL server's reply: the server is not in the cgroup) uses no
quota. A cost per call that hides behind an fsync on a fast core shows. Harsher than a real slower CPU: a wait
that ends inside a period overlaps the throttled rest of it, so while the client needs more than ``share`` of a
core its waits hide and the wall ratio of two contestants tends to the ratio of their CPU times. Both contestants
of ``bench.paired`` alternate in the one process, on the same slowed core.

Needs root and the cgroup ``cpu`` controller (v1: ``/sys/fs/cgroup/cpu``; v2: ``cpu.max``); the cgroup is removed
afterwards. Prints the cgroup's throttling figures (periods throttled, time throttled) after the command.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

V1 = Path("/sys/fs/cgroup/cpu")
V2 = Path("/sys/fs/cgroup")


def make_group(share: float, period_us: int) -> tuple[Path, str]:
    """A new cgroup with the quota set; (its directory, the file to write a pid into)."""
    name = f"sqlqueue_slow_cpu_{os.getpid()}"
    quota = max(1000, int(share * period_us))
    if (V1 / "cpu.cfs_quota_us").exists():
        group = V1 / name
        group.mkdir()
        (group / "cpu.cfs_period_us").write_text(str(period_us))
        (group / "cpu.cfs_quota_us").write_text(str(quota))
        return group, "tasks"
    if (V2 / "cgroup.controllers").exists() and "cpu" in (V2 / "cgroup.controllers").read_text().split():
        group = V2 / name
        group.mkdir()
        (group / "cpu.max").write_text(f"{quota} {period_us}")
        return group, "cgroup.procs"
    raise SystemExit("no cgroup cpu controller found (needs root and /sys/fs/cgroup/cpu or cgroup v2 cpu.max)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.slow_cpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--share", type=float, default=0.25, help="CPU time per period, as a share of one core")
    parser.add_argument("--period-us", type=int, default=4000)
    parser.add_argument("--cpu", type=int, default=1, help="the one core the command runs on (taskset -c)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the Python arguments (-m bench....)")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --, e.g. -- -m bench.paired --case send --batch 1")
    if args.share * args.period_us < 1000:
        parser.error("the quota must be at least 1,000 µs a period: raise --period-us or --share")
    group, tasks = make_group(args.share, args.period_us)
    try:
        def enter() -> None:  # in the child, before exec: into the cgroup, then onto the one core
            (group / tasks).write_text(str(os.getpid()))
            os.sched_setaffinity(0, {args.cpu})

        print(f"slow CPU: core {args.cpu}, {args.share:g} of it ({int(args.share * args.period_us)} µs every "
              f"{args.period_us} µs), cgroup {group}", flush=True)
        began = time.monotonic()
        code = subprocess.call([sys.executable, *command], preexec_fn=enter)  # noqa: S603 - the user's command
        stat = (group / "cpu.stat").read_text().split() if (group / "cpu.stat").exists() else []
        figures = dict(zip(stat[::2], stat[1::2], strict=False))
        print(f"slow CPU: {time.monotonic() - began:.1f} s; cgroup cpu.stat {figures}", flush=True)
        return code
    finally:
        for _ in range(50):  # the child has exited; its cgroup empties a moment later
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)


if __name__ == "__main__":
    raise SystemExit(main())
