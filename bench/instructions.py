"""Instructions a call, provider and hand loop, counted by valgrind: what the wall ratio tends to on a slow CPU.

    python -m bench.instructions --case send --calls 1000        # one message a call, SQLite
    python -m bench.instructions --case receive --calls 100      # batches of 100
    python -m bench.instructions --case receive --calls 1000 --batch 1   # one message a receive
    python -m bench.instructions --case receive --calls 100 --dialect postgres   # the client's side only

The one-message and batch calls of ``bench.paired`` on SQLite (the database runs in the process, so its work is
counted too), each contestant in its own process under ``valgrind --tool=cachegrind --cache-sim=no``: the
instructions of a run with ``--calls`` calls minus those of a run with none (start-up, set-up and two warm-up
calls cancel), divided by the calls. User-space instructions only: the kernel's work (write, fsync) is the same
for both and not counted; on PostgreSQL the server is another process: only the client's instructions count.
Deterministic within about 1 % (random Ids), and independent of the load of a shared
machine, where CPU times are not.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys


def _work(case: str, who: str, calls: int, dialect: str = "sqlite", batch: int = 100, fill: int = 0) -> None:
    """The counted process: set up (a receive's backlog of ``fill`` rows, the same in both runs of a count, so that
    filling cancels), warm up, then ``calls`` calls of one contestant."""
    from .databases import DEFAULT_PG_URL, BenchDb, outgoing
    from .receive import baseline_receive_batch
    from .send import baseline_sender

    db = BenchDb.open(dialect, DEFAULT_PG_URL)
    queue = f"count_{who}"
    with db.transport() as transport:
        db.reset(queue)
        address = db.address(queue)
        conn = db.connect(autocommit=True)
        if case == "send":
            messages = outgoing(2)  # the same two sent again (each send gets its own Id): no cost that grows
            if who == "provider":
                for i in range(calls + 2):
                    transport.send(address, messages[i % 2])
            else:
                send = baseline_sender(db, conn, queue, 1)
                for _ in range(calls + 2):
                    send(1)
        else:
            db.fill(queue, max(fill, batch * (calls + 2)))
            db.settle()
            if who == "provider":
                for _ in range(calls + 2):
                    transport.receive(address, batch)
            else:
                receive = baseline_receive_batch(db, queue, conn, batch)
                for _ in range(calls + 2):
                    receive()
        conn.close()
    db.close()


def count(case: str, who: str, calls: int, dialect: str = "sqlite", batch: int = 100, fill: int = 0) -> int:
    """User-space instructions of one process doing ``calls`` calls (a receive on a backlog of ``fill`` rows)."""
    done = subprocess.run(  # noqa: S603 - our own interpreter and module
        ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null", sys.executable,
         "-m", "bench.instructions", "--work", case, who, str(calls), dialect, str(batch), str(fill)],
        capture_output=True, text=True, check=True)
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in valgrind's output: {done.stderr[-500:]}")
    return int(found.group(1).replace(",", ""))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=("send", "receive"), default="send")
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--dialect", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--batch", type=int, default=100, help="messages a receive (send: always 1)")
    parser.add_argument("--work", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.work:
        case, who, calls, dialect, batch, fill = args.work
        _work(case, who, int(calls), dialect, int(batch), int(fill))
        return
    per_call = {}
    for who in ("provider", "baseline"):
        fill = args.batch * (args.calls + 2)  # the same backlog in both runs: filling it cancels
        calls = (count(args.case, who, args.calls, args.dialect, args.batch, fill)
                 - count(args.case, who, 0, args.dialect, args.batch, fill))
        per_call[who] = calls / args.calls
    per = "message" if args.case == "send" else f"call of {args.batch} messages"
    print(f"{args.case} on {args.dialect}, {args.calls} calls: provider {per_call['provider']:,.0f} instructions "
          f"a {per}, "
          f"baseline {per_call['baseline']:,.0f}: {per_call['baseline'] / per_call['provider']:.2f}x")


if __name__ == "__main__":
    main()
