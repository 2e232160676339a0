#!/usr/bin/env python3
"""What one receive pays for the rows deleted before it while a transaction holds the xmin horizon.

A queue-shaped table of 50,000 rows; another session holds an xid (``SELECT txid_current()``); the first 40,000
rows are deleted (as receives would); then the receive's locking select for 1 row is timed from the head of the
seq index and past the deleted rows, 60 times each, alternating. Prints the medians (ms) and the buffers the walk
from the head touches. The table is dropped at the end.

    python walk.py postgresql://bench:bench@127.0.0.1:15556/sqlqueue_bench
"""

from __future__ import annotations

import statistics
import sys
import time

import psycopg

HEAD = "SELECT seq FROM walk_q ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED"
PAST = "SELECT seq FROM walk_q WHERE seq > 39990 ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED"


def main(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS walk_q")
        c.execute("CREATE TABLE walk_q (id uuid NOT NULL PRIMARY KEY, expires timestamp, headers text NOT NULL, "
                  "body bytea, seq serial NOT NULL UNIQUE)")
        c.execute("INSERT INTO walk_q (id, headers, body) SELECT gen_random_uuid(), '{}', repeat('x', 256)::bytea "
                  "FROM generate_series(1, 50000)")
        c.execute("VACUUM ANALYZE walk_q")
        with psycopg.connect(url) as hold:
            hold.execute("SELECT txid_current()")
            c.execute("DELETE FROM walk_q WHERE seq <= 40000")
            times: dict[str, list[float]] = {"head": [], "past": []}
            for _ in range(2):
                for name, query in (("head", HEAD), ("past", PAST)):
                    for _ in range(30):
                        t = time.perf_counter()
                        c.execute(query).fetchall()
                        times[name].append((time.perf_counter() - t) * 1000)
            plan = c.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + HEAD).fetchone()[0][0]
            hold.rollback()
        print({k: round(statistics.median(v), 3) for k, v in times.items()},
              "buffers hit by the walk from the head:", plan["Plan"].get("Shared Hit Blocks"))
        c.execute("DROP TABLE walk_q")


if __name__ == "__main__":
    main(sys.argv[1])
