"""Peak memory (RSS) of draining 100,000 and 1,000,000 messages to Parquet: it must not grow with the count.

Each drain runs in a child process (``python -m bench.memory ...``) that reports its own peak RSS (``VmHWM``)
when it is done. The provider child drains with ``transport.drain`` and the drain operator's Parquet sink; the
baseline child with hand-written DELETE ... RETURNING and pyarrow. The child also reports its RSS after its
imports (before the first message), so the growth during the drain can be told from the import cost.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from .databases import BenchDb
from .report import BASELINE, PROVIDER, Result
from .sizes import Sizes

QUEUE = "bench_memory"


def rss_mb(field: str) -> float:
    """``VmHWM`` (peak) or ``VmRSS`` (now) of this process in MB, from /proc (per address space, so a peak
    inherited from the parent before exec is not counted, as it is in ``ru_maxrss``)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # not Linux: KiB on most systems


def drain_in_child(db: BenchDb, who: str, batch: int) -> dict[str, float]:
    """Drain QUEUE in a child process; return its peak RSS (MB), RSS after imports, seconds and count."""
    out = db.workdir / f"memory-{who}"
    command = [sys.executable, "-m", "bench.memory", "--dialect", db.dialect, "--url", db.url, "--queue", QUEUE,
               "--who", who, "--batch", str(batch), "--out", str(out)]
    if db.schema:
        command += ["--schema", db.schema]
    child = subprocess.run(command, stdout=subprocess.PIPE, cwd=Path(__file__).parent.parent, check=True)
    for path in out.glob("*.parquet"):
        path.unlink()
    return json.loads(child.stdout.decode().strip().splitlines()[-1])


def run(db: BenchDb, sizes: Sizes) -> list[Result]:
    results = []
    for count in sizes.memory:
        result = Result(f"drain to Parquet, peak RSS, batches of {sizes.memory_batch:,}", db.dialect, count,
                        metric="peak_rss_mb", notes={"after_imports_mb": {}, "seconds": {}})
        for _ in range(sizes.memory_repeats):
            for who in (BASELINE, PROVIDER):
                db.reset(QUEUE)
                db.fill(QUEUE, count)
                report = drain_in_child(db, who, sizes.memory_batch)
                if report["count"] != count:
                    raise AssertionError(f"{who} drained {report['count']} of {count} messages")
                result.samples.setdefault(who, []).append(report["peak_mb"])
                result.notes["after_imports_mb"].setdefault(who, []).append(report["after_imports_mb"])
                result.notes["seconds"].setdefault(who, []).append(report["seconds"])
        results.append(result)
        db.execute("drop_queue", QUEUE)
    return results


# -- the child -----------------------------------------------------------------------------------------------
def child_main(argv: list[str] | None = None) -> None:
    from .drain import baseline_to_parquet, parquet_sink, provider_to_parquet

    parser = argparse.ArgumentParser(description="drain one queue to Parquet (a child of the memory case)")
    for flag in ("--dialect", "--url", "--queue", "--who", "--out"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--schema")
    parser.add_argument("--batch", type=int, required=True)
    args = parser.parse_args(argv)
    out = Path(args.out)
    db = BenchDb(args.dialect, args.url, args.schema, out.parent)
    if args.who == PROVIDER:
        parquet_sink(out)  # import the operator module before measuring the RSS after imports
        work = provider_to_parquet(db, args.queue, out, args.batch)
    else:
        import pyarrow.parquet  # noqa: F401 - imported up front, as the provider child does

        work = baseline_to_parquet(db, args.queue, out, args.batch)
    after_imports = rss_mb("VmRSS")
    started = time.perf_counter()
    count = work()
    seconds = time.perf_counter() - started
    print(json.dumps({"count": count, "seconds": seconds, "after_imports_mb": after_imports,
                      "peak_mb": rss_mb("VmHWM")}))


if __name__ == "__main__":
    child_main()
